"""benchmarks/moe_models.py (issue 38): the sparse qwen3moe models the device measures are the planner's recorded
30B-A3B header (one Q4_K_M tensor table, tests/fixtures/build_moe_fixtures.py), read by gguf_info like any GGUF;
and measure_llamacpp_buffers passes the expert settings and reads the host's memory. The loads themselves run on
the device (benchmarks/measure_llamacpp_buffers.py --set cuda-h200-moe)."""
import os

import pytest

import measure_llamacpp_buffers as measure
import moe_models
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import plan
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts
from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib

GIB = 1024 ** 3
SAME = ("tensor_bytes", "expert_bytes", "expert_tensor_bytes_max", "n_ff_exp", "non_expert_bytes", "kind")


def test_the_real_size_model_is_the_recorded_30b_a3b_header(tmp_path):
    entry = moe_models.write("qwen3moe_r", tmp_path / "r.gguf")
    assert os.stat(entry["path"]).st_blocks * 512 < 64 << 20          # a hole, not 17 GiB on disk
    f, rec = gguf_facts(entry["path"]), lib.fixture("qwen3moe_30b_a3b")
    for key in ("architecture", "block_count", "expert_count", "expert_used_count", "expert_feed_forward_length",
                "expert_bytes_total", "tensor_bytes_total", "token_embd_bytes", "output_bytes", "vocab_size",
                "context_length", "embedding_length"):
        assert f[key] == rec[key], key
    assert [[L[k] for k in SAME] for L in f["layers"]] == [[L[k] for k in SAME] for L in rec["layers"]]
    card = [{"name": "RTX 3090", "vram_total_bytes": 24 * GIB}]
    serve = {"backend": "cuda", "ctx_size": 65536, "n_cpu_moe": 24, "floor_bytes": GIB // 2}
    assert plan(card, f, serve, host_ram_bytes=64 * GIB)["devices"] == plan(card, rec, serve, host_ram_bytes=64 * GIB)["devices"]


def test_the_small_model_has_the_same_graph_and_whole_quant_blocks(tmp_path):
    f = gguf_facts(moe_models.write("qwen3moe_s", tmp_path / "s.gguf")["path"])
    assert (f["architecture"], f["expert_count"], f["expert_used_count"], f["moe_planned"]) == ("qwen3moe", 16, 4, True)
    assert f["expert_layers"] == 4 and all(L["expert_bytes"] > 0 for L in f["layers"])


def test_the_held_out_model_shares_no_expert_shape_with_the_fitted_one(tmp_path):
    """issue 38's held-out loads: another expert count, width, used count and n_embd than qwen3moe_r, and a
    feed_forward_length that is not n_ff_exp x used (the planner must read the experts' own width)."""
    h = gguf_facts(moe_models.write("qwen3moe_h", tmp_path / "h.gguf")["path"])
    r = lib.fixture("qwen3moe_30b_a3b")
    for key in ("expert_count", "expert_used_count", "expert_feed_forward_length", "embedding_length", "block_count"):
        assert h[key] != r[key], key
    assert h["moe_planned"] and h["expert_feed_forward_length"] == 1280
    assert h["feed_forward_length"] != 1280 * 6
    ids = [c["id"] for c in measure.SETS["cuda-h200-moe2"]()]
    assert len(ids) == len(set(ids)) == 7 and all(i.startswith("qwen3moe_h-") for i in ids)
    assert not set(ids) & set(c["id"] for c in measure.SETS["cuda-h200-moe"]())


def test_a_recipe_off_the_quant_blocks_is_refused(tmp_path, monkeypatch):
    monkeypatch.setitem(moe_models.MODELS, "odd", dict(moe_models.MODELS["qwen3moe_s"], n_embd=200))
    with pytest.raises(ValueError, match=r"odd: token_embd\.weight \[200, 512\] is not a whole number of Q4_K blocks"):
        moe_models.write("odd", tmp_path / "odd.gguf")
    assert list(tmp_path.iterdir()) == []                               # nothing half-written is left


@pytest.mark.parametrize("where, flags", [({}, []), ({"n_cpu_moe": 24}, ["--n-cpu-moe", "24"]),
                                          ({"cpu_moe": True, "load_mode": "none"}, ["--cpu-moe", "--load-mode", "none"])])
def test_the_harness_passes_the_expert_settings(where, flags):
    argv = measure.common_args(measure.normalize(dict({"model": "/m.gguf"}, **where)), [])
    got = [a for a in argv if a in ("--n-cpu-moe", "--cpu-moe", "--load-mode")]
    assert got == [f for f in flags if f.startswith("--")]
    for i, a in enumerate(argv):
        if a in ("--n-cpu-moe", "--load-mode"):
            assert argv[i + 1] == flags[flags.index(a) + 1]


def test_the_host_memory_is_read_from_proc():
    mem = measure.host_memory(os.getpid())
    assert mem["process"]["VmRSS"] > 0 and mem["host"]["MemTotal"] >= mem["host"]["MemAvailable"] > 0
    assert measure.host_memory(None)["process"] is None


def test_the_moe_set_covers_the_issue_placements():
    ids = [c["id"] for c in measure.SETS["cuda-h200-moe"]()]
    assert any(i.endswith("-cuda") and "moe" not in i.split("qwen3moe_r")[1] for i in ids)
    assert any("-ts11" in i for i in ids) and sum("-ncmoe" in i for i in ids) == 2
    assert any("-cmoe-lmnone-" in i for i in ids)
    assert all(c["long_prompt"] == measure.MOE_LONG_PROMPT and c["request"] for c in measure.SETS["cuda-h200-moe"]())
