#!/usr/bin/env python
"""Served throughput through the deployed launcher against llama-bench, same model, same flags.

The llama_server role's launcher (serve-llama-server) is started by hand with the role's env file,
exactly as systemd would start it (``LLAMA_SERVER_ENV_FILE=<env> <launcher>``, no arguments). Once
/health answers, it is measured over HTTP:

* prefill: ``--reps`` completions of a ``--prompt``-token prompt (token ids, ``cache_prompt``
  false, so every prompt is processed) generating one token: the server's own
  ``timings.prompt_per_second``;
* decode: ``--reps`` completions of a short prompt generating ``--gen`` tokens (greedy,
  ``ignore_eos``): ``timings.predicted_per_second``; and the same with the env file's own sampling
  defaults (a request that names no sampler).

Then the server is stopped and ``llama-bench`` runs on the same model with the flags the env file
gives the server (device, -ngl, flash attention, batch, ubatch, KV types, threads, split):
``-p <prompt> -n <gen> -r <reps>``. The ratio served / bench is the figure (goal >= 0.95), against
llama-bench's median and its mean (its first repetition runs cold). ``--env`` may be repeated to
serve the same model from several env files (e.g. with other EXTRA_ARGS) against one llama-bench.

    python benchmarks/served_vs_bench.py --env ENV --launcher LAUNCHER --bench BIN/llama-bench --out R.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import import_paths  # noqa: F401 - run as a script: the collection on sys.path
from measure_llamacpp_buffers import post_json, prompt_tokens, stop_server, wait_health
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import read_env_file


def read_env(path):
    """The env file's assignments as the service gets them (the collection's one env-file reader)."""
    return read_env_file(str(path))[0]


def bench_args(env, prompt, gen, reps):
    """llama-bench flags equivalent to what the launcher gives llama-server."""
    fa = {"on": "1", "off": "0", "auto": "auto"}.get(env.get("FLASH_ATTN", "auto"), "auto")
    a = ["-m", env["MODEL_PATH"], "-p", str(prompt), "-n", str(gen), "-r", str(reps), "-o", "json", "-fa", fa]
    pairs = (("-ngl", "NGL"), ("-b", "BATCH_SIZE"), ("-ub", "UBATCH_SIZE"), ("-ctk", "CACHE_TYPE_K"),
             ("-ctv", "CACHE_TYPE_V"), ("-t", "NUM_THREADS"), ("-sm", "SPLIT_MODE"))
    for flag, var in pairs:
        if env.get(var):
            a += [flag, env[var]]
    if env.get("DEVICES"):
        a += ["-dev", env["DEVICES"].replace(",", "/")]
    if env.get("TENSOR_SPLIT"):
        a += ["-ts", env["TENSOR_SPLIT"].replace(",", "/")]
    return a


def completion(port, n_prompt, n_predict, salt, greedy=True):
    body = {"prompt": prompt_tokens(n_prompt, salt), "n_predict": n_predict, "cache_prompt": False,
            "ignore_eos": True}
    if greedy:
        body.update({"temperature": 0.0, "top_k": 1})
    t0 = time.monotonic()
    r = post_json(port, "/completion", body)
    t = r.get("timings") or {}
    return {"wall_s": round(time.monotonic() - t0, 4), "prompt_n": t.get("prompt_n"),
            "prompt_per_second": t.get("prompt_per_second"), "predicted_n": t.get("predicted_n"),
            "predicted_per_second": t.get("predicted_per_second")}


def serve_and_measure(env_file, launcher, env, prompt, gen, reps, log_path, timeout=600, warmup_tokens=0):
    port = int(env["LISTEN_PORT"])
    penv = dict(os.environ, LLAMA_SERVER_ENV_FILE=str(env_file))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(launcher)], env=penv, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            t0 = time.monotonic()
            if not wait_health(port, timeout):
                raise RuntimeError("the launched server never answered /health with 200 (exit %s); see %s"
                                   % (proc.poll(), log_path))
            ready_s = round(time.monotonic() - t0, 2)
            completion(port, 64, 8, 999)                      # warm-up: first-use allocations, CUDA graphs
            if warmup_tokens:
                # keep the GPU busy before timing, as llama-bench's own warm-up run does: a GPU that idled
                # ramps its clocks over the first seconds (served decode rose 354 -> 381 tok/s over 5 reps)
                completion(port, prompt, 1, 998)
                completion(port, 16, warmup_tokens, 997)
            pre = [completion(port, prompt, 1, i) for i in range(reps)]
            dec = [completion(port, 16, gen, 100 + i) for i in range(reps)]
            # the same with the env file's own sampling defaults (what a client that sends none gets)
            dec_def = [completion(port, 16, gen, 200 + i, greedy=False) for i in range(reps)]
        finally:
            stop_server(proc)
    return {"ready_s": ready_s, "prefill": pre, "decode": dec, "decode_default_sampling": dec_def,
            "prefill_tps": statistics.median(r["prompt_per_second"] for r in pre),
            "decode_tps": statistics.median(r["predicted_per_second"] for r in dec),
            "decode_default_sampling_tps": statistics.median(r["predicted_per_second"] for r in dec_def)}


def run_bench(bench, args, log_path):
    r = subprocess.run([str(bench)] + args, capture_output=True, text=True, timeout=900)
    Path(log_path).write_text(r.stderr)
    if r.returncode != 0:
        raise RuntimeError("llama-bench failed (rc %d): %s" % (r.returncode, r.stderr[-2000:]))
    rows = json.loads(r.stdout)
    out = {}
    for row in rows:
        key = "prefill" if row.get("n_gen", 0) == 0 else "decode"
        out[key] = {"avg_ts": row["avg_ts"], "stddev_ts": row["stddev_ts"], "samples_ts": row.get("samples_ts"),
                    "median_ts": statistics.median(row.get("samples_ts") or [row["avg_ts"]]),
                    "n_prompt": row.get("n_prompt"), "n_gen": row.get("n_gen")}
    out["build_commit"] = rows[0].get("build_commit") if rows else None
    out["gpu_info"] = rows[0].get("gpu_info") if rows else None
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", required=True, action="append",
                   help="the role's rendered env file (repeat: one served run per file, e.g. with other EXTRA_ARGS)")
    p.add_argument("--launcher", required=True, help="the role's rendered launcher (serve-llama-server)")
    p.add_argument("--bench", required=True, help="llama-bench of the same release")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--gen", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--warmup-tokens", type=int, default=0, help="tokens decoded by the server before timing")
    p.add_argument("--bench-around", action="store_true",
                   help="run llama-bench before and after the served runs (the ratio uses both)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    logs = Path(args.out).with_suffix("")
    served = {}
    envs = {}
    bench_before = None
    if args.bench_around:
        env0 = read_env(args.env[0])
        bench_before = run_bench(args.bench, bench_args(env0, args.prompt, args.gen, args.reps), f"{logs}.bench0.log")
    for i, env_file in enumerate(args.env):
        env = read_env(env_file)
        envs[env_file] = env
        try:
            served[env_file] = serve_and_measure(env_file, args.launcher, env, args.prompt, args.gen, args.reps,
                                                 f"{logs}.server{i}.log", warmup_tokens=args.warmup_tokens)
        except (RuntimeError, OSError, ValueError, urllib.error.URLError) as e:
            # one variant that does not serve (an experimental flag) must not lose the others
            print("served run with %s failed: %s" % (env_file, e), file=sys.stderr)
            if i == 0:
                raise
            continue
        served[env_file]["extra_args"] = env.get("EXTRA_ARGS")
    env = envs[args.env[0]]
    bargs = bench_args(env, args.prompt, args.gen, args.reps)
    bench = run_bench(args.bench, bargs, f"{logs}.bench.log")
    if bench_before:
        # the served runs sit between two llama-bench runs: compare with their mean
        for key in ("prefill", "decode"):
            bench[key]["before"] = bench_before[key]
            bench[key]["median_ts"] = (bench[key]["median_ts"] + bench_before[key]["median_ts"]) / 2
            bench[key]["avg_ts"] = (bench[key]["avg_ts"] + bench_before[key]["avg_ts"]) / 2
    ratios = {}
    for env_file, sv in served.items():
        ratios[env_file] = {
            "prefill_vs_avg": sv["prefill_tps"] / bench["prefill"]["avg_ts"],
            "prefill_vs_median": sv["prefill_tps"] / bench["prefill"]["median_ts"],
            "decode_vs_avg": sv["decode_tps"] / bench["decode"]["avg_ts"],
            "decode_vs_median": sv["decode_tps"] / bench["decode"]["median_ts"],
            "decode_default_sampling_vs_median": sv["decode_default_sampling_tps"] / bench["decode"]["median_ts"]}
    res = {"env": {k: env.get(k) for k in ("LLAMA_BIN", "MODEL_PATH", "DEVICES", "NGL", "FLASH_ATTN", "CTX_SIZE",
                                           "PARALLEL", "BATCH_SIZE", "UBATCH_SIZE", "NUM_THREADS", "CACHE_TYPE_K",
                                           "CACHE_TYPE_V", "TENSOR_SPLIT", "SPLIT_MODE")},
           "bench_args": [os.path.basename(args.bench)] + bargs, "served": served, "bench": bench, "ratio": ratios}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps({"served": {k: {"prefill_tps": v["prefill_tps"], "decode_tps": v["decode_tps"],
                                     "decode_default_sampling_tps": v["decode_default_sampling_tps"],
                                     "extra_args": v["extra_args"]} for k, v in served.items()},
                      "bench": {"prefill_tps": bench["prefill"]["median_ts"], "decode_tps": bench["decode"]["median_ts"]},
                      "ratio": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
