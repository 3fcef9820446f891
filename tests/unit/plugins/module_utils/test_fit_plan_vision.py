"""issue 34: the projector at the peak a request reaches, not what clip reserves at load.

b11434's tools/mtmd: clip reserves its compute for a warm-up image (46 x 46 tokens for the Qwen-VL family, fewer
under a lower --image-max-tokens), admits images up to --image-max-tokens (4096 by default), grows its graph for a
larger one and adds its backend's runtime context on the first image. Held to the issue's figures
(tests/fixtures/llamacpp/b11434-cuda-h200-vision/issue34_figures.json: a real-size qwen3vl_merger beside the 27B
target on one H200), and the KV types with no GPU flash-attention kernel.
"""
import copy
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.tests.unit.hostile_testlib import json_values
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import FitPlanError, PROFILES, plan

GIB, MIB = lib.GIB, lib.MIB
SETTINGS = dict(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
MMPROJ = lib.fixture("mmproj_bf16")
MODEL = lib.fixture("frank_medium")       # the runbook's 27B qwen35 target (gguf_info facts)
with open(os.path.join(lib.FIXTURES, "llamacpp", "b11434-cuda-h200-vision", "issue34_figures.json")) as _fh:
    FIGURES = json.load(_fh)
H200 = [{"name": "CUDA0", "vram_total_bytes": FIGURES["device_total_mib"] * MIB}]
TWO = [{"name": "CUDA0", "vram_total_bytes": FIGURES["device_total_mib"] * MIB},
       {"name": "CUDA1", "vram_total_bytes": FIGURES["device_total_mib"] * MIB}]
# the done-when bound of the issue, on the projector's own terms
BOUND = 64 * MIB


def serve(**kw):
    s = {"backend": "cuda", "ctx_size": 65536, "parallel": 2, "batch_size": 6144, "ubatch_size": 512,
         "flash_attn": "on", "spec_type": []}
    s.update(kw)
    return s


def vision(r):
    return r["mmproj"]


def test_the_deployed_projector_carries_its_geometry():
    m = MMPROJ["mmproj"]
    assert m["projector_type"] == "qwen3vl_merger" and m["embedding_length"] == 1152
    # the recorded header has no patch_size: the type's own (clip.cpp: Qwen3-VL patches of 16, merged 2 x 2)
    r = plan(H200, MODEL, serve(), mmproj=MMPROJ)
    assert vision(r)["patch_size"] == 16 and vision(r)["spatial_merge_size"] == 2


@pytest.mark.parametrize("point", FIGURES["points"], ids=[p["id"] for p in FIGURES["points"]])
def test_the_issues_figures_are_reproduced_term_by_term(point):
    """Load reserve against the old 256 MiB prior, the first image's context, the largest image the limit admits."""
    r = plan(H200, MODEL, serve(image_max_tokens=point["image_max_tokens"] or 0), mmproj=MMPROJ)
    v = vision(r)
    assert v["image_max_tokens"] == point["admitted_tokens"] and v["warmup_tokens"] == point["warmup_tokens"]
    assert v["first_use_bytes"] == point["first_image_mib"] * MIB
    if "load_reserve_vs_old_prior_mib" in point:
        got = v["reserve_bytes"] - 256 * MIB
        want = point["load_reserve_vs_old_prior_mib"] * MIB
        assert abs(got - want) <= 16 * MIB, (got / MIB, point["quote_load"])
    if "after_largest_image_mib" in point:
        assert v["max_image_px"] == point["largest_image_px"]
        # what the booked peak adds over the load: at the limit itself (>= the largest square image)
        booked = v["request_bytes"]
        want = point["after_largest_image_mib"] * MIB
        assert booked >= want - BOUND, (booked / MIB, point["quote_largest"])
        assert abs(booked - want) <= max(BOUND, 0.01 * FIGURES["device_total_mib"] * MIB)
        # and the square image the issue sent, through the same law (a limit of exactly its tokens)
        sq = vision(plan(H200, MODEL, serve(image_max_tokens=point["largest_image_tokens"]), mmproj=MMPROJ))
        assert abs(sq["request_bytes"] - want) <= BOUND and sq["request_bytes"] >= want - BOUND
    dev = r["devices"][0]
    assert dev["mmproj_bytes"] == v["peak_bytes"] == v["load_bytes"] + v["request_bytes"]
    assert dev["mmproj_peak_bytes"] == v["request_bytes"]


def test_the_peak_grows_with_the_limit_and_the_load_only_below_the_warm_up():
    by = dict((n, vision(plan(H200, MODEL, serve(image_max_tokens=n), mmproj=MMPROJ))) for n in (256, 1024, 2116, 4096, 8192))
    assert [by[n]["peak_bytes"] for n in sorted(by)] == sorted(by[n]["peak_bytes"] for n in by)
    # clip-model.h set_warmup_n_tokens: floor(sqrt(max))^2 under 46 x 46, the 46 x 46 warm-up above it
    assert [by[n]["warmup_tokens"] for n in sorted(by)] == [256, 1024, 2116, 2116, 2116]
    assert by[4096]["reserve_bytes"] == by[8192]["reserve_bytes"] == by[2116]["reserve_bytes"] > by[1024]["reserve_bytes"]
    # the default is b11434's own for the type
    assert vision(plan(H200, MODEL, serve(), mmproj=MMPROJ))["peak_bytes"] == by[4096]["peak_bytes"]


def test_the_projector_is_booked_on_its_device():
    on0 = plan(TWO, MODEL, serve(), mmproj=MMPROJ)
    on1 = plan(TWO, MODEL, serve(mmproj_device="CUDA1"), mmproj=MMPROJ)
    assert on0["devices"][0]["mmproj_bytes"] > 0 and on0["devices"][1]["mmproj_bytes"] == 0
    assert on1["devices"][1]["mmproj_bytes"] == on0["devices"][0]["mmproj_bytes"] and on1["devices"][0]["mmproj_bytes"] == 0
    assert vision(on1)["device"] == "CUDA1"


@pytest.mark.parametrize("where", [{"mmproj_offload": False}, {"mmproj_offload": "no"}, {"mmproj_device": "none"}])
def test_on_the_cpu_the_projector_is_host_memory_and_the_plan_says_it_is_slow(where):
    r = plan(H200, MODEL, serve(**where), mmproj=MMPROJ)
    v = vision(r)
    assert v["device"] == "CPU" and not v["offload"]
    assert r["devices"][0]["mmproj_bytes"] == 0 and r["devices"][0]["mmproj_peak_bytes"] == 0
    assert r["host"]["mmproj_bytes"] == v["peak_bytes"] > MMPROJ["mmproj_bytes"]
    assert v["first_use_bytes"] == 0              # the CPU backend keeps no runtime context of its own
    (said,) = [w for w in r["warnings"] if "mmproj_offload false" in w]
    assert "34 s" in said and "2048x2048" in said and "host memory" in said
    gpu = plan(H200, MODEL, serve(), mmproj=MMPROJ)
    assert r["host"]["total_bytes"] - gpu["host"]["total_bytes"] == v["peak_bytes"]


def test_the_largest_image_that_fits_is_said_when_the_limit_fills_the_card():
    """Pin a context that leaves the card a little above the floor at load: the 8192-token limit is what fills it."""
    base = plan(H200, MODEL, serve(image_max_tokens=1024), mmproj=MMPROJ)
    load_free = base["devices"][0]["free_bytes"] + base["devices"][0]["mmproj_peak_bytes"]
    floor = load_free - 400 * MIB            # 400 MiB above the floor at load: room for some images, not 8192 tokens
    r = plan(H200, MODEL, serve(image_max_tokens=8192, floor_bytes=floor), mmproj=MMPROJ)
    v = vision(r)
    assert not r["fits"] and 1024 < v["largest_image_tokens"] < 8192
    (said,) = [w for w in r["warnings"] if "is what fills CUDA0" in w]
    assert "image_max_tokens 8192" in said and "%d tokens (%dx%d px)" % (
        v["largest_image_tokens"], v["largest_image_px"], v["largest_image_px"]) in said
    # the largest is exact: it fits, one token more does not
    at = plan(H200, MODEL, serve(image_max_tokens=v["largest_image_tokens"], floor_bytes=floor), mmproj=MMPROJ)
    more = plan(H200, MODEL, serve(image_max_tokens=v["largest_image_tokens"] + 1, floor_bytes=floor), mmproj=MMPROJ)
    assert at["fits"] and not more["fits"]
    assert not any("is what fills" in w for w in at["warnings"])


def test_with_ctx_max_the_context_makes_room_for_the_largest_image():
    card = [{"name": "CUDA0", "vram_total_bytes": 48 * GIB}]     # the context, not the trained window, is what binds
    small = plan(card, MODEL, serve(ctx_size="max", floor_bytes=GIB, image_max_tokens=1024), mmproj=MMPROJ)
    big = plan(card, MODEL, serve(ctx_size="max", floor_bytes=GIB, image_max_tokens=8192), mmproj=MMPROJ)
    assert small["fits"] and big["fits"] and big["ctx_size"] < small["ctx_size"]
    assert vision(big)["largest_image_tokens"] == 8192


def test_no_image_fits_when_the_first_image_alone_breaks_the_floor():
    base = plan(H200, MODEL, serve(), mmproj=MMPROJ)
    load_free = base["devices"][0]["free_bytes"] + base["devices"][0]["mmproj_peak_bytes"]
    r = plan(H200, MODEL, serve(floor_bytes=load_free - 50 * MIB), mmproj=MMPROJ)
    assert not r["fits"] and vision(r)["largest_image_tokens"] < 8
    assert any("no image fits CUDA0" in w and "first image alone" in w for w in r["warnings"])


def test_an_unmodelled_projector_type_keeps_the_profiles_figure_and_says_so():
    mm = copy.deepcopy(MMPROJ)
    mm["mmproj"]["projector_type"] = "gemma3"
    r = plan(H200, MODEL, serve(image_max_tokens=8192), mmproj=mm)
    v = vision(r)
    assert not v["modelled"] and v["reserve_bytes"] == PROFILES["cuda"]["mmproj_compute_bytes"]
    assert v["request_bytes"] == v["first_use_bytes"] and v["image_max_tokens"] is None
    assert any("projector type gemma3: its image tokens are not modelled" in w for w in r["warnings"])


def test_min_above_max_is_an_error_and_image_options_without_a_projector_are_said():
    r = plan(H200, MODEL, serve(image_min_tokens=2048, image_max_tokens=1024), mmproj=MMPROJ)
    assert not r["fits"] and any("serve.image_min_tokens 2048 is more than serve.image_max_tokens 1024" in e
                                 for e in r["errors"])
    bare = plan(H200, MODEL, serve(image_max_tokens=1024))
    assert bare["mmproj"] is None and any("serve.image_max_tokens has no effect" in w for w in bare["warnings"])


@settings(**SETTINGS)
@given(field=st.sampled_from(["mmproj_offload", "image_min_tokens", "image_max_tokens", "mmproj_device"]),
       value=json_values(max_leaves=3))
def test_any_value_of_the_image_settings_plans_or_is_refused_by_name(field, value):
    try:
        r = plan(TWO, MODEL, serve(**{field: value}), mmproj=MMPROJ)
    except FitPlanError as exc:
        assert "serve.%s" % field in str(exc)
    else:
        assert isinstance(r["fits"], bool)


# --- KV types with no flash-attention kernel on the GPU (ggml-cuda/fattn.cu b11434) ---------------------------

@pytest.mark.parametrize("backend", ["cuda", "hip"])
def test_iq4_nl_kv_on_a_gpu_warns_that_attention_runs_on_the_cpu(backend):
    r = plan(H200, MODEL, serve(backend=backend, cache_type_k="iq4_nl", cache_type_v="iq4_nl"))
    (said,) = [w for w in r["warnings"] if "flash-attention kernel" in w]
    assert "serve.cache_type_k and serve.cache_type_v" in said and "iq4_nl" in said
    assert "on the CPU" in said and "q4_0" in said and backend.upper() in said


@pytest.mark.parametrize("kw", [{}, {"cache_type_k": "q8_0", "cache_type_v": "q8_0"},
                                {"cache_type_k": "q4_0", "cache_type_v": "q4_1"}, {"backend": "cpu", "cache_type_k": "iq4_nl"},
                                {"cache_type_k": "iq4_nl", "flash_attn": "off"}])
def test_kv_types_with_a_kernel_or_no_flash_attention_say_nothing(kw):
    r = plan(H200, MODEL, serve(**kw))
    assert not any("flash-attention kernel" in w for w in r["warnings"])


def test_the_draft_kv_type_is_checked_where_a_draft_context_runs():
    r = plan(H200, MODEL, serve(spec_type=["draft-mtp"], cache_type_k_draft="iq4_nl"))
    assert any("serve.cache_type_k_draft" in w and "flash-attention kernel" in w for w in r["warnings"])
    r = plan(H200, MODEL, serve(cache_type_k_draft="iq4_nl"))
    assert not any("flash-attention kernel" in w for w in r["warnings"])
