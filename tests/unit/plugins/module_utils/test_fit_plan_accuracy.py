"""fit_plan against what llama.cpp b11434 actually allocated (issue 3, item 4).

Every fixture in tests/fixtures/llamacpp/b11434-cpu/ is one llama-server load recorded by
benchmarks/measure_llamacpp_buffers.py (buffers as llama.cpp printed them, per device). The planner
runs on the same configuration, with model facts read by gguf_info's own code from a sparse rebuild
of the recorded GGUF header, and must land within the issue's bounds on every device:
weights, KV and recurrent state within 1 MiB; compute within max(10 %, 32 MiB); total within
max(1 %, 64 MiB) and never under-predicted by more than 64 MiB.
No llama-server here: tests/integration/test_fit_accuracy_live.py re-measures one configuration.
"""
import json
import os

import pytest

import fit_accuracy
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan
from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
import measure_llamacpp_buffers as measure

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

MIB = 1024 * 1024
FIXTURES, MODELS = fit_accuracy.load_fixtures()
BY_ID = dict((fx["id"], fx) for fx in FIXTURES)


@pytest.fixture(scope="module")
def facts(tmp_path_factory):
    return fit_accuracy.Facts(MODELS, tmp_path_factory.mktemp("sparse-gguf"))


def test_the_matrix_is_recorded_in_full():
    """Every configuration of the matrix has a fixture that loaded, and nothing else is there."""
    ids = [c["id"] for c in measure.matrix()]
    assert sorted(ids) == sorted(BY_ID), "re-run: benchmarks/measure_llamacpp_buffers.py --matrix"
    assert all(fx["ok"] and fx["build"] == "b11434" for fx in FIXTURES)
    kinds = set(fx["model"] for fx in FIXTURES)
    assert {"dense", "hybrid", "hybrid_mtp", "swa"} <= kinds
    # the issue's axes: two ctx sizes, two parallel values, two ubatch sizes, f16 and q8_0 KV, two -ts values
    for kind in ("dense", "hybrid", "hybrid_mtp", "swa"):
        rpc = [fx["config"] for fx in FIXTURES if fx["model"] == kind and fx["config"]["devices"] == "rpc"]
        for axis in ("ctx", "parallel", "ubatch", "cache_type_k"):
            assert len(set(c[axis] for c in rpc)) >= 2, (kind, axis)
        assert len(set(tuple(c["tensor_split"] or ()) for c in rpc)) >= 2, kind


def test_buffers_are_hundreds_of_mib():
    """The matrix is sized so the laws are tested where they matter, not on toy buffers."""
    for comp in ("weights", "kv", "compute"):
        biggest = max(d[comp] for fx in FIXTURES for d in fx["measured"]["devices"].values())
        assert biggest >= 200 * MIB, comp


@pytest.mark.parametrize("name", sorted(MODELS))
def test_sparse_rebuild_is_the_recorded_header(tmp_path, name):
    """The rebuilt GGUF carries the recorded metadata and tensor table, byte-for-byte in size."""
    rec = MODELS[name]
    assert lib.rebuilt_header(rec["header"], tmp_path)["arrays"] == rec["header"]["arrays"]


@pytest.mark.parametrize("fid", sorted(BY_ID))
def test_recorded_log_parses_to_the_recorded_measurement(fid):
    """The parser, run again on the raw lines kept in the fixture, gives the recorded per-device numbers."""
    fx = BY_ID[fid]
    endpoints, _ = lib.parsed_log(fx)
    assert len(endpoints) == (fx["config"].get("n_devices", 2) if fx["config"]["devices"] == "rpc" else 0)


@pytest.mark.parametrize("fid", sorted(BY_ID))
def test_planner_within_the_issue_bounds(fid, facts):
    rows = lib.assert_within_bounds(BY_ID[fid], facts)
    devices = set(r["device"] for r in rows)
    assert "host" in devices
    if BY_ID[fid]["config"]["devices"] == "rpc":
        assert {"RPC%d" % i for i in range(BY_ID[fid]["config"].get("n_devices", 2))} <= devices


def test_bounds_are_the_issues():
    assert fit_accuracy.check("kv", 500 * MIB + MIB, 500 * MIB) == (MIB, True)
    assert fit_accuracy.check("weights", 500 * MIB + MIB + 1, 500 * MIB) == (MIB, False)
    assert fit_accuracy.check("compute", 130 * MIB, 100 * MIB) == (32 * MIB, True)
    assert fit_accuracy.check("compute", 880 * MIB, 1000 * MIB) == (100 * MIB, False)
    assert fit_accuracy.check("total", 1060 * MIB, 1000 * MIB) == (64 * MIB, True)
    # 1 % of 10 GiB would allow 102 MiB, but a total is never under-predicted by more than 64 MiB
    assert fit_accuracy.check("total", 10240 * MIB + 90 * MIB, 10240 * MIB)[1]
    assert not fit_accuracy.check("total", 10240 * MIB - 90 * MIB, 10240 * MIB)[1]


def _compute(fid, dev, role="target"):
    d = BY_ID[fid]["measured"]["devices"][dev]
    return d["compute"] if role == "target" else d["draft"]["compute"]


def test_law_kq_mask_is_copied_per_pipeline_copy():
    """llama.cpp keeps GGML_SCHED_MAX_COPIES (4) copies of every split input once a model spans two
    devices: the f16 KQ mask costs 8 B per (cell x token) on each of two RPC devices, 2 B on one."""
    two = (_compute("dense-c32768-np1-ub512-f16-ts31", "RPC1") - _compute("dense-c8192-np1-ub512-f16-ts11", "RPC1"))
    assert two == pytest.approx(8 * (32768 - 8192) * 512, abs=0.02 * MIB)
    for fx in (BY_ID["dense-c8192-np1-ub512-f16-rpc1"], BY_ID["dense-c8192-np1-ub512-f16-ts11"]):
        assert fx["measured"]["sched_copies"]["target"] == (1 if fx["config"].get("n_devices") == 1 else 4)
    # a drafter pinned to one device (--spec-draft-device) runs without copies, a split one with them
    assert BY_ID["dense-c32768-np2-ub512-f16-simple-rpc1-ts11"]["measured"]["sched_copies"]["draft"] == 1
    assert BY_ID["dense-c32768-np2-ub512-f16-simple-split-ts11"]["measured"]["sched_copies"]["draft"] == 4


def test_law_without_flash_attention_the_attention_is_the_peak():
    """No FA: the KQ matrix of the widest mask replaces the FFN as the peak -- n_ff does not show."""
    assert _compute("dense_ff8k-c8192-np2-ub512-f16-nofa-ts11", "RPC1") == \
        _compute("dense-c8192-np2-ub512-f16-nofa-ts11", "RPC1")
    assert _compute("dense_ff8k-c8192-np1-ub512-f16-ts11", "RPC1") > \
        _compute("dense-c8192-np1-ub512-f16-ts11", "RPC1") + 30 * MIB


def test_law_draft_kv_is_f16_whatever_the_target_kv(facts):
    """--spec-draft-type-k/-v default to f16 (common/common.h): a q8_0 target keeps an f16 MTP cache."""
    fx = BY_ID["hybrid_mtp-c32768-np1-ub512-q8_0-mtp7-ts31"]
    measured = fx["measured"]["devices"]["RPC1"]["draft"]["kv"]
    m = facts("hybrid_mtp")
    nextn = m["layers"][-1]
    assert measured == 32768 * 2 * nextn["n_head_kv"] * nextn["key_length"] * 2
    gpus, serve = fit_accuracy.planner_inputs(fx)
    assert serve["cache_type_k"] == "q8_0"
    r = fit_plan.plan(gpus, m, serve)
    assert r["devices"][1]["draft_detail"]["kv_bytes"] == measured
    # asked for explicitly (--spec-draft-type-k/-v q8_0), the draft cache is quantized
    q8 = fit_plan.plan(gpus, m, dict(serve, cache_type_k_draft="q8_0", cache_type_v_draft="q8_0"))
    kvw = nextn["n_head_kv"] * nextn["key_length"]
    assert q8["devices"][1]["draft_detail"]["kv_bytes"] == 32768 * 2 * (kvw // 32 * 34)


def test_law_mtp_nextn_weights_load_only_for_draft_mtp():
    """The nextn block is in the file either way; llama.cpp loads it only for --spec-type draft-mtp."""
    off = BY_ID["hybrid_mtp-c32768-np2-ub512-f16-ts31"]["measured"]["devices"]
    on = BY_ID["hybrid_mtp-c32768-np2-ub512-f16-mtp3-ts11"]["measured"]["devices"]
    base = BY_ID["hybrid-c32768-np2-ub512-f16-ts31"]["measured"]["devices"]
    assert sum(d["weights"] for d in off.values()) == sum(d["weights"] for d in base.values())
    assert sum(d["weights"] for d in on.values()) > sum(d["weights"] for d in base.values()) + 10 * MIB


def test_error_table_prints(capsys):
    assert fit_accuracy.main(["--failures"]) == 0
    out = capsys.readouterr().out
    assert "0 outside their bound" in out and "compute" in out


def test_rows_are_json():
    rows = fit_accuracy.all_rows()
    json.dumps(rows)
    assert len({r["config"] for r in rows}) == len(FIXTURES)
