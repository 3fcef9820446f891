"""The MoE layer's moments against b11434's own compute buffers across the layer's shape (issue 38).

tests/fixtures/llamacpp/b11434-cuda-h100-moegrid/moegrid.jsonl: benchmarks/moe_grid.py on one NVIDIA H100 -- small
header-only qwen3moe (4 blocks, 32 heads of 128, 4 KV heads, 16 experts) at n_embd 1024/2048/3072, 2..12 experts
used, n_ff_exp 256..1536, ub 512 (and 1024/2048, q8_0 KV, 64/128 experts at three shapes), ctx 8192, all on CUDA0;
each line the CUDA0 compute buffer llama.cpp reports after the scheduler's reserve. The buffer depends on the
graph's shapes only, so these points hold fit_plan's per-device graph law (_graph_compute with the MoE moments of
fit_plan.MOE_PHASES) directly. No GPU here.
"""
import json
import os

import pytest

import moe_grid
from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan

MIB = 1024 * 1024
with open(os.path.join(lib.FIXTURES, "llamacpp", "b11434-cuda-h100-moegrid", "moegrid.jsonl")) as _fh:
    POINTS = [json.loads(line) for line in _fh if line.strip()]


def point_id(p):
    return "e%(n_embd)d-u%(n_expert_used)d-f%(n_ff_exp)d-ub%(ub)d-%(kv)s" % p + "-x%d" % p.get("n_expert", 16)


IDS = [point_id(p) for p in POINTS]
KV_WIDTH = moe_grid.BASE["n_head_kv"] * moe_grid.BASE["head_dim"]
# where ggml-alloc's best fit leaves a gap the moments do not model (n_embd 3072, n_ff_exp 768): under, inside 64 MiB
GAPS = {"e3072-u8-f768-ub512-f16-x16", "e3072-u12-f768-ub512-f16-x16"}


def planned(p):
    """fit_plan's compute for one grid point: the device's graph (KQ mask, hidden state, the layer's peak)."""
    ctx, ub = p["ctx"], p["ub"]
    fa_kv_f16 = 0 if p["kv"] == "f16" else 2 * (KV_WIDTH + KV_WIDTH) * ctx
    return fit_plan._graph_compute(
        fit_plan.PROFILES["cuda"], True, ub, 1, p["n_embd"], p["n_expert_used"] * p["n_ff_exp"],
        moe_grid.BASE["n_head"], ctx, 0, first=True, q_width=moe_grid.BASE["n_head"] * moe_grid.BASE["head_dim"],
        moe_used=p["n_expert_used"], fa_kv_f16=fa_kv_f16)


def error(p):
    return planned(p) - p["compute_mib"]["CUDA0"] * MIB


def test_the_grid_is_a_cuda_reserve_across_the_layers_shape():
    assert len(POINTS) == 55 and all(p["device"] == "CUDA0" and p["compute_mib"].get("CUDA0") for p in POINTS)
    assert {p["n_embd"] for p in POINTS} >= {1024, 2048, 3072} and {p["n_expert_used"] for p in POINTS} >= {2, 12}
    assert {p["ub"] for p in POINTS} == {512, 1024, 2048} and {p["kv"] for p in POINTS} == {"f16", "q8_0"}


@pytest.mark.parametrize("p", POINTS, ids=IDS)
def test_never_under_by_more_than_64_mib_and_never_over_by_more_than_8(p):
    err = error(p)
    assert -64 * MIB <= err <= 8 * MIB, err / MIB
    if point_id(p) not in GAPS:
        assert abs(err) <= max(0.10 * p["compute_mib"]["CUDA0"] * MIB, 32 * MIB), err / MIB


def test_where_the_moments_pack_without_a_gap_the_law_is_exact():
    exact = [i for i, p in zip(IDS, POINTS) if abs(error(p)) <= 0.15 * MIB]
    assert len(exact) >= 20, exact
    # the held-out qwen3moe_h's layer shape (n_embd 2560, 6 of 1280) at every ubatch and KV type measured
    assert all(i in exact for i in IDS if i.startswith("e2560-u6-f1280-"))


def test_the_dense_law_fails_the_grid(monkeypatch):
    """The test can fail: 12 n_embd + 12 F + 4 E per token is under by more than 64 MiB where n_ff_exp is small
    against n_embd and over by more than 8 MiB where it is large."""
    monkeypatch.setattr(fit_plan, "_moe_layer", lambda n_embd, n_ff, used: 12 * n_embd + 12 * n_ff + 4 * used * n_embd)
    errs = [error(p) for p in POINTS]
    assert min(errs) < -64 * MIB and max(errs) > 8 * MIB
