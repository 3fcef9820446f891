"""Re-derive fit_plan's ``hip`` profile from the runbook's rocm-smi figures and print the residuals.

    .venv/bin/python benchmarks/fit_plan_calibrate_hip.py            # residuals of the current profile
    .venv/bin/python benchmarks/fit_plan_calibrate_hip.py --fit      # least-squares fit, then residuals

Every profile constant enters the per-card total linearly, so the fit is a linear least squares
over tests/fixtures/runbook_points.py (the laws -- weights, KV, recurrent state, logits rows --
are not fitted). The fitted values are printed for pasting into PROFILES["hip"]; the unit test
tests/unit/plugins/module_utils/test_fit_plan_runbook.py asserts the runbook's own +-0.8 GiB on every point.
"""
import copy
import json
import os
import sys

import import_paths  # noqa: F401 - run as a script: the collection on sys.path
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan
from ansible_collections.dankfleet.llm.tests.fixtures.runbook_points import POINTS, R9700_VRAM

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")

GIB = 1024 ** 3
KEYS = ["device_overhead_bytes", "compute_base_bytes", "act_embd_bytes", "act_ff_bytes", "mask_bytes_per_cell",
        "logits_ubatch_bytes", "draft_compute_base_bytes", "draft_block_base_bytes", "mmproj_compute_bytes"]
# constants the rocm-smi totals cannot separate (no host figures, no per-copy split): held at these values
HELD = {"pipeline_copies": False, "host_modelled": False, "split_embd_bytes": 0.0, "first_embd_bytes": 0.0, "mask_bytes_per_cell_nofa": 7.75,
        "host_embd_bytes": 0.0, "host_split_embd_bytes": 0.0, "mtp_host_share": 0.5}


def load(name):
    with open(os.path.join(ROOT, "tests", "fixtures", name + ".json")) as fh:
        return json.load(fh)


FACTS = {"model": load("frank_medium"), "dflash2": load("dflash2"), "dspark": load("dspark"), "mmproj": load("mmproj_bf16")}
GPUS = [{"name": "ROCm0", "vram_total_bytes": R9700_VRAM, "vram_reserved_bytes": 0},
        {"name": "ROCm1", "vram_total_bytes": R9700_VRAM, "vram_reserved_bytes": 0}]


def predict(point, profile):
    saved = fit_plan.PROFILES["hip"]
    fit_plan.PROFILES["hip"] = profile
    try:
        r = fit_plan.plan(GPUS, FACTS["model"], point["serve"],
                          drafter=FACTS[point["drafter"]] if point["drafter"] else None,
                          mmproj=FACTS["mmproj"] if point["mmproj"] else None)
    finally:
        fit_plan.PROFILES["hip"] = saved
    # the runbook's rocm-smi figures are at load: what only an image request adds (issue 34) is not in them
    return [d["total_bytes"] - d.get("mmproj_peak_bytes", 0) for d in r["devices"]]


def rows():
    for p in POINTS:
        for card, used in enumerate(p["used_bytes"]):
            if used is not None:
                yield p, card, used


def _nnls_minimax(A, y, fixed):
    """Non-negative least squares by active set, then iteratively reweighted towards the smallest worst error."""
    import numpy as np
    n = A.shape[1]
    w = np.ones(len(y))
    sol = np.zeros(n)
    for dummy in range(60):
        free = [j for j in range(n) if j not in fixed]
        while True:
            Aw = A[:, free] * w[:, None]
            x = np.linalg.lstsq(Aw, (y - A[:, list(fixed)] @ np.array([fixed[j] for j in fixed]) if fixed else y) * w,
                                rcond=None)[0]
            if (x >= 0).all() or not free:
                break
            free = [j for j, v in zip(free, x) if v >= 0]
        sol = np.zeros(n)
        for j, v in fixed.items():
            sol[j] = v
        for j, v in zip(free, x):
            sol[j] = v
        r = np.abs(A @ sol - y)
        w = np.sqrt(np.maximum(r, r.max() * 0.05) / r.max())
    return sol


def fit():
    import numpy as np
    # priors that the data cannot separate: the HIP runtime's own footprint per device (rocm-smi on an idle
    # process holding a context reads ~300 MiB on gfx12), fitted on top of by compute_base_bytes
    fixed = {KEYS.index("device_overhead_bytes"): 300 * 1024 * 1024, KEYS.index("act_ff_bytes"): 0}
    zero = dict((k, 0) for k in KEYS)
    zero.update(HELD)
    zero["source"] = "fit"
    A, y = [], []
    for p, card, used in rows():
        base = predict(p, zero)[card]
        row = []
        for k in KEYS:
            unit = dict(zero)
            unit[k] = 1
            row.append(predict(p, unit)[card] - base)
        A.append(row)
        y.append(used - base)
    A, y = np.array(A, dtype=float), np.array(y, dtype=float)
    sol = _nnls_minimax(A, y, fixed)
    prof = dict(fit_plan.PROFILES["hip"])
    for k, v in zip(KEYS, sol):
        prof[k] = float(v)
    return prof


def report(profile):
    worst = 0.0
    print("%-30s %4s %9s %9s %7s" % ("point", "card", "measured", "predicted", "error"))
    for p, card, used in rows():
        pred = predict(p, profile)[card]
        err = (pred - used) / GIB
        worst = max(worst, abs(err))
        print("%-30s %4d %9.2f %9.2f %+7.2f" % (p["id"], card, used / GIB, pred / GIB, err))
    print("worst |error| %.2f GiB (runbook's own accuracy: 0.8 GiB)" % worst)
    return worst


if __name__ == "__main__":
    prof = copy.deepcopy(fit_plan.PROFILES["hip"])
    if "--fit" in sys.argv:
        prof = fit()
        for k in KEYS:
            print("%s: %r" % (k, prof[k]))
    report(prof)
