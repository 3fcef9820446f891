"""The benchmark harnesses end to end against the real b11434 binaries and generated models,
driven directly (no Ansible): each produces its TSV, JSON and PNG; the spec comparison catches a
configuration that changes the greedy text; the sweep's device list, as llama-bench reports it,
proves the separator conversion (two ggml-rpc-server processes are the two "cards").
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_batch as bb
from ansible_collections.dankfleet.llm.plugins.module_utils.base import endpoint_client as be
from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_report as br
from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_spec as bs
from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_turns as bt
from ansible_collections.dankfleet.llm.tests.integration.bench_servers import EXACT_ARGS, PNG_MAGIC, rpc_servers
import bench_turn_latency

SIZES = {"prose_words": 60, "prose_n_predict": 32, "echo_words": 60, "echo_n_predict": 32,
         "structured_records": 5, "structured_n_predict": 32}


@pytest.fixture(scope="module")
def exact_target(tmp_path_factory):
    """dense-llama with f32 tensors (same seed, same architecture as the lab's f16 file)."""
    import gen_models
    return gen_models.write_model("dense-llama", tmp_path_factory.mktemp("bench-models") / "dense-llama-f32.gguf",
                                  tensor_type="f32")["path"]


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
        assert bench_turn_latency.main([srv.base_url, "2", "1", "CLI", "--document-words", "40", "--growth-words", "10",
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
