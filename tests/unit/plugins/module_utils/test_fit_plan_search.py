"""The auto split's search (issue 17, item 1): the balance point plus a local descent finds what the
enumeration of every split found, in devices x blocks evaluations rather than (blocks choose devices)."""
import itertools
import os
import subprocess
import sys
import tempfile

import pytest

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import plan

GIB, MIB = lib.GIB, lib.MIB


def enumerated(gpus, model, serve, drafter=None):
    """What the planner chose before issue 17: every integer split >= 1 per device, the first with the
    smallest _fits_key in ascending order."""
    c = fit_plan._prepare(gpus, model, serve, drafter, None)
    n, k = c.n_layer_all, c.n_dev
    best = None
    for head in itertools.product(range(1, n), repeat=k - 1):
        if sum(head) >= n:
            continue
        e = fit_plan._evaluate(c, list(head) + [n - sum(head)], serve["ctx_size"])
        if best is None or fit_plan._fits_key(e, serve.get("floor_bytes", 0)) < fit_plan._fits_key(best, serve.get("floor_bytes", 0)):
            best = e
    return [int(x) for x in best["split"]], best


def _recorded():
    """The planner's recorded RPC models (tests/fixtures/llamacpp/b11434-cpu), as gguf_facts."""
    import fit_accuracy
    fixtures, models = fit_accuracy.load_fixtures(fit_accuracy.SETS["cpu"])
    facts = fit_accuracy.Facts(models, tempfile.mkdtemp())
    seen, out = set(), []
    for fx in fixtures:
        gpus, serve = fit_accuracy.planner_inputs(fx)
        if fx["model"] in seen or fx.get("drafter") or len(gpus) < 2:
            continue
        seen.add(fx["model"])
        out.append((fx["model"], facts(fx["model"]), serve))
    return out


RECORDED = _recorded()


@pytest.mark.parametrize("name,model,serve", RECORDED, ids=[r[0] for r in RECORDED])
@pytest.mark.parametrize("vram", [(3, 3, 3), (2, 4, 3), (6, 2, 2)])
def test_three_devices_match_the_enumeration(name, model, serve, vram):
    gpus = [{"name": "RPC%d" % i, "vram_total_bytes": v * GIB} for i, v in enumerate(vram)]
    for ctx in (8192, 65536):
        sv = dict(serve, tensor_split="auto", ctx_size=ctx, floor_bytes=128 * MIB)
        want, best = enumerated(gpus, model, sv)
        got = plan(gpus, model, sv)
        assert got["tensor_split"] == want, (name, vram, ctx, got["table"])
        assert [d["free_bytes"] for d in got["devices"]] == [d["free_bytes"] for d in best["devices"]]


def test_the_runbooks_balance_points_on_three_cards():
    """frank-medium over three R9700s: the search lands where the enumeration does, MTP, vision and drafters on."""
    model, mm = lib.fixture("frank_medium"), lib.fixture("mmproj_bf16")
    gpus = lib.r9700s() + [{"name": "ROCm2", "vram_total_bytes": lib.R9700}]
    serve = {"backend": "hip", "ctx_size": 393216, "parallel": 2, "batch_size": 6144, "ubatch_size": 512,
             "spec_type": ["draft-mtp"], "spec_draft_n_max": 3, "floor_bytes": 1 * GIB, "tensor_split": "auto"}
    got = plan(gpus, model, serve, mmproj=mm)
    c = fit_plan._prepare(gpus, model, serve, None, mm)
    n = c.n_layer_all
    best = min((fit_plan._evaluate(c, [a, b, n - a - b], 393216) for a in range(1, n - 1) for b in range(1, n - a)),
               key=lambda e: fit_plan._fits_key(e, 1 * GIB))
    assert got["fits"] and got["tensor_split"] == best["split"]


def test_evaluations_grow_with_devices_times_blocks(monkeypatch):
    """3 devices x 128 blocks: the enumeration evaluated 8001 splits per context; the search a few hundred."""
    calls = []
    real = fit_plan._evaluate

    def counting(*a):
        calls.append(1)
        return real(*a)
    monkeypatch.setattr(fit_plan, "_evaluate", counting)
    import plan_speed
    for n_dev in (3, 8):
        del calls[:]
        r = plan([{"name": "CUDA%d" % i, "vram_total_bytes": plan_speed.VRAM} for i in range(n_dev)],
                 plan_speed.model("hybrid", 128, n_dev), plan_speed.serve("hybrid", 16384))
        assert r["fits"] and len(r["tensor_split"]) == n_dev
        assert len(calls) < 40 * n_dev * n_dev, (n_dev, len(calls))


def test_ctx_max_over_three_devices_is_the_largest_that_fits():
    m = lib.fixture("frank_medium")
    gpus = lib.r9700s() + [{"name": "ROCm2", "vram_total_bytes": 24 * GIB}]
    serve = {"backend": "hip", "ctx_size": "max", "parallel": 1, "floor_bytes": 1 * GIB, "tensor_split": "auto",
             "max_ctx_per_slot": 1 << 20}
    r = plan(gpus, m, serve)
    assert r["fits"]
    over = plan(gpus, m, dict(serve, ctx_size=r["ctx_size"] + 256))
    want, best = enumerated(gpus, m, dict(serve, ctx_size=r["ctx_size"] + 256))
    assert not over["fits"] and not fit_plan._passes(best, 1 * GIB)


def test_plan_speed_benchmark_runs():
    script = os.path.join(lib.ROOT, "benchmarks", "plan_speed.py")
    out = subprocess.run([sys.executable, script, "--devices", "3", "--layers", "32", "--target", "30"],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("\n3 ") == 4 and "every cell under" in out.stdout
