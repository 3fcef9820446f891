"""Mixture-of-Experts facts (issue 38): gguf_facts reports the expert count, the experts used per token, the expert
and shared-expert FFN widths the graph multiplies by, and per block the bytes of the routed expert tensors apart
from the rest -- read off real GGUF headers written with the gguf package, for the MoE layouts llama.cpp b11434
loads (src/llama-model.cpp load_tensors)."""
import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import MOE_PLANNED_ARCHS, gguf_facts
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError, tensor_nbytes, GGML_TYPE_IDS

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
SETTINGS = dict(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
N_EMBD, N_LAYER, HEAD_DIM = 64, 4, 16


def nbytes(shape, typ):
    return tensor_nbytes(GGML_TYPE_IDS[typ], shape)


def moe_model(tmp_path, arch="qwen3moe", n_expert=8, n_used=2, n_ff_exp=32, n_ff=96, shexp=0, key_exp=True,
              gate_up=False, n_layer=N_LAYER, kv_extra=None, name="m.gguf", down_type="Q8_0"):
    """A small MoE header of the shape llama.cpp b11434 creates for qwen3moe/qwen2moe/mixtral-style llama."""
    a = arch + "."
    kv = {a + "block_count": n_layer, a + "context_length": 4096, a + "embedding_length": N_EMBD,
          a + "feed_forward_length": n_ff, a + "attention.head_count": 4, a + "attention.head_count_kv": 2,
          a + "attention.key_length": HEAD_DIM, a + "attention.value_length": HEAD_DIM, a + "rope.freq_base": 1e6,
          a + "expert_count": n_expert, a + "expert_used_count": n_used}
    if key_exp:
        kv[a + "expert_feed_forward_length"] = n_ff_exp
    if shexp:
        kv[a + "expert_shared_feed_forward_length"] = shexp
    kv.update(kv_extra or {})
    t = {"token_embd.weight": ([N_EMBD, 128], "Q8_0"), "output_norm.weight": ([N_EMBD], "F32"),
         "output.weight": ([N_EMBD, 128], "Q8_0")}
    for il in range(n_layer):
        p = "blk.%d." % il
        t[p + "attn_norm.weight"] = ([N_EMBD], "F32")
        t[p + "attn_q.weight"] = ([N_EMBD, 4 * HEAD_DIM], "Q8_0")
        t[p + "attn_k.weight"] = ([N_EMBD, 2 * HEAD_DIM], "Q8_0")
        t[p + "attn_v.weight"] = ([N_EMBD, 2 * HEAD_DIM], "Q8_0")
        t[p + "attn_output.weight"] = ([4 * HEAD_DIM, N_EMBD], "Q8_0")
        t[p + "ffn_norm.weight"] = ([N_EMBD], "F32")
        t[p + "ffn_gate_inp.weight"] = ([N_EMBD, n_expert], "F32")
        if gate_up:
            t[p + "ffn_gate_up_exps.weight"] = ([N_EMBD, 2 * n_ff_exp, n_expert], "Q8_0")
        else:
            t[p + "ffn_gate_exps.weight"] = ([N_EMBD, n_ff_exp, n_expert], "Q8_0")
            t[p + "ffn_up_exps.weight"] = ([N_EMBD, n_ff_exp, n_expert], "Q8_0")
        t[p + "ffn_down_exps.weight"] = ([n_ff_exp, N_EMBD, n_expert], down_type)
        if shexp:
            t[p + "ffn_gate_inp_shexp.weight"] = ([N_EMBD], "F32")
            t[p + "ffn_gate_shexp.weight"] = ([N_EMBD, shexp], "Q8_0")
            t[p + "ffn_up_shexp.weight"] = ([N_EMBD, shexp], "Q8_0")
            t[p + "ffn_down_shexp.weight"] = ([shexp, N_EMBD], "Q8_0")
    return lib.write_gguf(tmp_path / name, arch, kv, t)


def test_qwen3moe_reports_experts_and_their_bytes_per_block(tmp_path):
    f = gguf_facts(moe_model(tmp_path, n_ff_exp=32, n_ff=96, down_type="F16"))
    assert (f["is_moe"], f["expert_count"], f["expert_used_count"]) == (True, 8, 2)
    assert f["expert_feed_forward_length"] == 32 and f["feed_forward_length"] == 96
    assert f["expert_shared_feed_forward_length"] is None
    assert f["moe_planned"] is True and f["architecture_supported"] is True
    per_block = 2 * nbytes([N_EMBD, 32, 8], "Q8_0") + nbytes([32, N_EMBD, 8], "F16")
    for L in f["layers"]:
        assert L["expert_bytes"] == per_block
        assert L["expert_tensor_bytes_max"] == nbytes([32, N_EMBD, 8], "F16")
        assert L["expert_bytes"] + L["non_expert_bytes"] == L["tensor_bytes"]
        assert L["non_expert_bytes"] >= nbytes([N_EMBD, 8], "F32")        # the router stays with the block
        assert (L["n_ff_exp"], L["n_ff_shexp"]) == (32, 0)
    assert f["expert_layers"] == N_LAYER and f["expert_bytes_total"] == N_LAYER * per_block


def test_the_expert_width_is_the_tensors_not_the_key(tmp_path):
    """build_moe_ffn multiplies by ffn_up_exps: a key that disagrees (or is absent) does not change the width."""
    assert gguf_facts(moe_model(tmp_path, key_exp=False, n_ff_exp=48, name="a.gguf"))["expert_feed_forward_length"] == 48
    f = gguf_facts(moe_model(tmp_path, n_ff_exp=48, kv_extra={"qwen3moe.expert_feed_forward_length": 16}, name="b.gguf"))
    assert f["expert_feed_forward_length"] == 48


def test_qwen2moe_reports_the_shared_expert_width_and_keeps_it_out_of_the_expert_bytes(tmp_path):
    f = gguf_facts(moe_model(tmp_path, arch="qwen2moe", shexp=80))
    assert f["expert_shared_feed_forward_length"] == 80
    L = f["layers"][0]
    assert L["n_ff_shexp"] == 80
    assert L["expert_bytes"] == 3 * nbytes([N_EMBD, 32, 8], "Q8_0")      # shexp tensors are not routed experts
    assert L["non_expert_bytes"] >= 3 * nbytes([N_EMBD, 80], "Q8_0")


def test_mixtral_style_llama_takes_the_expert_width_from_feed_forward_length_tensors(tmp_path):
    f = gguf_facts(moe_model(tmp_path, arch="llama", n_expert=8, n_used=2, n_ff_exp=96, n_ff=96, key_exp=False))
    assert (f["expert_count"], f["expert_feed_forward_length"], f["moe_planned"]) == (8, 96, True)


def test_a_merged_gate_up_expert_tensor_counts_as_expert_bytes_with_half_its_width(tmp_path):
    f = gguf_facts(moe_model(tmp_path, gate_up=True, n_ff_exp=32))
    assert f["expert_feed_forward_length"] == 32
    assert f["layers"][0]["expert_bytes"] == nbytes([N_EMBD, 64, 8], "Q8_0") + nbytes([32, N_EMBD, 8], "Q8_0")


def test_a_dense_model_reports_no_experts(tmp_path):
    f = gguf_facts(lib.write_gguf(tmp_path / "q.gguf", "qwen35", lib.qwen35_kv(), lib.qwen35_tensors()))
    assert (f["is_moe"], f["expert_count"], f["expert_used_count"], f["moe_planned"]) == (False, 0, 0, None)
    assert all(L["expert_bytes"] == 0 and L["non_expert_bytes"] == L["tensor_bytes"] for L in f["layers"])


def test_an_moe_arch_the_planner_does_not_model_is_reported_as_not_planned(tmp_path):
    """gpt-oss-like (its own graph) keeps its facts, flagged moe_planned false; the planner refuses it by name."""
    assert "deepseek2" not in MOE_PLANNED_ARCHS and "glm4moe" not in MOE_PLANNED_ARCHS
    f = gguf_facts(moe_model(tmp_path, arch="glm4moe"))
    assert f["is_moe"] and f["moe_planned"] is False and f["expert_count"] == 8


def test_more_experts_used_than_exist_is_refused(tmp_path):
    with pytest.raises(GGUFError, match=r"qwen3moe\.expert_used_count 9 exceeds qwen3moe\.expert_count 8"):
        gguf_facts(moe_model(tmp_path, n_used=9))


def test_experts_without_a_used_count_are_refused(tmp_path):
    with pytest.raises(GGUFError, match=r"expert_count is 8 but qwen3moe\.expert_used_count is 0"):
        gguf_facts(moe_model(tmp_path, n_used=0))


@settings(**SETTINGS)
@given(key=st.sampled_from(["expert_count", "expert_used_count", "expert_shared_feed_forward_length",
                            "expert_feed_forward_length", "expert_shared_count"]),
       value=st.one_of(st.text(max_size=8), st.floats(allow_nan=True, width=32), st.booleans(),
                       st.lists(st.text(max_size=3), min_size=1, max_size=3)))
def test_a_wrong_typed_expert_key_is_refused_naming_it(tmp_path, key, value):
    from gguf import GGUFValueType
    if isinstance(value, bool):
        typed = (value, GGUFValueType.BOOL)
    elif isinstance(value, float):
        typed = (value, GGUFValueType.FLOAT32)
    elif isinstance(value, list):
        typed = (value, GGUFValueType.ARRAY)
    else:
        typed = (value, GGUFValueType.STRING)
    p = moe_model(tmp_path, kv_extra={"qwen3moe." + key: typed})
    with pytest.raises(GGUFError, match=r"metadata qwen3moe\.%s is " % key):
        gguf_facts(p)


def test_the_recorded_qwen3moe_fixture_is_fresh_and_30b_a3b_shaped():
    r = subprocess.run([sys.executable, os.path.join(REPO, "tests", "fixtures", "build_moe_fixtures.py"), "--check"],
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "collections")), capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    f = lib.fixture("qwen3moe_30b_a3b")
    assert (f["architecture"], f["block_count"], f["embedding_length"], f["vocab_size"]) == ("qwen3moe", 48, 2048, 151936)
    assert (f["expert_count"], f["expert_used_count"], f["expert_feed_forward_length"]) == (128, 8, 768)
    assert f["feed_forward_length"] == 6144                     # 768 x 8: the coincidence the issue names
    gib = 1024 ** 3
    assert 17.0 < f["file_size"] / gib < 17.5                   # the public Q4_K_M file is ~18.6 GB
    assert 16.0 < f["expert_bytes_total"] / gib < 16.6
    non_expert_gpu = sum(L["non_expert_bytes"] for L in f["layers"]) + f["output_bytes"]
    assert 0.7 < non_expert_gpu / gib < 0.85                    # issue 38: --cpu-moe leaves ~0.8 GiB on the GPU
    assert json.dumps(f, sort_keys=True)                        # plain JSON, as gguf_info returns it


# The MoE archs whose b11434 load_hparams reads <arch>.expert_shared_feed_forward_length (qwen2moe-style shared expert,
# src/models/<arch>.cpp) and whose headers this builder can write: the width is read wherever a file carries one.
SHARED_EXPERT_ARCHS = ("qwen2moe", "granitemoe", "hunyuan-moe", "bailingmoe2", "ernie4_5-moe", "exaone-moe", "cohere2moe",
                       "step35")


@pytest.mark.parametrize("arch", SHARED_EXPERT_ARCHS)
def test_the_shared_expert_width_is_read_for_every_arch_that_has_one(tmp_path, arch):
    """issue 38: the shared expert (ffn_*_shexp) is read off its tensors, apart from the routed experts' bytes; the
    planner then plans the archs it models with it and refuses the rest by name (never as dense)."""
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import FitPlanError, plan
    f = gguf_facts(moe_model(tmp_path, arch=arch, shexp=80, n_ff_exp=32, n_used=2))
    assert f["is_moe"] and f["expert_shared_feed_forward_length"] == 80
    assert all((L["n_ff_shexp"], L["n_ff_exp"]) == (80, 32) for L in f["layers"])
    assert all(L["expert_bytes"] == 3 * nbytes([N_EMBD, 32, 8], "Q8_0") for L in f["layers"])
    card = [{"name": "g", "vram_total_bytes": 24 << 30}]
    if arch in MOE_PLANNED_ARCHS:
        assert plan(card, f, {"backend": "cuda", "ctx_size": 4096})["fits"]
    else:
        with pytest.raises(FitPlanError, match=r"model\.architecture %r is a Mixture-of-Experts model \(8 experts, 2 used\) "
                           r"that fit_plan does not model" % arch):
            plan(card, f, {"backend": "cuda", "ctx_size": 4096})


def test_a_shared_expert_wider_than_the_routed_ones_sets_the_planned_ffn_width(tmp_path):
    """build_moe_ffn's experts, then the shared expert on its own width: the planner sizes the wider of the two."""
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import _moe_layer, plan
    card = [{"name": "g", "vram_total_bytes": 24 << 30}]
    serve = {"backend": "cuda", "ctx_size": 4096, "ubatch_size": 512}

    def compute(shexp, name):
        f = gguf_facts(moe_model(tmp_path, arch="qwen2moe", shexp=shexp, n_ff_exp=32, n_used=2, name=name))
        return plan(card, f, serve)["devices"][0]["compute_bytes"]

    narrow, wide = compute(48, "n.gguf"), compute(160, "w.gguf")     # 48 < 2 x 32 <= 160
    # the narrow one is planned at the routed width (2 x 32), the wide one at the shared expert's
    assert wide - narrow == (_moe_layer(N_EMBD, 160, 2) - _moe_layer(N_EMBD, 2 * 32, 2)) * 512 > 0
