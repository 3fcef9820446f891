"""fit_plan against real b11434 loads of a Mixture-of-Experts model it was never fitted on (issue 38's done-when).

tests/fixtures/llamacpp/b11434-cuda-h100-moe2/: benchmarks/moe_models.py qwen3moe_h (40 blocks, n_embd 2560, 64
experts of 1280, 6 used, feed_forward_length 9728; Q4_K_M type mix, header-only) on one NVIDIA H100 80GB: all on the
GPU (ctx 131072, ub 1024, q8_0 KV; ctx 49152, ub 512, f16), split -ts 3,1 over CUDA0 + a ggml-rpc-server on the same GPU (ub 1024, f16), and
with experts on the host (--n-cpu-moe 12 at ub 512; --n-cpu-moe 30 at ub 1024 with q8_0 KV; --cpu-moe at ub 1024; --cpu-moe --load-mode none at ub 512);
nvidia-smi per process and /proc memory after an 8192-token prompt. No MoE constant of fit_plan was fitted on any of
these rows (the fitted set is tests/fixtures/llamacpp/b11434-cuda-h200-moe, qwen3moe_r). No GPU here.

Held to the issue's bounds term by term. Two terms are outside them, both OVER the measurement (the safe side), and
are kept as strict xfails that say what is wrong, so the day the law is fixed they fail and must be turned into
plain tests:
- compute of --n-cpu-moe 30 with q8_0 KV at ub 1024: +60.5 MiB against a 42.2 MiB bound -- exactly the experts' f32
  outputs (6 x 2560 x 4 B per ubatch token) that MOE_FA_BESIDE books beside the flash-attention f16 K/V copies. That
  term was fitted on the one q8_0 row of qwen3moe_r (ub 2048, where it was needed: 127.5 MiB under without it); here
  it is not there. The all-GPU q8_0 row is over by 50.5 MiB of the same 60 (inside its 58.4 MiB bound).
- RPC0 of the -ts 3,1 split (f16, ub 1024) against nvidia-smi: +83.3 MiB against 64 MiB; its compute is +54.5 MiB
  (inside its bound), CUDA0's +23.9: the MoE layer term at ub 1024 is over on both devices.
"""
import pytest

import fit_accuracy

MIB = 1024 * 1024
SET = "cuda-h100-moe2"
FIXTURES, MODELS = fit_accuracy.load_fixtures(fit_accuracy.SETS[SET])
BY_ID = dict((fx["id"], fx) for fx in FIXTURES)
HOST_SIDE = sorted(i for i in BY_ID if "moe" in i.rsplit("np1", 1)[1])
# (row, device, term): outside the bound, over the measurement (see the docstring)
OVER = {("qwen3moe_h-c65536-np1-ub1024-q8_0-ncmoe30-cuda", "CUDA0", "compute"),
        ("qwen3moe_h-c65536-np1-ub1024-f16-ts31", "RPC0", "smi")}


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    return fit_accuracy.Facts(MODELS, tmp_path_factory.mktemp("sparse-gguf-moe2"))


def _rows(fx, facts):
    rows = fit_accuracy.bounded_terms(fx, facts)
    assert all(r["sample"] == "after_long_prompt" for r in fit_accuracy.smi_rows(fx, facts))
    return rows


def test_the_set_is_a_model_never_fitted_on_all_on_the_gpu_split_and_experts_on_the_host():
    assert len(BY_ID) == 7 and set(MODELS) == {"qwen3moe_h"}
    for fx in FIXTURES:
        assert fx["ok"] and fx["build"] == "b11434" and fx["config"]["backend"] == "cuda", fx["id"]
        assert fx["nvidia_smi"]["baseline"]["gpus"][0]["total_mib"] == 81559      # an H100 80GB
    assert [i for i in BY_ID if "-ts31" in i] and len(HOST_SIDE) == 4
    assert [i for i in BY_ID if "-cuda" in i and i not in HOST_SIDE]


@pytest.mark.parametrize("fid", sorted(BY_ID))
def test_never_under_and_within_bounds_term_by_term(fid, facts):
    rows = _rows(BY_ID[fid], facts)
    assert len(rows) >= 6
    for dev, term, err, bound in rows:
        # never under the measurement by more than 64 MiB, on any device and term
        assert err >= -64 * MIB, (dev, term, err / MIB)
        if (fid, dev, term) not in OVER:
            assert abs(err) <= bound, (dev, term, err / MIB, bound / MIB)


@pytest.mark.parametrize("fid,dev,term", sorted(OVER))
@pytest.mark.xfail(strict=True, reason="issue 38: over the measurement by more than the bound (see the docstring)")
def test_the_terms_known_to_be_over_are_within_bounds(fid, dev, term, facts):
    (err, bound), = [(e, b) for d, t, e, b in _rows(BY_ID[fid], facts) if (d, t) == (dev, term)]
    assert 0 < err and abs(err) <= bound, (err / MIB, bound / MIB)


@pytest.mark.parametrize("fid", HOST_SIDE)
def test_the_host_holds_what_the_plan_books(fid, facts):
    """Experts on the host, mapped: resident file pages are the booked range plus the process's libraries; pinned
    (--load-mode none): the pinned host buffer (shared memory of the process) is the booked sum plus the same."""
    fx = BY_ID[fid]
    (r,) = [r for r in fit_accuracy.compare(fx, facts) if r["device"] == "host" and r["component"] == "weights"]
    assert abs(r["error"]) <= MIB, r["error"] / MIB
    rss = fx["host_memory"]["after_long_prompt"]["process"]
    held = rss["RssShmem"] if "-lmnone-" in fid else rss["RssFile"]
    assert 0 <= held - r["predicted"] <= 256 * MIB, (held - r["predicted"]) / MIB
    if "-lmnone-" in fid:
        assert rss["RssFile"] < r["predicted"] / 2
