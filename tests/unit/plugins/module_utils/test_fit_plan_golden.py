"""fit_plan's whole result on ~30 diverse plans, byte for byte against the record (issue 32, item 4).

tests/fixtures/fit_plan_golden.json was written by tests/fixtures/build_fit_plan_golden.py before _evaluate was
split into one function per component; every plan of its table (target layers, sliding windows, recurrent state,
draft-mtp, draft-simple / DFlash2 / DSpark drafters, the projector on a GPU and on the CPU, MoE experts on the
host, RPC workers; cpu/cuda/hip, fixed and auto splits, fixed and max contexts) must still give the recorded JSON,
key order included. A change meant to move a figure records the file again and the diff shows what moved.
"""
import json

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan
from ansible_collections.dankfleet.llm.tests.fixtures import build_fit_plan_golden as golden

with open(golden.GOLDEN) as _fh:
    RECORD = json.load(_fh)
CASES = dict((c[0], c) for c in golden.CASES)


def test_the_record_holds_every_case_of_the_table_and_nothing_else():
    assert list(RECORD["results"]) == [c[0] for c in golden.CASES]
    assert len(CASES) == len(golden.CASES) >= 30


def test_the_table_covers_every_component_the_planner_sizes():
    """A golden table that missed a component would prove nothing about its function."""
    res = RECORD["results"].values()
    devs = [d for r in res for d in r["devices"]]
    assert any(d["draft_bytes"] for d in devs) and any(d.get("draft_detail") for d in devs)
    assert any(d["mmproj_peak_bytes"] for d in devs) and any(r["host"]["mmproj_bytes"] for r in res)
    assert any(d["expert_copy_bytes"] for d in devs) and any(d["expert_weights_bytes"] for d in devs)
    assert any(d["recurrent_bytes"] for d in devs) and any(d.get("rpc_backend") for d in devs)
    assert any(r["host"]["draft_compute_bytes"] for r in res) and any(r["n_cpu_moe_choice"] for r in res)
    assert set(r["profile"]["backend"] for r in res) == {"cpu", "cuda", "hip"}
    assert any(not r["fits"] for r in res) and sum(r["fits"] for r in res) > 25


@pytest.mark.parametrize("case_id", list(CASES))
def test_the_plan_is_the_recorded_one_byte_for_byte(case_id):
    got = golden.result(CASES[case_id], RECORD["models"])
    assert json.dumps(got) == json.dumps(RECORD["results"][case_id])


def test_the_device_record_names_its_terms_as_the_result_does():
    """DeviceTerms holds each device's byte terms under the result's own names (issue 32: a typed record)."""
    terms = set(k for r in RECORD["results"].values() for d in r["devices"] for k in d if k.endswith("_bytes"))
    terms -= {"total_bytes", "free_bytes", "vram_total_bytes", "vram_reserved_bytes"}
    assert terms and terms <= set(fit_plan.DeviceTerms.__slots__)


def test_a_figure_one_byte_off_is_seen(monkeypatch):
    """The comparison can fail: one byte more of a device's overhead is a different plan."""
    monkeypatch.setitem(fit_plan.PROFILES["cuda"], "device_overhead_bytes",
                        fit_plan.PROFILES["cuda"]["device_overhead_bytes"] + 1)
    got = golden.result(CASES["cuda-swa_g-h200"], RECORD["models"])
    assert json.dumps(got) != json.dumps(RECORD["results"]["cuda-swa_g-h200"])
    assert got["devices"][0]["overhead_bytes"] == RECORD["results"]["cuda-swa_g-h200"]["devices"][0]["overhead_bytes"] + 1


def test_the_record_is_what_its_builder_writes():
    """The recorded lab models are their headers' facts and every result is today's: the builder's --check."""
    assert golden.main(["--check"]) == 0
