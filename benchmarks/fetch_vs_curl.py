"""gguf_fetch's download logic against `curl -o`, same file, same loopback server, same run.

    python3 benchmarks/fetch_vs_curl.py [--size-gib 2] [--rounds 3] [--dir /tmp]

Serves a sparse file of --size-gib GiB (a hole reads as zeros at page-cache
speed, so the server is not the bottleneck) with tests/lab/range_http_server.py
in its own process on a port in 18500-18599, then alternates
`curl -s -o OUT URL` and gguf_fetch.fetch(URL, OUT, size, sha256) --rounds
times, `sync` before each run and the previous output removed. Prints every
run (wall and CPU seconds) and the ratios of the medians; the target is a
wall ratio <= 1.10. On a loaded box the wall figures are noisy; the CPU ratio
says what the extra work (sha256) costs whatever the neighbours do.

gguf_fetch does more than curl in the same wall time: it hashes every byte
(sha256, on a second thread) and, by default, fsyncs the file before the
atomic rename. The fsync is timed separately (--fsync on|off|both, default
both) so the price of durability is a figure, not a surprise.
"""

import argparse
import hashlib
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import import_paths  # noqa: F401 - run as a script: the collection on sys.path
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import fetch, human

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SERVER = os.path.join(REPO, "tests", "lab", "range_http_server.py")


def start_server(root, lo=18500, hi=18599):
    """Start range_http_server on the first port of the benchmarks' range that binds.

    Binding is the test: a probe-then-start would race other engineers' benchmarks.
    """
    ports = list(range(lo, hi + 1))
    random.shuffle(ports)
    for port in ports:
        p = subprocess.Popen([sys.executable, SERVER, "--root", root, "--port", str(port), "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if p.stdout.readline().split() == ["LISTENING", str(port)]:
            return p, port
        p.wait(timeout=10)
    raise SystemExit("no free port in %d-%d" % (lo, hi))


def sparse_sha256(size):
    """sha256 of `size` zero bytes, computed (not looked up) once, outside the timing."""
    h = hashlib.sha256()
    block = bytes(16 << 20)
    left = size
    while left:
        n = min(left, len(block))
        h.update(block[:n] if n < len(block) else block)
        left -= n
    return h.hexdigest()


def clean(out):
    for p in (out, out + ".part", out + ".verified.json"):
        if os.path.exists(p):
            os.unlink(p)
    subprocess.run(["sync"], check=True)


def _cpu(who):
    ru = resource.getrusage(who)
    return ru.ru_utime + ru.ru_stime


def time_curl(url, out):
    """(wall s, cpu s) of one `curl -o`; cpu from the children's rusage."""
    clean(out)
    c0, t0 = _cpu(resource.RUSAGE_CHILDREN), time.monotonic()
    subprocess.run(["curl", "-s", "-f", "-o", out, url], check=True)
    return time.monotonic() - t0, _cpu(resource.RUSAGE_CHILDREN) - c0


def time_fetch(url, out, size, sha, fsync):
    """(wall s, cpu s) of one fetch(); cpu of this process, the sha256 thread included."""
    clean(out)
    c0, t0 = _cpu(resource.RUSAGE_SELF), time.monotonic()
    r = fetch(url, out, size, sha, disk_margin_bytes=0, retries=0, timeout=60, fsync=fsync)
    dt, dc = time.monotonic() - t0, _cpu(resource.RUSAGE_SELF) - c0
    assert r["status"] == "downloaded" and r["bytes_hashed"] == size, r
    return dt, dc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-gib", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir under $TMPDIR)")
    ap.add_argument("--fsync", choices=["on", "off", "both"], default="both")
    a = ap.parse_args()
    if not shutil.which("curl"):
        raise SystemExit("curl not found")
    size = int(a.size_gib * (1 << 30))
    work = tempfile.mkdtemp(prefix="fetch-vs-curl-", dir=a.dir)
    srv = None
    try:
        root = os.path.join(work, "www")
        os.mkdir(root)
        with open(os.path.join(root, "big.gguf"), "wb") as f:
            f.truncate(size)
        sha = sparse_sha256(size)
        srv, port = start_server(root)
        url = "http://127.0.0.1:%d/big.gguf" % port
        out = os.path.join(work, "out.gguf")
        modes = {"on": [True], "off": [False], "both": [True, False]}[a.fsync]
        print("file %s (%d bytes, sparse) from %s, %d rounds, cores %d, load %s"
              % (human(size), size, url, a.rounds, os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg())))
        times = {"curl": []}
        for m in modes:
            times["fetch fsync=%s" % m] = []
        for i in range(a.rounds):
            times["curl"].append(time_curl(url, out))
            print("round %d curl -o                %.2f s wall  %.2f s cpu" % ((i + 1,) + times["curl"][-1]), flush=True)
            for m in modes:
                k = "fetch fsync=%s" % m
                times[k].append(time_fetch(url, out, size, sha, m))
                print("round %d gguf_fetch fsync=%-5s %.2f s wall  %.2f s cpu" % ((i + 1, m) + times[k][-1]), flush=True)
        c = statistics.median(t[0] for t in times["curl"])
        cc = statistics.median(t[1] for t in times["curl"])
        print("median curl -o: %.2f s wall (%s/s), %.2f s cpu" % (c, human(size / c), cc))
        for m in modes:
            k = "fetch fsync=%s" % m
            f = statistics.median(t[0] for t in times[k])
            fc = statistics.median(t[1] for t in times[k])
            print("median gguf_fetch fsync=%s: %.2f s wall (%s/s), %.2f s cpu (sha256 included)  "
                  "wall ratio %.3f (target <= 1.10: %s), cpu ratio %.2f"
                  % (m, f, human(size / f), fc, f / c, "met" if f / c <= 1.10 else "NOT met", fc / cc))
    finally:
        if srv:
            srv.terminate()
            srv.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
