"""fit_plan against real b11434 loads of a Mixture-of-Experts model on an NVIDIA H200 (issue 38).

tests/fixtures/llamacpp/b11434-cuda-h200-moe/: a sparse real-size qwen3moe (Qwen3-30B-A3B class, 48 blocks, 128
experts, 8 used, Q4_K_M type mix; benchmarks/moe_models.py) all on CUDA0 (ub 512 f16, ub 2048 q8_0), split
-ts 1,1 over CUDA0 + a ggml-rpc-server, and with experts on the host (--n-cpu-moe 24, --n-cpu-moe 40 at ub 2048,
--cpu-moe, --cpu-moe --load-mode none); nvidia-smi per process and /proc memory after a long prompt.

What was fitted on which rows (fit_plan's MoE constants):
- the MoE layer's moments (MOE_PHASES: glu, down, reduce) are read off ggml-alloc and ggml-cuda's graph_optimize and
  the small-model grid (tests/fixtures/llamacpp/b11434-cuda-h100-moegrid), not fitted on these rows;
- EXPERT_COPY_PHASE (the expert tensor copied over for a batched prompt lives at the down moment): fitted on
  --n-cpu-moe 24 and --cpu-moe at ub 512; HELD OUT: --n-cpu-moe 40 at ub 2048 (another ubatch and block count) and
  --cpu-moe --load-mode none.
- the experts' f32 outputs beside the FA f16 copies' peak: fitted on the one q8_0 row (no MoE q8_0 row held out).
- the host's mapped range (llama-model-loader.cpp get_mapping_range) is llama.cpp's law, not fitted.
Every row is held to the issue's bounds term by term. No GPU here.
"""
import pytest

import fit_accuracy
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan

MIB = 1024 * 1024
SET = "cuda-h200-moe"
FIXTURES, MODELS = fit_accuracy.load_fixtures(fit_accuracy.SETS[SET])
BY_ID = dict((fx["id"], fx) for fx in FIXTURES)
HELD_OUT = sorted(i for i in BY_ID if "-ncmoe40-" in i or "-lmnone-" in i)
FITTED = sorted(i for i in BY_ID if i not in HELD_OUT)
HOST_SIDE = [i for i in sorted(BY_ID) if "moe" in i.rsplit("np1", 1)[1]]     # experts on the host


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    return fit_accuracy.Facts(MODELS, tmp_path_factory.mktemp("sparse-gguf-moe"))


def test_the_set_covers_the_issue_and_holds_rows_out():
    assert len(BY_ID) == 7 and len(HELD_OUT) == 2
    for fx in FIXTURES:
        assert fx["ok"] and fx["build"] == "b11434" and fx["config"]["backend"] == "cuda", fx["id"]
    assert any("-ub2048-" in i for i in FITTED) and any("-ub2048-" in i for i in HELD_OUT)
    assert len(HOST_SIDE) == 4


def _term_by_term(fx, facts):
    rows = fit_accuracy.bounded_terms(fx, facts)
    assert rows
    for dev, term, err, bound in rows:
        # every term within its bound (the host side: max(2 %, 256 MiB)); against nvidia-smi per process after the
        # long prompt within max(1 %, 64 MiB) and never 64 MiB under
        assert abs(err) <= bound, (dev, term, err / MIB, bound / MIB)
        if term == "smi":
            assert err >= -64 * MIB, (dev, err / MIB)


@pytest.mark.parametrize("fid", FITTED)
def test_within_bounds_term_by_term(fid, facts):
    _term_by_term(BY_ID[fid], facts)


@pytest.mark.parametrize("fid", HELD_OUT)
def test_held_out_within_bounds_term_by_term(fid, facts):
    _term_by_term(BY_ID[fid], facts)


def _host_weights(fx, facts):
    return [r for r in fit_accuracy.compare(fx, facts) if r["device"] == "host" and r["component"] == "weights"][0]


@pytest.mark.parametrize("fid", HOST_SIDE)
def test_the_host_books_what_llama_cpp_maps(fid, facts):
    """Mapped: one range from token_embd to the last offloaded expert, the blocks' other tensors between included,
    and resident (RssFile = the range + the process's libraries, under 256 MiB); pinned (--load-mode none): the sum."""
    fx = BY_ID[fid]
    r = _host_weights(fx, facts)
    assert abs(r["error"]) <= MIB, r["error"] / MIB
    rss = fx["host_memory"]["after_long_prompt"]["process"]
    if "-lmnone-" in fid:
        assert rss["RssFile"] < r["predicted"] / 2
    else:
        assert 0 <= rss["RssFile"] - r["predicted"] <= 256 * MIB, (rss["RssFile"] - r["predicted"]) / MIB


@pytest.mark.parametrize("fid", [i for i in HOST_SIDE if "-lmnone-" not in i])
def test_the_sum_of_the_experts_fails_a_mapped_load(fid, facts, monkeypatch):
    """The test can fail: booking the experts' bytes alone (before issue 38's span) is hundreds of MiB under."""
    monkeypatch.setattr(fit_plan, "_mapped_gap", lambda c: 0)
    assert _host_weights(BY_ID[fid], facts)["error"] < -256 * MIB


@pytest.mark.parametrize("fid", [i for i in HOST_SIDE if "-lmnone-" not in i and "-ub512-" in i])
def test_without_the_copied_expert_the_gpu_compute_fails(fid, facts, monkeypatch):
    """The test can fail: without the expert tensor a batched prompt copies over, the GPU's compute is under (at
    ub 512 by 133.5 MiB; at 2048 the copy adds 61.5 MiB over the replayed block, inside that row's bound)."""
    graph = fit_plan._graph_compute
    monkeypatch.setattr(fit_plan, "_graph_compute", lambda *a, **kw: graph(*a, **dict(kw, copy_bytes=0)))
    bad = [r for r in fit_accuracy.compare(BY_ID[fid], facts) if not r["ok"]]
    assert ("CUDA0", "compute") in set((r["device"], r["component"]) for r in bad)
