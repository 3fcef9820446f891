"""Differential: gguf_info's parser and facts against gguf.GGUFReader and the generator's own manifest,
on every model tests/lab/gen_models.py writes (small scale; f16 and q8_0 tensors)."""
import gen_models
import pytest

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import facts_from_gguf
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import read_gguf


@pytest.mark.parametrize("tensor_type", ["f16", "q8_0"])
@pytest.mark.parametrize("kind", gen_models.MODEL_NAMES)
def test_generated_model(tmp_path, kind, tensor_type):
    entry = gen_models.write_model(kind, tmp_path / ("%s.gguf" % kind), tensor_type=tensor_type)
    g = lib.assert_same_as_gguf_reader(entry["path"])
    f = facts_from_gguf(g)
    assert f["architecture"] == entry["architecture"]
    assert f["architecture_supported"]
    assert f["file_size"] == entry["size"]
    assert f["tensor_count"] == entry["n_tensors"]
    assert f["tensor_bytes_total"] == entry["tensor_bytes"]
    assert f["block_count"] == entry["block_count"]
    assert f["n_layer"] == entry["n_layer"]
    assert f["layer_kinds"] == entry["layer_kinds"]
    assert f["context_length"] == entry["context_length"]
    assert f["embedding_length"] == entry["n_embd"]
    assert f["vocab_size"] == entry["n_vocab"]
    assert f["nextn_predict_layers"] == entry.get("nextn_predict_layers", 0)
    for L in f["layers"]:
        if L["kind"] in ("attention", "swa", "nextn"):
            assert (L["n_head_kv"], L["key_length"], L["value_length"]) == (
                entry["n_head_kv"], entry["head_dim"], entry["head_dim"])
        assert L["tensor_bytes"] == sum(t.nbytes for t in g.tensors if t.name.startswith("blk.%d." % L["index"]))
    if "ssm" in entry:
        assert f["ssm"] == entry["ssm"]
        assert f["recurrent_state"]["bytes_per_layer_per_seq"] > 0
    for key in ("sliding_window", "block_size", "selector_top_k", "mask_token_id"):
        if key in entry:
            assert f[key] == entry[key], key
    if "selector_rank" in entry:
        assert f["drafter"]["selector_rank"] == entry["selector_rank"]
        assert f["drafter"]["target_layers"] == entry["target_layers"]
        assert f["drafter"]["kind"] == "dflash2"
    # every tensor is accounted for exactly once: blocks + host input + output device
    assert (sum(L["tensor_bytes"] for L in f["layers"]) + f["token_embd_bytes"]
            + f["output_bytes"] - (f["token_embd_bytes"] if f["output_tied"] else 0)) == f["tensor_bytes_total"]


def test_planner_consumes_generated_facts(tmp_path):
    """End to end on generated headers: the planner sizes every target kind without complaint."""
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import plan
    gpus = [{"name": "RPC0", "vram_total_bytes": 512 * lib.MIB}, {"name": "RPC1", "vram_total_bytes": 512 * lib.MIB}]
    for kind in gen_models.MODEL_NAMES:
        if gen_models.ROLES[kind]["role"] != "target":
            continue
        facts = facts_from_gguf(read_gguf(
            gen_models.write_model(kind, tmp_path / ("%s.gguf" % kind))["path"]))
        serve = {"backend": "cpu", "ctx_size": 4096, "parallel": 2, "tensor_split": "auto"}
        drafter = None
        spec = gen_models.ROLES[kind].get("spec_type")
        if spec == "draft-mtp":
            serve.update(spec_type=["draft-mtp"], spec_draft_n_max=3)
        elif spec == "draft-dflash":
            d = gen_models.write_model("draft-dflash", tmp_path / "draft-dflash.gguf")
            drafter = facts_from_gguf(read_gguf(d["path"]))
            serve.update(spec_type=["draft-dflash"], spec_draft_n_max=7)
        r = plan(gpus, facts, serve, drafter=drafter)
        assert r["fits"], (kind, r["errors"])
        assert sum(r["tensor_split"]) == facts["block_count"]
