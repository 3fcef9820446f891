"""Issue 18 on the H200: the records dankfleet.llm.plan_actual wrote on the device machine.

tests/gpu/device_pipeline.sh (phase pva) started the llama_server role's launcher with two rendered
env files of the 27B-class qwen35 hybrid (ctx 262144 pinned; ctx_size max = 1695232 under the 1 GiB
floor), sent a real request, and ran tests/gpu/plan_actual_device.yml: the module read nvidia-smi
--query-compute-apps for the server's pid and appended one record per deploy. The records and the
textfile are kept as they came back (tests/fixtures/plan_actual/b11434-cuda-h200-27b).
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual as pa

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "..", "..", "fixtures", "plan_actual", "b11434-cuda-h200-27b")
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def records():
    return pa.load_records(os.path.join(FIXTURE, "plan-vs-actual.json"))


def test_two_deploys_recorded_from_nvidia_smi_per_process(records):
    assert [r["plan"]["ctx_size"] for r in records] == [262144, 1695232]
    for r in records:
        assert r["backend"] == "cuda" and r["misses"] == []
        cuda = [d for d in r["devices"] if d["device"] == "CUDA0"]
        assert len(cuda) == 1
        assert cuda[0]["source"].startswith("nvidia-smi --query-compute-apps pid ")
        assert cuda[0]["gpu_uuid"].startswith("GPU-")


def test_cuda_totals_within_the_planners_bound_and_never_under(records):
    for r in records:
        for d in r["devices"]:
            if d["device"] != "CUDA0":
                continue
            actual, planned = d["measured_total"], d["planned"]["total"]
            # the verdict the module gave agrees with the bound recomputed here
            assert d["bound"] == pa.bound_bytes("cuda", actual)
            assert abs(actual - planned) <= d["bound"]
            assert actual - planned <= 64 * MIB      # the plan is never under by more than 64 MiB
            assert d["verdict"] == "ok"


def test_the_textfile_is_the_last_record(records):
    with open(os.path.join(FIXTURE, "llm_plan_actual.prom")) as handle:
        assert handle.read() == pa.render_textfile(records[-1])


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) not installed")
def test_the_textfile_passes_promtool():
    with open(os.path.join(FIXTURE, "llm_plan_actual.prom"), "rb") as handle:
        out = subprocess.run(["promtool", "check", "metrics"], stdin=handle, capture_output=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_records_fold_into_fit_accuracy(records):
    out = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "..", "..", "benchmarks", "fit_accuracy.py"),
                          "--records", FIXTURE], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    line = [x for x in out.stdout.splitlines() if x.strip().startswith("records cuda")]
    assert line and "outside bound 0" in line[0], out.stdout[-800:]
    assert json.dumps(records)  # the fixture is plain JSON
