#!/usr/bin/env python
"""The cost side of speculative decoding, through the deployed launcher (issue 19).

Each ``--env NAME=ENV_FILE`` is one configuration of the same model, rendered by the llama_server role
(tests/gpu/render_serve.yml, with the planner's ``plan.json`` beside the env file): the launcher is
started with it exactly as systemd starts it, measured with the llm_bench role's own code
(``bench_spec.run_configuration``: prose / echo / structured prompts at temperature 0, ``ignore_eos``),
sampled with nvidia-smi per process, and stopped. Then the greedy identity check of bench_spec
(``compare_greedy``) runs over every configuration: speculation may never change an answer, and a
mismatch makes the run fail (exit 1).

On random weights the acceptance means nothing; what is measured is what speculation costs: decode
tokens/s with it enabled against disabled, and the GPU memory of the draft context against the plan
(nvidia-smi per process minus the no-speculation configuration's, against the plan's draft_bytes and
its MTP overhead).

    python benchmarks/spec_cost.py --launcher serve-llama-server --env nospec=a/llama-server.env \\
        --env mtp3=b/llama-server.env ... --out spec_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import import_paths  # noqa: F401 - run as a script: the collection on sys.path
from measure_llamacpp_buffers import nvidia_smi, stop_server
from served_vs_bench import read_env
from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError, Endpoint
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_spec import (
    build_prompts, compare_greedy, run_configuration)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

MIB = 1024 * 1024
SIZES = {"prose_words": 300, "prose_n_predict": 192, "echo_words": 300, "echo_n_predict": 192,
         "structured_records": 12, "structured_n_predict": 192}


def plan_of(env_file):
    """The plan rendered beside the env file (tests/gpu/render_serve.yml render_plan=true), or None."""
    p = Path(env_file).with_name("plan.json")
    return json.loads(p.read_text()) if p.exists() else None


def measure_one(name, env_file, launcher, prompts, log_path, timeout=900):
    env = read_env(env_file)
    port = int(env["LISTEN_PORT"])
    rec = {"name": name, "env_file": str(env_file),
           "env": {k: env.get(k) for k in ("CTX_SIZE", "PARALLEL", "BATCH_SIZE", "UBATCH_SIZE", "CACHE_TYPE_K",
                                           "SPEC_TYPE", "SPEC_DRAFT_N_MAX", "FLASH_ATTN", "DEVICES")}}
    plan = plan_of(env_file)
    if plan:
        rec["plan_devices"] = [{k: d.get(k) for k in ("name", "total_bytes", "draft_bytes", "overhead_bytes",
                                                      "kv_bytes", "compute_bytes", "weights_bytes")}
                               for d in plan.get("devices", [])]
    smi0 = nvidia_smi()
    t0 = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(launcher)], env=dict(os.environ, LLAMA_SERVER_ENV_FILE=str(env_file)),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            ep = Endpoint("http://127.0.0.1:%d" % port, timeout=timeout)
            ep.wait_healthy(600)
            rec["ready_s"] = round(time.monotonic() - t0, 2)
            rec["smi_after_load"] = nvidia_smi()
            rec.update(run_configuration(ep, prompts, repeats=1, timeout=timeout))
            rec["smi_after_run"] = nvidia_smi()
        except (BenchError, OSError, ValueError) as e:
            rec["error"] = str(e)
        finally:
            stop_server(proc)
    rec["pid"] = proc.pid
    rec["smi_before"] = smi0
    smi = rec.get("smi_after_run") or {}
    rec["smi_process_mib"] = (smi.get("apps") or {}).get(str(proc.pid))
    if plan and rec["smi_process_mib"] is not None:
        pred = sum(d["total_bytes"] - d.get("mmproj_bytes", 0) for d in plan["devices"])
        rec["plan_total_bytes"] = pred
        rec["plan_error_bytes"] = pred - rec["smi_process_mib"] * MIB
    for shape in (rec.get("shapes") or {}).values():
        shape.pop("text", None)            # the tokens are the record; the text of random weights is noise
    return rec


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", action="append", required=True, metavar="NAME=ENV_FILE",
                   help="a configuration; the first is the reference (speculation off)")
    p.add_argument("--launcher", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--sizes", default="{}", help="JSON overrides of the prompt sizes (bench_spec keys)")
    args = p.parse_args(argv)
    sizes = dict(SIZES, **json.loads(args.sizes))
    prompts = build_prompts(sizes)
    logs = Path(args.out).with_suffix("")
    confs = []
    for i, item in enumerate(args.env):
        name, _, env_file = item.partition("=")
        rec = measure_one(name, env_file, args.launcher, prompts, f"{logs}.server{i}.log")
        confs.append(rec)
        print(json.dumps({"name": name, "error": rec.get("error"), "ready_s": rec.get("ready_s"),
                          "smi_process_mib": rec.get("smi_process_mib"),
                          "plan_error_mib": (rec["plan_error_bytes"] / MIB) if "plan_error_bytes" in rec else None,
                          "decode_tps": {s: v.get("decode_tps") for s, v in (rec.get("shapes") or {}).items()},
                          "draft": {s: [v.get("draft_tokens"), v.get("accepted")]
                                    for s, v in (rec.get("shapes") or {}).items()}}), flush=True)
    mismatches = compare_greedy(confs)
    ref = confs[0]
    for c in confs[1:]:
        if c.get("smi_process_mib") is not None and ref.get("smi_process_mib") is not None:
            c["draft_smi_bytes"] = (c["smi_process_mib"] - ref["smi_process_mib"]) * MIB
        if c.get("plan_devices") and ref.get("plan_devices"):
            c["draft_plan_bytes"] = (sum(d["total_bytes"] for d in c["plan_devices"])
                                     - sum(d["total_bytes"] for d in ref["plan_devices"]))
        speed = {}
        for s, v in (c.get("shapes") or {}).items():
            r = (ref.get("shapes") or {}).get(s, {}).get("decode_tps")
            if r and v.get("decode_tps"):
                speed[s] = round(v["decode_tps"] / r, 4)
        c["decode_vs_reference"] = speed
    res = {"sizes": sizes, "configurations": confs, "greedy_mismatches": mismatches,
           "greedy_identical": not mismatches}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"greedy_identical": not mismatches, "mismatches": [m["message"] for m in mismatches],
                      "draft": {c["name"]: {"smi_mib": (c.get("draft_smi_bytes") or 0) / MIB,
                                            "plan_mib": (c.get("draft_plan_bytes") or 0) / MIB,
                                            "decode_vs_reference": c.get("decode_vs_reference")}
                                for c in confs[1:]}}, indent=1))
    return 1 if mismatches or any(c.get("error") for c in confs) else 0


if __name__ == "__main__":
    sys.exit(main())
