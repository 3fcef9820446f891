#!/usr/bin/env python
"""What a CPU ggml-rpc-server process takes beyond the buffers llama.cpp puts on it.

    python benchmarks/rpc_worker_overhead.py [--model PATH] [--ctx 8192] [--bindir DIR]

Starts one ``ggml-rpc-server`` (the shared lab build, ``$DANKFLEET_CACHE/llama-b11434-cpu-rpc``) on
127.0.0.1, reads its VmRSS idle, then starts ``llama-server --rpc <it> --device RPC0 -ngl 999`` on the
model, waits until it listens, sends one request (compute buffers are touched only by a first graph),
and reads the server's VmRSS again. Overhead = idle VmRSS + whatever VmRSS grew beyond the model + KV +
RS + compute + output buffers llama-server printed for RPC0 (never negative: RSS counts touched pages
only). fit_plan's ``RPC_SERVER_OVERHEAD_BYTES['cpu']`` is this figure rounded up with a margin.
Measured 2026-12-01 on the lab build: idle 5.7 MiB; dense-llama ctx 8192 and qwen35-hybrid ctx 65536
grew less than their buffers, so 5.7 MiB in all.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import measure_llamacpp_buffers as m

HERE = Path(__file__).resolve().parent

MIB = 1024 * 1024


def rss(pid):
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=str(m.CACHE / "models" / "dense-llama.gguf"))
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--bindir", default=str(m.PREFIX / "bin"))
    a = ap.parse_args(argv)
    cfg = m.normalize({"model": a.model, "ctx": a.ctx, "devices": "rpc", "n_devices": 1})
    pids = []
    with m.rpc_servers(1, a.bindir, pids=pids) as eps:
        time.sleep(0.5)
        idle = rss(pids[0])
        port = m.free_ports(1, avoid=[int(eps[0].rsplit(":", 1)[1])])[0]
        cmd = [os.path.join(a.bindir, "llama-server")] + m.common_args(cfg, eps) + [
            "--fit", "off", "--no-warmup", "-lv", "5", "--host", "127.0.0.1", "--port", str(port),
            "--cache-ram", "0", "--no-webui"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        lines, ready = [], threading.Event()

        def reader():
            for raw in iter(proc.stdout.readline, b""):
                lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                if "all slots are idle" in lines[-1]:
                    ready.set()
        threading.Thread(target=reader, daemon=True).start()
        if not ready.wait(180):
            proc.kill()
            print("\n".join(lines[-30:]))
            return 1
        loaded = rss(pids[0])
        req = m.first_request(port, cfg) if m.wait_health(port) else {"ok": False}
        after = rss(pids[0])
        m.stop_server(proc)
    parsed = m.parse_log(lines, eps)
    dev = parsed["devices"].get("RPC0") or {}
    buffers = sum(dev.get(k, 0) for k in ("weights", "kv", "recurrent", "compute", "output"))
    out = {"model": os.path.basename(a.model), "ctx": a.ctx, "idle_rss_mib": round(idle / MIB, 1),
           "loaded_rss_mib": round(loaded / MIB, 1), "after_request_rss_mib": round(after / MIB, 1),
           "rpc0_buffers_mib": round(buffers / MIB, 1), "request_ok": bool(req and req.get("ok")),
           # the process itself (binary, libraries, threads) before any buffer, plus whatever grew beyond
           # the buffers (RSS counts touched pages only: buffers never written do not show, so the excess
           # is clamped at 0 rather than netted against them)
           "overhead_mib": round((idle + max(0, after - idle - buffers)) / MIB, 1)}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
