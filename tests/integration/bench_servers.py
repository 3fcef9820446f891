"""What the benchmark-harness tests share (test_bench_harnesses.py, test_bench_playbooks.py): a port in the
benchmarks' range, ggml-rpc-server processes as stand-in cards, and the exact-arithmetic server flags."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

from measure_llamacpp_buffers import free_ports

BENCH_PORTS = range(18500, 18600)  # benchmarks' range (docs/DEVELOPING.md)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# f32 weights, f32 KV, no flash attention: the lab's random-weight models have top-2 logit gaps of
# ~1e-4, and b11434's CPU flash-attention path rounds through f16 differently for a batch of drafted
# tokens than for one token - enough to flip such a near-tie (measured: echo token 11 at -t 2).
# In f32 throughout, a greedy-text mismatch in the lab means a real divergence.
EXACT_ARGS = ("-ctk", "f32", "-ctv", "f32", "-fa", "off")


def bench_port(exclude=()) -> int:
    # Under pytest-xdist each worker scans from its own offset (gw0 18500, gw1 18525, ...):
    # between this probe and the server's bind another worker would see the same port free.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    offset = (int(worker[2:]) if worker[2:].isdigit() else 0) * 25 % len(BENCH_PORTS)
    return free_ports(1, avoid=exclude, ports=list(BENCH_PORTS[offset:]) + list(BENCH_PORTS[:offset]))[0]


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
