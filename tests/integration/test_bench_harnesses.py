"""The benchmark harnesses end to end against the real b11434 binaries and generated models,
driven directly (no Ansible): each produces its TSV, JSON and PNG; the spec comparison catches a
configuration that changes the greedy text; the sweep's device list, as llama-bench reports it,
proves the separator conversion (two ggml-rpc-server processes are the two "cards").
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.dankfleet.llm.plugins.module_utils import bench_batch as bb  # noqa: E402
from ansible_collections.dankfleet.llm.plugins.module_utils import bench_endpoint as be  # noqa: E402
from ansible_collections.dankfleet.llm.plugins.module_utils import bench_report as br  # noqa: E402
from ansible_collections.dankfleet.llm.plugins.module_utils import bench_spec as bs  # noqa: E402
from ansible_collections.dankfleet.llm.plugins.module_utils import bench_turns as bt  # noqa: E402

BENCH_PORTS = range(18500, 18600)  # benchmarks' range (docs/DEVELOPING.md)
SIZES = {"prose_words": 60, "prose_n_predict": 32, "echo_words": 60, "echo_n_predict": 32,
         "structured_records": 5, "structured_n_predict": 32}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# f32 weights, f32 KV, no flash attention: the lab's random-weight models have top-2 logit gaps of
# ~1e-4, and b11434's CPU flash-attention path rounds through f16 differently for a batch of drafted
# tokens than for one token - enough to flip such a near-tie (measured: echo token 11 at -t 2).
# In f32 throughout, a greedy-text mismatch in the lab means a real divergence.
EXACT_ARGS = ("-ctk", "f32", "-ctv", "f32", "-fa", "off")


@pytest.fixture(scope="module")
def exact_target(tmp_path_factory):
    """dense-llama with f32 tensors (same seed, same architecture as the lab's f16 file)."""
    import gen_models  # tests/lab, on sys.path through conftest
    return gen_models.write_model("dense-llama", tmp_path_factory.mktemp("bench-models") / "dense-llama-f32.gguf",
                                  tensor_type="f32")["path"]


def bench_port(exclude=()) -> int:
    # Under pytest-xdist each worker scans from its own offset (gw0 18500, gw1 18525, ...):
    # between this probe and the server's bind another worker would see the same port free.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    offset = (int(worker[2:]) if worker[2:].isdigit() else 0) * 25 % len(BENCH_PORTS)
    for port in list(BENCH_PORTS[offset:]) + list(BENCH_PORTS[:offset]):
        if port in exclude:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 18500-18599")


@contextlib.contextmanager
def rpc_servers(prefix: Path, log_dir: Path, count: int = 2):
    """`count` ggml-rpc-server processes on 127.0.0.1 (1 thread each); yields their host:port list."""
    procs, endpoints = [], []
    try:
        for i in range(count):
            port = bench_port(exclude={int(e.rsplit(":", 1)[1]) for e in endpoints})
            log = open(log_dir / f"rpc-{i}.log", "wb")
            procs.append(subprocess.Popen([str(prefix / "bin" / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port),
                                           "-t", "1"], stdout=log, stderr=subprocess.STDOUT))
            endpoints.append(f"127.0.0.1:{port}")
        for endpoint in endpoints:
            host, port = endpoint.rsplit(":", 1)
            deadline = time.monotonic() + 20
            while True:
                with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=1):
                    break
                assert time.monotonic() < deadline, f"ggml-rpc-server on {endpoint} did not listen"
                time.sleep(0.1)
        yield endpoints
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def assert_files(files: dict, kinds=("tsv", "json", "png")):
    assert sorted(files) == sorted(kinds), files
    for kind in kinds:
        path = Path(files[kind])
        assert path.is_file() and path.stat().st_size > 0, path
    if "png" in kinds:
        assert Path(files["png"]).read_bytes()[:8] == PNG_MAGIC


def test_spec_harness_ab_and_greedy_mismatch(lab_models, exact_target, llama_server, tmp_path):
    prompts = bs.build_prompts(SIZES)
    target, drafter = exact_target, lab_models["draft-small"]["path"]
    configurations = []
    with llama_server(target, "-np", "1", "--metrics", *EXACT_ARGS) as srv:
        result = bs.run_configuration(be.Endpoint(srv.base_url), prompts)
        configurations.append(dict(result, name="none", vars={"llama_server_spec_type": "none"}))
    chain = ["--spec-type", "draft-simple,ngram-mod", "--spec-draft-model", drafter, "--spec-draft-n-max", "4"]
    with llama_server(target, "-np", "1", "--metrics", *EXACT_ARGS, *chain) as srv:
        endpoint = be.Endpoint(srv.base_url)
        result = bs.run_configuration(endpoint, prompts)
        configurations.append(dict(result, name="draft-simple,ngram-mod@4", vars={"llama_server_spec_type": "draft-simple,ngram-mod"}))
        # the negative control: same server, a sampler that is not greedy
        hot = bs.run_configuration(endpoint, {"prose": prompts["prose"]}, request_overrides={"temperature": 1.5, "seed": 7})
        hot_conf = dict(hot, name="hot-sampler", request={"temperature": 1.5, "seed": 7})

    drafted = configurations[1]["shapes"]
    assert sum(rec["metric_drafts"] for rec in drafted.values()) > 0, "the chain never drafted: not an A/B of anything"
    assert all(rec["draft_tokens"] == rec["metric_draft_tokens"] for rec in drafted.values() if rec["draft_tokens"])
    assert configurations[0]["shapes"]["prose"]["metric_drafts"] == 0
    assert bs.compare_greedy(configurations) == [], "speculation changed the greedy text"
    assert configurations[0]["shapes"]["prose"]["tokens"] == drafted["prose"]["tokens"]

    report = br.write_report("spec", configurations, {"host": "localhost", "label": "pytest"}, str(tmp_path), "spec-ok")
    assert_files(report["files"])
    doc = json.loads(Path(report["files"]["json"]).read_text())
    assert doc["greedy_identical"] is True and doc["builds"] == ["b11434-unknown"]
    assert len(doc["rows"]) == 6 and all(r["decode_tps"] > 0 for r in doc["rows"])
    print("\n".join(report["summary"]))

    report = br.write_report("spec", configurations + [hot_conf], {"host": "localhost"}, str(tmp_path), "spec-mismatch")
    mismatches = report["findings"]["mismatches"]
    assert [(m["reference"], m["configuration"], m["shape"]) for m in mismatches] == [("none", "hot-sampler", "prose")]
    assert mismatches[0]["token"] is not None and "'none' and 'hot-sampler'" in mismatches[0]["message"]
    assert json.loads(Path(report["files"]["json"]).read_text())["greedy_identical"] is False


def test_turn_latency_harness(lab_models, llama_server, tmp_path):
    config = {"families": 2, "turns": 3, "document_words": 150, "growth_words": 40, "n_predict": 16, "seed": 1,
              "timeout": 120}
    with llama_server(lab_models["dense-llama"]["path"], "-np", "2", ctx_size=8192) as srv:
        rows = bt.run_turns(be.Endpoint(srv.base_url), config)
        # the same harness from a shell, the runbook's `bench-turn-latency.py URL 2 2 LABEL` shape
        cli = importlib.util.spec_from_file_location("bench_turn_latency", REPO / "benchmarks" / "bench_turn_latency.py")
        module = importlib.util.module_from_spec(cli)
        cli.loader.exec_module(module)
        assert module.main([srv.base_url, "2", "1", "CLI", "--document-words", "40", "--growth-words", "10",
                            "--n-predict", "4", "--out", str(tmp_path / "cli")]) == 0
    assert len(list((tmp_path / "cli").glob("*-turns-CLI.png"))) == 1
    assert [(r["family"], r["turn"], r["status"]) for r in rows] == [(f, t, "ok") for f in (0, 1) for t in (1, 2, 3)]
    for family in (0, 1):
        turns = [r for r in rows if r["family"] == family]
        assert turns[0]["cache_n"] == 0
        for prev, cur in zip(turns, turns[1:]):
            # the whole previous conversation is a cached prefix; only the answer and the new chunk are prefilled
            assert cur["cache_n"] >= prev["cache_n"] + prev["prompt_n"] - 4, (prev, cur)
            assert cur["prompt_n"] < cur["cache_n"], cur
    report = br.write_report("turns", rows, {"host": "localhost", "build": "b11434-unknown"}, str(tmp_path), "turns")
    assert_files(report["files"])
    per_turn = json.loads(Path(report["files"]["json"]).read_text())["per_turn"]
    assert [p["families"] for p in per_turn] == [2, 2, 2]
    print("\n".join(report["summary"]))


def test_batch_sweep_devices_by_separator(lab_models, llama_prefix, tmp_path):
    with rpc_servers(llama_prefix, tmp_path) as endpoints:
        config = {
            "llama_bench": str(llama_prefix / "bin" / "llama-bench"), "model": lab_models["dense-llama"]["path"],
            "batch_sizes": [0, 64], "ubatch_sizes": [0, 32], "depths": [0, 16], "n_prompt": 32, "n_gen": 8,
            "repetitions": 1, "rpc": endpoints, "devices": "RPC0,RPC1", "tensor_split": "1,1", "split_mode": "layer",
            "n_gpu_layers": 99, "flash_attn": "auto", "cache_type_k": "f16", "cache_type_v": "f16", "threads": 1,
            "extra_args": [], "transient_unit": False,  # no systemd here; the playbook test runs the units
        }
        rows = bb.run_sweep(config)

        # The trap the conversion exists for: the service's comma form handed to llama-bench as is
        # is a sweep over devices - every card benched on its own.
        comma = bb.cell_argv(config, 64, 32, 0)
        comma[comma.index("-dev") + 1] = "RPC0,RPC1"
        comma[comma.index("-ts") + 1] = "1"
        out = subprocess.run(comma, capture_output=True, text=True, timeout=120)
        alone = bb.parse_bench_output(out.stdout)

    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted({r["devices"] for r in alone}) == ["RPC0", "RPC1"] and len(alone) == 4

    assert [(r["batch"], r["ubatch"], r["depth"]) for r in rows] == [(0, 0, 0), (64, 0, 0), (64, 32, 0),
                                                                     (0, 0, 16), (64, 0, 16), (64, 32, 16)]
    ok = [r for r in rows if r["batch"] == 64]
    assert all(r["status"] == "ok" and r["devices"] == ["RPC0/RPC1"] and r["tensor_split"] == ["1.00/1.00"]
               for r in ok), ok
    assert all(r["pp_tps"] > 0 and r["tg_tps"] > 0 and r["peak_rss_mib"] > 0 and r["n_tests"] == 2 for r in ok)
    assert all(r["backends"] == "RPC" for r in ok)
    # b 0 / ub 0: llama-bench cannot create the context and calls exit(1) - one row, not the sweep
    dead = [r for r in rows if r["batch"] == 0]
    assert [r["status"] for r in dead] == ["failed", "failed"]
    assert all("failed to create context" in r["error"] for r in dead)
    assert all("-dev RPC0/RPC1 -ts 1/1" in r["command"] for r in rows)

    report = br.write_report("batch", rows, {"host": "localhost", "devices": "RPC0,RPC1"}, str(tmp_path), "batch")
    assert_files(report["files"])
    print("\n".join(report["summary"]))
