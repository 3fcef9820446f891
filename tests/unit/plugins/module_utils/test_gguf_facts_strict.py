"""Headers llama.cpp b11434 refuses when it loads the model are refused by gguf_facts, naming the key and the rule;
a drafter given as the served model is refused by the planner, by name (issue 23 item 4)."""
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import FitPlanError, plan
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import PER_LAYER_ARRAY_KEYS, gguf_facts
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError

N_LAYER_ALL = 9          # qwen35_kv's default: 8 trunk blocks + 1 MTP block
SETTINGS = dict(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _qwen35(tmp_path, name="q.gguf", tensors=None, **kv):
    base = lib.qwen35_kv()
    for k, v in kv.items():
        key = "qwen35." + k.replace("__", ".")
        if v is None:
            base.pop(key, None)
        else:
            base[key] = v
    return lib.write_gguf(tmp_path / name, "qwen35", base, lib.qwen35_tensors() if tensors is None else tensors)


def test_full_attention_interval_zero_is_refused_not_planned_as_4(tmp_path):
    p = _qwen35(tmp_path, full_attention_interval=0)
    with pytest.raises(GGUFError, match=r"qwen35\.full_attention_interval is 0: .*cannot load it") as exc:
        gguf_facts(p)
    assert exc.value.path == p


@settings(**SETTINGS)
@given(interval=st.integers(1, 12))
def test_a_positive_interval_sets_every_kth_layer_to_attention(tmp_path, interval):
    kinds = gguf_facts(_qwen35(tmp_path, full_attention_interval=interval))["layer_kinds"]
    want = ["recurrent" if (il + 1) % interval else "attention" for il in range(N_LAYER_ALL - 1)] + ["nextn"]
    assert kinds == want


def test_an_absent_interval_is_the_arch_default(tmp_path):
    kinds = gguf_facts(_qwen35(tmp_path, full_attention_interval=None))["layer_kinds"]
    assert kinds[:8] == ["recurrent", "recurrent", "recurrent", "attention"] * 2


@settings(**SETTINGS)
@given(key=st.sampled_from(PER_LAYER_ARRAY_KEYS), n=st.integers(0, 2 * N_LAYER_ALL + 3))
def test_a_per_layer_array_must_have_block_count_entries(tmp_path, key, n):
    """llama-model-loader get_key_or_arr: an array of any other length is refused, never padded or cut."""
    suffix = key.replace(".", "__")
    value = [1 if key == "attention.recurrent_layers" else 2] * n
    if n == 0:
        return      # GGUFWriter cannot write an empty typed array; 0 != 9 is covered by every other n
    p = _qwen35(tmp_path, **{suffix: value})
    if n == N_LAYER_ALL:
        facts = gguf_facts(p)
        assert len(facts["layers"]) == N_LAYER_ALL
    else:
        with pytest.raises(GGUFError, match=r"qwen35\.%s has %d entries but qwen35\.block_count is %d: .*wrong "
                           r"array length; expected %d, got %d" % (key.replace(".", r"\."), n, N_LAYER_ALL,
                                                                   N_LAYER_ALL, n)):
            gguf_facts(p)


@pytest.mark.parametrize("n", [1, 3, 5, 8])
def test_rope_dimension_sections_must_have_4_entries(tmp_path, n):
    p = _qwen35(tmp_path, rope__dimension_sections=[8] * n)
    with pytest.raises(GGUFError, match=r"qwen35\.rope\.dimension_sections has %d entries: .*expected 4, got %d" % (n, n)):
        gguf_facts(p)
    assert gguf_facts(_qwen35(tmp_path, name="ok.gguf", rope__dimension_sections=[8, 8, 8, 0]))["rope"][
        "dimension_sections"] == [8, 8, 8, 0]


def test_per_layer_values_are_read_one_per_layer(tmp_path):
    heads = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    facts = gguf_facts(_qwen35(tmp_path, attention__head_count_kv=heads))
    assert [L["n_head_kv"] for L in facts["layers"] if L["kind"] != "recurrent"] == [4, 8, 9]


def test_a_short_sliding_window_pattern_leaves_the_rest_non_swa(tmp_path):
    kv = {"gemma3.block_count": 6, "gemma3.context_length": 4096, "gemma3.embedding_length": 64,
          "gemma3.attention.head_count": 4, "gemma3.attention.head_count_kv": 2, "gemma3.attention.key_length": 16,
          "gemma3.attention.value_length": 16, "gemma3.attention.sliding_window": 512,
          "gemma3.attention.sliding_window_pattern": [True, True]}
    t = {"blk.%d.attn_norm.weight" % il: ([64], "F32") for il in range(6)}
    facts = gguf_facts(lib.write_gguf(tmp_path / "g3.gguf", "gemma3", kv, t))
    assert facts["layer_kinds"] == ["swa", "swa", "attention", "attention", "attention", "attention"]


# ---------------------------------------------------------------- a drafter given as the target

def _dflash(tmp_path):
    kv = {"dflash.block_count": 2, "dflash.context_length": 4096, "dflash.embedding_length": 64,
          "dflash.attention.head_count": 4, "dflash.attention.head_count_kv": 2, "dflash.block_size": 16,
          "dflash.feed_forward_length": 128}
    t = {"blk.%d.attn_norm.weight" % il: ([64], "F32") for il in range(2)}
    return lib.write_gguf(tmp_path / "dflash.gguf", "dflash", kv, t)


def _mtp_only(tmp_path):
    tensors = dict((k, v) for k, v in lib.qwen35_tensors().items() if not k.startswith("blk.") or k.startswith("blk.8."))
    return _qwen35(tmp_path, name="mtp.gguf", tensors=tensors)


@pytest.mark.parametrize("make,why", [(_dflash, r"architecture dflash is a drafter"),
                                      (_mtp_only, r"an MTP head alone: qwen35\.nextn_predict_layers 1")])
def test_a_drafter_is_recognised_and_refused_as_the_served_model(tmp_path, make, why):
    facts = gguf_facts(make(tmp_path))
    assert facts["is_drafter"] is True
    with pytest.raises(FitPlanError, match=r"model is a drafter GGUF, not a model llama-server can serve \(.*%s" % why):
        plan(lib.r9700s(), facts, {"backend": "hip", "ctx_size": 4096})


def test_a_model_with_its_mtp_head_is_not_a_drafter(tmp_path):
    facts = gguf_facts(_qwen35(tmp_path))
    assert facts["is_drafter"] is False and facts["drafter_reason"] is None
    plan(lib.r9700s(), facts, {"backend": "hip", "ctx_size": 4096})
