"""The recorded accuracy fixtures still describe the build: re-measure one of them live (slow, ~30 s).

tests/unit/plugins/module_utils/test_fit_plan_accuracy.py checks the planner against llama.cpp's buffers as recorded in
tests/fixtures/llamacpp/b11434-cpu/. This test loads one of those configurations again -- the lab
generator's medium dense llama over two ggml-rpc-server devices on 127.0.0.1, -ts 1,1 -- in the
built llama-server, and requires the same per-device buffers to the printed precision, and the
planner within the issue's bounds of the live numbers. A changed build or generator fails here,
naming the command that re-records the fixtures.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import accuracy_models
import fit_accuracy
import measure_llamacpp_buffers as measure

REPO = Path(__file__).resolve().parents[2]

FIXTURE_ID = "dense-c8192-np1-ub512-f16-ts11"
PRINTED = 0.01 * 1024 * 1024      # llama.cpp prints buffer sizes in MiB with two decimals
RERECORD = "benchmarks/measure_llamacpp_buffers.py --matrix --force --out tests/fixtures/llamacpp/b11434-cpu"


@pytest.fixture(scope="module")
def recorded():
    fixtures, models = fit_accuracy.load_fixtures()
    fx = next(f for f in fixtures if f["id"] == FIXTURE_ID)
    return fx, models


def test_live_load_matches_the_recorded_fixture(llama_prefix, recorded, tmp_path):
    fx, models = recorded
    rec = models[fx["model"]]
    entry = accuracy_models.ensure_model(fx["model"], measure.MODELS)
    header = accuracy_models.dump_header(entry["path"])
    assert accuracy_models.header_sha256(header) == accuracy_models.header_sha256(rec["header"]), (
        "tests/lab/gen_models.py now writes a different %s model than the one recorded; re-record: %s"
        % (fx["model"], RERECORD))

    cfg = dict(fx["config"], model=entry["path"])
    live = measure.measure(cfg, bindir=llama_prefix / "bin", fit_params=False)
    assert live["ok"], "llama-server did not load %s:\n%s" % (FIXTURE_ID, "\n".join(live.get("log_tail", [])))
    assert live["measured"]["sched_copies"]["target"] == fx["measured"]["sched_copies"]["target"]
    assert [L["device"] for L in live["measured"]["layers"]["target"]] == \
        [L["device"] for L in fx["measured"]["layers"]["target"]]

    got, want = live["measured"]["devices"], fx["measured"]["devices"]
    assert sorted(got) == sorted(want)
    drift = []
    for dev in sorted(want):
        for comp in ("weights", "kv", "recurrent", "compute", "output"):
            if abs(got[dev][comp] - want[dev][comp]) > PRINTED:
                drift.append("%s %s: live %.2f MiB, recorded %.2f MiB" % (dev, comp, got[dev][comp] / 2 ** 20,
                                                                          want[dev][comp] / 2 ** 20))
    assert not drift, "llama.cpp allocates differently than recorded; re-record: %s\n%s" % (RERECORD, "\n".join(drift))

    # and the planner holds its bounds against the live numbers, not only the stored ones
    fresh = dict(fx, measured=live["measured"])
    rows = fit_accuracy.compare(fresh, fit_accuracy.Facts(models, tmp_path))
    assert rows and all(r["ok"] for r in rows), [r for r in rows if not r["ok"]]
