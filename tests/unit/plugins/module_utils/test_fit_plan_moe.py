"""Mixture-of-Experts laws of fit_plan (issue 38), over the recorded Qwen3-30B-A3B-class qwen3moe header
(tests/fixtures/qwen3moe_30b_a3b.json, built by tests/fixtures/build_moe_fixtures.py): the MoE compute term, the
expert width in place of feed_forward_length, the MoE overhead, experts kept on the host with serve.n_cpu_moe /
serve.cpu_moe (their bytes, the GPU's reserve for copied experts, the host RAM they need), the split that places
experts by layer, and the refusal of an MoE architecture the planner does not model."""
import copy

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.tests.unit.hostile_testlib import json_values
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import (
    PROFILES, FitPlanError, _moe_block, plan)
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import ggml_alloc

MIB = 1024 ** 2
GIB = 1024 ** 3
SETTINGS = dict(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MODEL = lib.fixture("qwen3moe_30b_a3b")
CARD = [{"name": "RTX 3090", "vram_total_bytes": 24 * GIB, "vram_reserved_bytes": 0}]
TWO = [{"name": "GPU0", "vram_total_bytes": 24 * GIB}, {"name": "GPU1", "vram_total_bytes": 24 * GIB}]


def serve(**kw):
    base = {"backend": "cuda", "ctx_size": 32768, "floor_bytes": GIB // 2}
    base.update(kw)
    return base


def dense_planned(model):
    """The same header as the planner saw it before issue 38: no expert facts."""
    m = copy.deepcopy(model)
    m["expert_count"] = m["expert_used_count"] = 0
    for L in m["layers"]:
        L["expert_bytes"] = 0
    return m


def dev(result, i=0):
    return result["devices"][i]


def expert_bytes(blocks):
    return sum(MODEL["layers"][il]["expert_bytes"] for il in blocks)


def replayed_block(n_ff_exp, ub):
    """ggml_alloc's replay of one of MODEL's blocks (8 of n_ff_exp used, on CUDA: fused) over ub tokens."""
    _, n_expert, k_width, v_width = _moe_block(MODEL, MODEL["layers"])
    return ggml_alloc.moe_block_peak(2048, n_ff_exp, 8, n_expert, MODEL["head_count"] * MODEL["key_length"],
                                     k_width, v_width, ub, True)


@pytest.mark.parametrize("ub", [512, 2048])
def test_the_moe_layer_is_booked_by_its_replayed_allocation_not_as_a_dense_ffn(ub):
    """issue 38: planned as dense (12 n_embd + 12 F per token) the 30B-A3B class is under; its block is ggml-alloc's
    allocation replayed over its graph (80 x n_embd per token here: the experts' outputs, their weighted copy and a
    hole the GLU left), measured exact on qwen3moe_r at ub 512 (tests/fixtures/llamacpp/b11434-cuda-h200-moe)."""
    moe = plan(CARD, MODEL, serve(ubatch_size=ub))
    dense = plan(CARD, dense_planned(MODEL), serve(ubatch_size=ub))
    peak = replayed_block(768, ub)
    assert 80 * 2048 * ub <= peak <= 80 * 2048 * ub + MIB        # + the router's few aligned rows
    assert dev(moe)["compute_bytes"] - dev(dense)["compute_bytes"] == peak - (12 * 2048 + 12 * 8 * 768) * ub > 0


def test_the_ffn_width_is_the_experts_not_feed_forward_length():
    """feed_forward_length equals 768 x 8 for this family by coincidence; the graph never reads it."""
    odd = copy.deepcopy(MODEL)
    odd["feed_forward_length"] = 1
    for L in odd["layers"]:
        L["n_ff"] = 1
    assert dev(plan(CARD, odd, serve()))["compute_bytes"] == dev(plan(CARD, MODEL, serve()))["compute_bytes"]
    wider = copy.deepcopy(MODEL)
    for L in wider["layers"]:
        L["n_ff_exp"] = 1536
    grown = dev(plan(CARD, wider, serve()))["compute_bytes"] - dev(plan(CARD, MODEL, serve()))["compute_bytes"]
    assert grown == replayed_block(1536, 512) - replayed_block(768, 512) > 0


@pytest.mark.parametrize("fa, extra", [(True, 110 * MIB), (False, 300 * MIB)])
def test_a_device_running_moe_blocks_is_charged_the_measured_overhead(fa, extra):
    """issue 38: 690-730 MiB beyond the buffers after real requests (922 with FA off) against the cuda 624."""
    r = plan(CARD, MODEL, serve(flash_attn=fa))
    assert dev(r)["overhead_bytes"] == PROFILES["cuda"]["device_overhead_bytes"] + extra
    assert dev(plan(CARD, dense_planned(MODEL), serve(flash_attn=fa)))["overhead_bytes"] == 624 * MIB


def test_one_24gib_card_does_not_hold_it_dense_at_64k_but_does_with_n_cpu_moe():
    dense = plan(CARD, MODEL, serve(ctx_size=65536))
    assert not dense["fits"] and "does not fit" in dense["errors"][0]
    r = plan(CARD, MODEL, serve(ctx_size=65536, n_cpu_moe=24), host_ram_bytes=64 * GIB)
    assert r["fits"], r["errors"]
    moved = expert_bytes(range(24))
    assert dev(dense)["weights_bytes"] - dev(r)["weights_bytes"] == moved
    # mapped (load_mode auto): one file range from token_embd to block 23's last expert, the blocks' other tensors
    # between included (llama-model-loader.cpp get_mapping_range; measured on the H200, issue 38)
    gap = r["host_experts"]["mapped_gap_bytes"]
    first, end = MODEL["input_span"][0], MODEL["layers"][23]["expert_span"][1]
    assert gap == end - first - moved - MODEL["token_embd_bytes"]
    assert gap >= sum(MODEL["layers"][il]["non_expert_bytes"] for il in range(23))
    assert r["host"]["weights_bytes"] - dense["host"]["weights_bytes"] == moved + gap
    assert r["host_weights_bytes"] - dense["host_weights_bytes"] == moved + gap
    pinned = plan(CARD, MODEL, serve(ctx_size=65536, n_cpu_moe=24, load_mode="none"), host_ram_bytes=64 * GIB)
    assert pinned["host_experts"]["mapped_gap_bytes"] == 0
    assert pinned["host_weights_bytes"] - dense["host_weights_bytes"] == moved
    assert r["host_experts"]["blocks"] == 24 and r["host_experts"]["block_range"] == [0, 23]
    assert 8.9 < dev(r)["weights_bytes"] / GIB < 9.3            # issue 38: the GPU keeps 9.2 GiB at --n-cpu-moe 24


def test_all_experts_on_the_host_leaves_about_0_8_gib_of_weights_on_the_gpu():
    r = plan(CARD, MODEL, serve(ctx_size=131072, cpu_moe=True), host_ram_bytes=64 * GIB)
    assert r["fits"], r["errors"]
    assert 0.7 < dev(r)["weights_bytes"] / GIB < 0.85 and dev(r)["expert_weights_bytes"] == 0
    assert r["host_experts"]["bytes"] == MODEL["expert_bytes_total"] and r["host_experts"]["blocks"] == 48


@pytest.mark.parametrize("ub, mib", [(512, 133.5), (2048, 61.5)])
@pytest.mark.parametrize("where", [{"n_cpu_moe": 24}, {"cpu_moe": True}, {"n_cpu_moe": 48}])
def test_the_gpu_keeps_the_measured_reserve_for_copied_experts(ub, mib, where):
    """issue 38: one expert tensor (157.5 MiB) at the layer's down moment (56 x n_embd per ubatch token) in place of
    its replayed peak (80): 157.5 less 24 x n_embd per token (measured totals 282 MiB at ub 512, 654 at 2048), the
    same for 24 or 48 offloaded layers."""
    r = plan(CARD, MODEL, serve(ubatch_size=ub, **where), host_ram_bytes=64 * GIB)
    assert abs(dev(r)["expert_copy_bytes"] - mib * MIB) <= 2 * MIB
    base = plan(CARD, MODEL, serve(ubatch_size=ub), host_ram_bytes=64 * GIB)
    assert dev(r)["compute_bytes"] - dev(base)["compute_bytes"] == dev(r)["expert_copy_bytes"]
    assert dev(base)["expert_copy_bytes"] == 0


def test_a_split_places_the_experts_with_their_blocks():
    r = plan(TWO, MODEL, serve(ctx_size=65536, tensor_split=[24, 24]))
    first, last = [d["layer_range"] for d in r["devices"]]
    assert first == [0, 24] and last == [25, 47]
    assert dev(r, 0)["expert_weights_bytes"] == expert_bytes(range(0, 25))
    assert dev(r, 1)["expert_weights_bytes"] == expert_bytes(range(25, 48))
    off = plan(TWO, MODEL, serve(ctx_size=65536, tensor_split=[24, 24], n_cpu_moe=24), host_ram_bytes=64 * GIB)
    # blocks 0..23 keep their experts on the host; block 24's stay on GPU0, the rest on GPU1
    assert dev(off, 0)["expert_weights_bytes"] == expert_bytes([24])
    assert dev(off, 1)["expert_weights_bytes"] == dev(r, 1)["expert_weights_bytes"]
    assert dev(off, 0)["expert_copy_bytes"] > 0 and dev(off, 1)["expert_copy_bytes"] == 0
    # tensor overrides turn pipeline parallelism off: GPU1's compute is one copy's, less than the four it had
    assert dev(off, 1)["compute_bytes"] < dev(r, 1)["compute_bytes"]


@settings(**SETTINGS)
@given(a=st.integers(0, 60), b=st.integers(0, 60))
def test_more_blocks_on_the_host_never_add_gpu_weights(a, b):
    lo, hi = sorted((a, b))
    r_lo = plan(CARD, MODEL, serve(n_cpu_moe=lo), host_ram_bytes=64 * GIB)
    r_hi = plan(CARD, MODEL, serve(n_cpu_moe=hi), host_ram_bytes=64 * GIB)
    assert dev(r_hi)["weights_bytes"] <= dev(r_lo)["weights_bytes"]
    assert r_hi["host_experts"]["bytes"] - r_lo["host_experts"]["bytes"] == expert_bytes(range(min(lo, 48), min(hi, 48)))
    assert dev(r_lo)["weights_bytes"] + r_lo["host_experts"]["bytes"] == dev(r_hi)["weights_bytes"] + r_hi["host_experts"]["bytes"]


@pytest.mark.parametrize("mode, memory, pinned", [(None, "mapped", False), ("auto", "mapped", False),
                                                  ("mmap", "mapped", False), ("mmap+mlock", "locked", False),
                                                  ("mlock", "pinned", True), ("none", "pinned", True),
                                                  ("dio", "pinned", True)])
def test_load_mode_says_how_the_host_holds_the_experts(mode, memory, pinned):
    """b11434's loader maps the file for auto/mmap (locked with mmap+mlock) and reads it into the GPU backend's pinned
    host buffer for none, mlock and dio (llama-model-loader.cpp use_mmap)."""
    r = plan(CARD, MODEL, serve(cpu_moe=True, load_mode=mode), host_ram_bytes=64 * GIB)
    hx = r["host_experts"]
    assert hx["memory"] == memory and hx["pinned_bytes"] == (hx["bytes"] if pinned else 0)


def test_a_host_without_room_for_the_experts_is_refused_naming_the_fix():
    r = plan(CARD, MODEL, serve(cpu_moe=True), host_ram_bytes=16 * GIB)
    assert not r["fits"]
    msg = [e for e in r["errors"] if e.startswith("host RAM")]
    assert msg and "serve.n_cpu_moe" in msg[0] and "16.35 GiB of experts" in msg[0]
    assert plan(CARD, MODEL, serve(cpu_moe=True), host_ram_bytes=32 * GIB)["fits"]
    # the prompt cache counts: 12 GiB of it beside 16.35 GiB of experts does not fit 32 GiB under its 4 GiB floor
    r = plan(CARD, MODEL, serve(cpu_moe=True, cache_ram_mib=12288), host_ram_bytes=32 * GIB)
    assert any(e.startswith("host RAM") and "12.00 GiB of prompt cache" in e for e in r["errors"])
    unknown = plan(CARD, MODEL, serve(cpu_moe=True))
    assert any("not checked against its RAM" in w for w in unknown["warnings"])


def test_experts_on_the_host_of_a_dense_model_are_said_to_do_nothing():
    dense = lib.fixture("frank_medium")
    r = plan(lib.r9700s(), dense, {"backend": "hip", "ctx_size": 65536, "n_cpu_moe": 4})
    assert any("serve.n_cpu_moe has no effect" in w for w in r["warnings"])
    assert r["host_experts"] is None


@pytest.mark.parametrize("arch", ["glm4moe", "deepseek2", "gpt-oss", "dbrx"])
def test_an_moe_architecture_the_planner_does_not_model_is_refused_by_name(arch):
    m = copy.deepcopy(MODEL)
    m["architecture"], m["moe_planned"] = arch, False
    with pytest.raises(FitPlanError, match=r"model\.architecture %r is a Mixture-of-Experts model \(128 experts, 8 used\) "
                       r"that fit_plan does not model.*refused rather than planned as dense" % arch):
        plan(CARD, m, serve())


def test_an_moe_drafter_is_refused_by_name():
    with pytest.raises(FitPlanError, match=r"drafter\.architecture 'qwen3moe' is a Mixture-of-Experts model"):
        plan(CARD, lib.fixture("frank_medium"), serve(spec_type=["draft-simple"]), drafter=MODEL)


def test_moe_facts_without_per_block_expert_bytes_are_refused():
    m = copy.deepcopy(MODEL)
    del m["layers"][3]["expert_bytes"]
    with pytest.raises(FitPlanError, match=r"model\.layers\[3\]\.expert_bytes is missing for a Mixture-of-Experts"):
        plan(CARD, m, serve())


@settings(**SETTINGS)
@given(field=st.sampled_from(["n_cpu_moe", "cpu_moe", "load_mode"]), value=json_values(max_leaves=3))
def test_any_value_of_the_expert_settings_plans_or_is_refused_by_name(field, value):
    try:
        r = plan(CARD, MODEL, serve(**{field: value}), host_ram_bytes=64 * GIB)
    except FitPlanError as exc:
        assert "serve.%s" % field in str(exc)
    else:
        assert isinstance(r["fits"], bool)


# --- the planner chooses --n-cpu-moe (an auto split at ctx_size max, n_cpu_moe left open) ----------------------

LONG = dict(ctx_size="max", max_ctx_per_slot=131072)        # the YaRN-stretched window operators run this family at


@pytest.mark.parametrize("open_value", [None, "auto"])
def test_an_open_n_cpu_moe_is_the_fewest_blocks_whose_plan_reaches_the_cap(open_value):
    """issue 38: what operators do by hand on a 24 GiB card -- offload just enough blocks' experts for the window."""
    kw = dict(LONG) if open_value is None else dict(LONG, n_cpu_moe=open_value)
    r = plan(CARD, MODEL, serve(**kw), host_ram_bytes=64 * GIB)
    choice = r["n_cpu_moe_choice"]
    n = choice["n_cpu_moe"]
    assert r["fits"], r["errors"]
    assert r["ctx_size"] == 131072 and 0 < n < 48 and r["host_experts"]["blocks"] == n
    assert choice["reason"] in r["warnings"] and ("chosen by the planner: %d" % n) in choice["reason"]
    # the same plan as the operator pinning that N, and one block fewer does not reach the window
    pinned = plan(CARD, MODEL, serve(n_cpu_moe=n, **LONG), host_ram_bytes=64 * GIB)
    assert pinned["n_cpu_moe_choice"] is None and pinned["devices"] == r["devices"]
    assert plan(CARD, MODEL, serve(n_cpu_moe=n - 1, **LONG), host_ram_bytes=64 * GIB)["ctx_size"] < 131072
    # an explicit 0 keeps every expert on the GPUs, with the context that leaves
    zero = plan(CARD, MODEL, serve(n_cpu_moe=0, **LONG), host_ram_bytes=64 * GIB)
    assert zero["n_cpu_moe_choice"] is None and zero["host_experts"]["blocks"] == 0 and zero["ctx_size"] < 131072


def test_the_planner_keeps_every_expert_on_the_gpus_when_that_reaches_the_cap():
    r = plan(CARD, MODEL, serve(ctx_size="max"), host_ram_bytes=64 * GIB)
    assert r["ctx_size"] == MODEL["context_length"] and r["n_cpu_moe_choice"] is None and r["host_experts"]["blocks"] == 0


def test_the_planner_chooses_only_what_the_inventory_left_open():
    """A pinned context, a pinned split or --cpu-moe leave nothing to choose: an open n_cpu_moe is then 0."""
    for kw in (dict(ctx_size=131072), dict(LONG, tensor_split=[1]), dict(LONG, cpu_moe=True)):
        r = plan(CARD, MODEL, serve(**kw), host_ram_bytes=64 * GIB)
        assert r["n_cpu_moe_choice"] is None
        assert r["host_experts"]["blocks"] == (48 if kw.get("cpu_moe") else 0)


def test_when_no_number_reaches_the_cap_the_fewest_blocks_with_the_largest_context_are_chosen():
    small = [{"name": "RTX 4070", "vram_total_bytes": 12 * GIB}]
    wide = dict(ctx_size="max", max_ctx_per_slot=1 << 20)
    r = plan(small, MODEL, serve(**wide), host_ram_bytes=64 * GIB)
    every = plan(small, MODEL, serve(cpu_moe=True, **wide), host_ram_bytes=64 * GIB)
    n = r["n_cpu_moe_choice"]["n_cpu_moe"]
    assert r["ctx_size"] == every["ctx_size"] < 1 << 20 and "the most any number of blocks does" in r["n_cpu_moe_choice"]["reason"]
    assert plan(small, MODEL, serve(n_cpu_moe=n - 1, **wide), host_ram_bytes=64 * GIB)["ctx_size"] < r["ctx_size"]


def test_a_dense_model_is_never_given_experts_on_the_host():
    r = plan(lib.r9700s(), lib.fixture("frank_medium"), {"backend": "hip", "ctx_size": "max"})
    assert r["n_cpu_moe_choice"] is None and r["host_experts"] is None


def test_routed_expert_tensors_without_an_expert_count_are_refused_not_planned_as_dense():
    m = copy.deepcopy(MODEL)
    m["expert_count"] = m["expert_used_count"] = 0
    with pytest.raises(FitPlanError, match=r"model\.architecture 'qwen3moe' carries routed expert tensors "
                       r"\(blk\.0\.ffn_\*_exps, 48 blocks\) but no qwen3moe\.expert_count.*refused rather than planned"):
        plan(CARD, m, serve())


def test_the_prompt_cache_budget_is_half_of_the_ram_the_experts_leave():
    """issue 38: the cache-ram budget sees the experts on the host -- 24 GiB of prompt cache is under half of
    64 GiB, but not under half of the 46.89 GiB that 16.35 GiB of experts leave once mapped: one file range of
    17.11 GiB, the blocks' other tensors between them included (get_mapping_range)."""
    dense_side = plan(CARD, MODEL, serve(cache_ram_mib=20480), host_ram_bytes=64 * GIB)
    assert not any("more than half the host RAM" in e for e in dense_side["errors"])
    r = plan(CARD, MODEL, serve(cpu_moe=True, cache_ram_mib=24576), host_ram_bytes=64 * GIB)
    msg = [e for e in r["errors"] if "more than half the host RAM" in e]
    assert msg and "beside the 17.11 GiB of experts kept there" in msg[0] and "may not claim more than 24005 MiB" in msg[0]
    assert not r["fits"]


@pytest.mark.parametrize("where, bad", [("input_span", [5, 4]), ("input_span", "0-9"), ("input_span", [0, 1]),
                                        ("expert_span", [-1, 10]), ("expert_span", [0, 1.5])])
def test_a_span_that_is_not_a_file_range_is_refused_by_name(where, bad):
    m = copy.deepcopy(MODEL)
    if where == "input_span":
        m["input_span"] = bad
    else:
        m["layers"][3]["expert_span"] = bad
    with pytest.raises(FitPlanError, match=r"%s.*(is not a file range|is never negative)" % where):
        plan(CARD, m, serve(n_cpu_moe=24), host_ram_bytes=64 * GIB)


def test_facts_without_spans_book_the_sum():
    """An older gguf_info's facts (no spans): the experts' bytes alone, as before."""
    m = copy.deepcopy(MODEL)
    del m["input_span"]
    for L in m["layers"]:
        del L["expert_span"]
    r = plan(CARD, m, serve(ctx_size=65536, n_cpu_moe=24), host_ram_bytes=64 * GIB)
    assert r["host_experts"]["mapped_gap_bytes"] == 0
    assert r["host_weights_bytes"] == MODEL["token_embd_bytes"] + expert_bytes(range(24))
