#!/usr/bin/env python
"""Measure what llama.cpp b11434 allocates per device, as JSON.

One configuration = {model, ctx, parallel, batch, ubatch, cache types, flash
attention, speculative decoding, devices}. The shared test build's
llama-server is started with ``--fit off`` on that configuration — on the host
alone (``devices: local``) or over two ``ggml-rpc-server`` processes on
127.0.0.1 acting as two devices (``--rpc a,b --device RPC0,RPC1 -ts x,y``) —
and stopped with one SIGINT as soon as it listens. Its log is parsed for what
llama.cpp itself prints (b11434 source in brackets):

* ``load_tensors: <buft> model buffer size = X MiB``           (src/llama-model.cpp)
* ``load_tensors: layer N assigned to device D`` (-lv 5)        (src/llama-model.cpp)
* ``llama_kv_cache: <buft> KV buffer size = X MiB``            (src/llama-kv-cache.cpp)
* ``llama_memory_recurrent: <buft> RS buffer size = X MiB``    (src/llama-memory-recurrent.cpp)
* ``llama_context: <buft>  output buffer size = X MiB``        (src/llama-context.cpp)
* ``sched_reserve: <buft> compute buffer size = X MiB``        (src/llama-context.cpp)
* the memory breakdown table printed at shutdown (-lv >= 4)    (common/fit.cpp)

Buffers of the draft/MTP context (a second llama_context) are kept apart from
the target's. ``llama-fit-params -fitp on`` adds llama.cpp's own projection
(MiB, truncated) for the same arguments.

CUDA (``--set cuda-h200``, issue 9): the target is a GPU (``devices: cuda`` = ``--device CUDA0``)
or a layer split over the GPU and one ``ggml-rpc-server`` with the CUDA backend on the same GPU
(``devices: cuda+rpc`` = ``--rpc ep --device CUDA0,RPC0 -ts a,b``). Each load then also sends one
first request (a full ubatch of prompt and a few generated tokens) and samples ``nvidia-smi``
before the load, after it and after that request (whole GPU and per process), so the memory the
CUDA runtime takes beyond llama.cpp's own buffers is on record beside them.

    python benchmarks/measure_llamacpp_buffers.py --config '{"model": "/p/m.gguf", "ctx": 8192}'
    python benchmarks/measure_llamacpp_buffers.py --matrix --out tests/fixtures/llamacpp/b11434-cpu
    python benchmarks/measure_llamacpp_buffers.py --set cuda-h200 --matrix --models-dir DIR \
        --bindir RELEASE/bin --out tests/fixtures/llamacpp/b11434-cuda-h200

Vision (``--set cuda-h200-vision``, issue 34): a configuration with ``mmproj_kind`` loads a generated
real-size projector beside the target (``--mmproj``, ``--image-max-tokens``, ``--mmproj-device`` /
``--no-mmproj-offload``) and, after the first request, sends a 64x32 image and then the largest square image
the limit admits (sized from the projector's header, as the verify stage sizes it), sampling nvidia-smi
after each (``after_small_image``, ``after_large_image``): ggml's "reallocating" line is compiled out of a
Release build, so the per-process figures are the record of what an image adds.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import accuracy_models

HERE = Path(__file__).resolve().parent

MIB = 1024 * 1024
CACHE = Path(os.environ.get("DANKFLEET_CACHE", Path.home() / ".cache" / "dankfleet"))
PREFIX = Path(os.environ.get("LLAMA_PREFIX", CACHE / "llama-b11434-cpu-rpc"))
MODELS = CACHE / "accuracy-models" / "gen"
PORTS = range(18600, 18700)  # docs/DEVELOPING.md: planner accuracy runs
BUILD = "b11434"

DEFAULTS = {
    "ctx": 8192, "parallel": 1, "batch": 2048, "ubatch": 512,
    "cache_type_k": "f16", "cache_type_v": "f16", "flash_attn": "on",
    "spec_type": [], "spec_draft_n_max": None, "drafter": None,
    "devices": "local", "n_devices": 2, "tensor_split": None,
    # issue 38: experts on the host (--n-cpu-moe N / --cpu-moe), how the host holds them (--load-mode), and a
    # second, long prompt after the first request (tokens; 0 = none)
    "n_cpu_moe": 0, "cpu_moe": False, "load_mode": None, "long_prompt": 0,
}
DEVICE_MODES = ("local", "rpc", "cuda", "cuda+rpc")
GPU = "CUDA0"           # the local GPU of the cuda modes (llama.cpp's device name)


# ---------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------

def free_ports(n, avoid=(), ports=PORTS):
    """n free TCP ports on 127.0.0.1, tried in the order of ``ports`` (default: the accuracy range)."""
    got = []
    for p in ports:
        if p in avoid:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        got.append(p)
        if len(got) == n:
            return got
    raise RuntimeError(f"no {n} free ports in {min(ports)}-{max(ports)}: stop stale runs there")


def wait_port(port, proc, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            return False
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.1)
    return False


@contextlib.contextmanager
def rpc_servers(n, bindir=None, log_dir=None, device=None, pids=None):
    """n ggml-rpc-server processes (one device each: the CPU in a CPU build, ``device`` or the first
    GPU in a GPU build); yields their endpoints. ``pids``, a list, receives their process ids."""
    bindir = Path(bindir or PREFIX / "bin")
    ports = free_ports(n)
    procs = []
    try:
        for p in ports:
            log = open(Path(log_dir) / f"rpc-{p}.log", "wb") if log_dir else subprocess.DEVNULL
            procs.append(subprocess.Popen(
                [str(bindir / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(p), "-t", "1"]
                + (["-d", device] if device else []),
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            if pids is not None:
                pids.append(procs[-1].pid)
        for p, proc in zip(ports, procs):
            if not wait_port(p, proc, 30):
                raise RuntimeError(f"ggml-rpc-server on 127.0.0.1:{p} did not start (exit {proc.poll()})")
        yield [f"127.0.0.1:{p}" for p in ports]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def common_args(cfg, endpoints, spec=True):
    a = ["-m", cfg["model"], "-c", str(cfg["ctx"]), "-np", str(cfg["parallel"]),
         "-b", str(cfg["batch"]), "-ub", str(cfg["ubatch"]),
         "-ctk", cfg["cache_type_k"], "-ctv", cfg["cache_type_v"], "-fa", cfg["flash_attn"],
         "-t", "1", "-tb", "1"]
    if cfg["devices"] in ("rpc", "cuda+rpc"):
        rpc = [f"RPC{i}" for i in range(len(endpoints))]
        a += ["--rpc", ",".join(endpoints), "--device", ",".join(([GPU] if cfg["devices"] == "cuda+rpc" else []) + rpc),
              "-ngl", "999"]
        if cfg.get("tensor_split"):
            a += ["-ts", ",".join(str(x) for x in cfg["tensor_split"])]
    elif cfg["devices"] == "cuda":
        a += ["--device", GPU, "-ngl", "999"]
    else:
        a += ["--device", "none"]
    if cfg.get("n_cpu_moe"):
        a += ["--n-cpu-moe", str(cfg["n_cpu_moe"])]
    if cfg.get("cpu_moe"):
        a += ["--cpu-moe"]
    if cfg.get("load_mode"):
        a += ["--load-mode", cfg["load_mode"]]
    if spec and cfg["spec_type"]:
        a += ["--spec-type", ",".join(cfg["spec_type"])]
        if cfg.get("spec_draft_n_max") is not None:
            a += ["--spec-draft-n-max", str(cfg["spec_draft_n_max"])]
    if cfg.get("mmproj"):
        a += ["--mmproj", cfg["mmproj"]]
        if cfg.get("image_max_tokens"):
            a += ["--image-max-tokens", str(cfg["image_max_tokens"])]
        if cfg.get("mmproj_offload") is False:
            a += ["--no-mmproj-offload"]
        elif cfg.get("mmproj_device"):
            a += ["--mmproj-device", cfg["mmproj_device"]]
    if spec and cfg.get("drafter"):
        a += ["--spec-draft-model", cfg["drafter"]]
        if cfg.get("cache_type_k_draft"):
            a += ["-ctkd", cfg["cache_type_k_draft"], "-ctvd", cfg.get("cache_type_v_draft") or cfg["cache_type_k_draft"]]
        if cfg["devices"] != "local":
            a += ["--spec-draft-ngl", "999"]
            if cfg.get("draft_device"):
                a += ["--spec-draft-device", cfg["draft_device"]]
    return a


def nvidia_smi():
    """Memory in use per GPU and per process (MiB) as nvidia-smi reports it; None without nvidia-smi."""
    def query(what):
        r = subprocess.run(["nvidia-smi", f"--query-{what}", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return None
        return [[x.strip() for x in ln.split(",")] for ln in r.stdout.splitlines() if ln.strip()]
    try:
        gpus = query("gpu=index,memory.used,memory.total")
        apps = query("compute-apps=pid,used_memory")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if gpus is None:
        return None
    out = {"t": round(time.time(), 3),
           "gpus": [{"index": int(g[0]), "used_mib": int(g[1]), "total_mib": int(g[2])} for g in gpus if len(g) >= 3],
           "apps": {}}
    for a in apps or []:
        if len(a) >= 2 and a[0].isdigit() and a[1].isdigit():
            out["apps"][a[0]] = int(a[1])
    return out


HOST_STATUS_KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmLck", "VmPin")
HOST_MEMINFO_KEYS = ("MemTotal", "MemAvailable", "Cached", "Mlocked", "Unevictable")


def host_memory(pid):
    """The process's resident memory by kind and the host's (bytes), from /proc: RssFile is the mapped model's
    pages, RssAnon the process's own; pinned (cudaHostAlloc) memory shows in MemAvailable, not in VmLck."""
    def read(path, keys):
        out = {}
        try:
            with open(path) as f:
                for ln in f:
                    name, _, rest = ln.partition(":")
                    if name in keys and rest.split():
                        out[name] = int(rest.split()[0]) * 1024
        except OSError:
            return None
        return out
    return {"t": round(time.time(), 3), "process": read(f"/proc/{pid}/status", HOST_STATUS_KEYS) if pid else None,
            "host": read("/proc/meminfo", HOST_MEMINFO_KEYS)}


def long_request(port, cfg):
    """One completion with a long prompt (cfg long_prompt tokens, capped by the slot): the compute buffers' and
    the CUDA pools' high-water mark, after which the issue's bounds are read."""
    n_ctx_seq = cfg["ctx"] // max(1, cfg["parallel"])
    n = max(16, min(int(cfg["long_prompt"]), n_ctx_seq - 64))
    body = {"prompt": prompt_tokens(n, salt=1), "n_predict": 16, "cache_prompt": False, "temperature": 0.0,
            "top_k": 1, "ignore_eos": True}
    t0 = time.monotonic()
    try:
        r = post_json(port, "/completion", body, timeout=1800)
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"ok": False, "error": str(e), "prompt_n": n}
    return {"ok": True, "prompt_n": n, "wall_s": round(time.monotonic() - t0, 3), "timings": r.get("timings"),
            "tokens_predicted": r.get("tokens_predicted")}


def prompt_tokens(n, salt=0):
    """n token ids from the lab vocabulary's byte tokens (no control tokens), deterministic per salt."""
    return [40 + (i * 7919 + salt * 104729) % 200 for i in range(n)]


def post_json(port, path, body, timeout=300):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def stop_server(proc, grace=60):
    """SIGINT (llama.cpp prints its memory breakdown on the way out), then kill after `grace` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_health(port, timeout=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    return False


def first_request(port, cfg):
    """One completion with a full ubatch of prompt (capped by the slot's context) and 16 generated
    tokens: what a deployment does first, and what makes the CUDA runtime grow its pools."""
    n_ctx_seq = cfg["ctx"] // max(1, cfg["parallel"])
    n = max(16, min(cfg["ubatch"] + 64, n_ctx_seq - 64))
    body = {"prompt": prompt_tokens(n), "n_predict": 16, "cache_prompt": False, "temperature": 0.0,
            "top_k": 1, "ignore_eos": True}
    t0 = time.monotonic()
    try:
        r = post_json(port, "/completion", body)
    except (urllib.error.URLError, OSError, ValueError) as e:
        return {"ok": False, "error": str(e), "prompt_n": n}
    return {"ok": True, "prompt_n": n, "wall_s": round(time.monotonic() - t0, 3), "timings": r.get("timings"),
            "tokens_predicted": r.get("tokens_predicted")}


def image_requests(port, cfg, smi):
    """A 64x32 image, then the largest square one the projector's limit admits (capped to one slot), each
    followed by an nvidia-smi sample: what the projector's device holds after the first image and at its peak."""
    from ansible_collections.dankfleet.llm.plugins.module_utils.serve import endpoint_verify as ev
    slot = cfg["ctx"] // max(1, cfg["parallel"])
    plan = ev.image_plan({"MMPROJ_PATH": cfg["mmproj"], "IMAGE_MAX_TOKENS": str(cfg.get("image_max_tokens") or 0)},
                         slot)
    out = {"plan": plan, "images": []}
    for label, px in (("small", (64, 32)), ("large", (plan["px"], plan["px"]) if plan["px"] else None)):
        if px is None:
            continue
        content = [{"type": "text", "text": "Describe this image."},
                   {"type": "image_url", "image_url": {"url": ev.data_uri(ev.test_image(*px))}}]
        body = {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0.0,
                "cache_prompt": False}
        t0 = time.monotonic()
        try:
            r = post_json(port, "/v1/chat/completions", body, timeout=600)
            row = {"label": label, "px": list(px), "ok": True, "prompt_tokens": (r.get("usage") or {}).get("prompt_tokens")}
        except (urllib.error.URLError, OSError, ValueError) as e:
            row = {"label": label, "px": list(px), "ok": False, "error": str(e)}
        row["wall_s"] = round(time.monotonic() - t0, 3)
        out["images"].append(row)
        smi[f"after_{label}_image"] = nvidia_smi()
    return out


def run_server(cfg, endpoints, bindir, timeout=180, request=False):
    """Start llama-server, wait until it listens, (optionally) sample nvidia-smi and send one first
    request, then SIGINT it; return its log lines (and the samples)."""
    port = free_ports(1, avoid=[int(e.rsplit(":", 1)[1]) for e in endpoints])[0]
    cmd = [str(Path(bindir) / "llama-server")] + common_args(cfg, endpoints) + [
        "--fit", "off", "--no-warmup", "-lv", "5", "--host", "127.0.0.1", "--port", str(port),
        "--cache-ram", "0", "--no-webui"]
    smi = {"baseline": nvidia_smi()} if request else None
    host = {"baseline": host_memory(None)} if request else None
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines = []
    idle = threading.Event()

    def reader():
        # drained on its own thread: a verbose server blocks on a full pipe while a request runs
        for raw in iter(proc.stdout.readline, b""):
            s = raw.decode("utf-8", "replace").rstrip("\n")
            lines.append(s)
            # SIGINT only once the task loop runs: start_loop() sets running = true and
            # would swallow a terminate() that came earlier (tools/server/server-queue.cpp)
            if "all slots are idle" in s:
                idle.set()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    while not idle.wait(0.2):
        if proc.poll() is not None or time.monotonic() - t0 > timeout:
            break
    listening = idle.is_set()
    load_s = round(time.monotonic() - t0, 2)
    req = long_req = None
    if listening and request:
        smi["after_load"] = nvidia_smi()
        host["after_load"] = host_memory(proc.pid)
        req = first_request(port, cfg) if wait_health(port) else {"ok": False, "error": "/health never 200"}
        smi["after_request"] = nvidia_smi()
        host["after_request"] = host_memory(proc.pid)
        if cfg.get("long_prompt") and req.get("ok"):
            long_req = long_request(port, cfg)
            smi["after_long_prompt"] = nvidia_smi()
            host["after_long_prompt"] = host_memory(proc.pid)
        if cfg.get("mmproj") and req and req.get("ok"):
            req["vision"] = image_requests(port, cfg, smi)
    if listening:
        stop_server(proc)
    else:
        proc.kill()
        proc.wait()
    th.join(10)
    return {"cmd": cmd, "rc": proc.returncode, "listening": listening, "pid": proc.pid, "load_s": load_s,
            "seconds": round(time.monotonic() - t0, 2), "lines": lines, "nvidia_smi": smi, "request": req,
            "host_memory": host, "long_request": long_req}


def run_fit_params(cfg, endpoints, bindir, timeout=120):
    """llama.cpp's own projection (-fitp on): {device: {model, context, compute}} in MiB.

    llama-fit-params takes no speculative arguments, so this is the target alone.
    """
    cmd = [str(Path(bindir) / "llama-fit-params")] + common_args(cfg, endpoints, spec=False) + ["-fitp", "on"]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return {"cmd": cmd, "rc": None, "rows": {}}
    rows = {}
    for ln in r.stdout.splitlines():
        parts = ln.split()
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            rows[parts[0]] = {"model_mib": int(parts[1]), "context_mib": int(parts[2]), "compute_mib": int(parts[3])}
    return {"cmd": cmd, "rc": r.returncode, "rows": rows, "stdout": r.stdout.splitlines()}


# ---------------------------------------------------------------------------
# log parsing
# ---------------------------------------------------------------------------

RE_MODEL = re.compile(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB")
RE_LAYER = re.compile(r"load_tensors: layer\s+(\d+) assigned to device (\S+?), is_swa = (\d)")
RE_KV = re.compile(r"llama_kv_cache:\s+(\S+) KV buffer size =\s+([\d.]+) MiB")
RE_KV_SIZE = re.compile(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)/(\d+) seqs\)")
RE_RS = re.compile(r"llama_memory_recurrent:\s+(\S+) RS buffer size =\s+([\d.]+) MiB")
RE_RS_SIZE = re.compile(r"llama_memory_recurrent: size =\s+([\d.]+) MiB \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+) seqs\s+(\d+) rs_seq\)")
RE_OUT = re.compile(r"llama_context:\s+(\S+)\s+output buffer size =\s+([\d.]+) MiB")
RE_COMPUTE = re.compile(r"(?:sched_reserve|llama_context):\s+(\S+) compute buffer size =\s+([\d.]+) MiB")
RE_CTX_START = re.compile(r"llama_context: constructing llama_context")
RE_MODEL_START = re.compile(r"llama_model_loader: loaded meta data")
RE_CPARAM = re.compile(r"llama_context: (n_seq_max|n_ctx|n_ctx_seq|n_batch|n_ubatch|flash_attn|kv_unified|n_rs_seq|n_outputs_max)\s+= (\S+)")
RE_COPIES = re.compile(r"sched copies = (\d+)")
RE_FA = re.compile(r"[Ff]lash [Aa]ttention was auto, set to (\w+)|flash_attn\s+=\s+(\w+)")
RE_BREAKDOWN = re.compile(r"memory_breakdown_print: \|\s+-\s+(.+?)\s+\|(.*)\|\s*$")
RE_SWA_CELLS = re.compile(r"llama_kv_cache_iswa: creating\s+(non-SWA|SWA) KV cache, size = (\d+) cells")
# one scheduler reserve: "reserving ...", its compute buffers, "graph...: nodes = N", "reserve took ... copies"
RE_RESERVING = re.compile(r"sched_reserve: reserving \.\.\.")
RE_NODES = re.compile(r"sched_reserve: graph.*?: nodes = (\d+)")

WANTED = (RE_MODEL, RE_LAYER, RE_KV, RE_KV_SIZE, RE_RS, RE_RS_SIZE, RE_OUT, RE_COMPUTE, RE_CTX_START,
          RE_MODEL_START, RE_CPARAM, RE_COPIES, RE_BREAKDOWN, RE_SWA_CELLS, RE_RESERVING, RE_NODES)


def device_of(buft, endpoints=()):
    """Map a buffer-type name to the device that owns its memory: RPCn, a GPU (CUDA0) or host.

    An RPC buffer type is named after the *server's* device index and endpoint
    ("RPC0[127.0.0.1:18601]" is device 0 of the second server); the client-side
    device name (RPC0, RPC1, ... in --rpc order) is found through the endpoint.
    A GPU's buffer type is the device's own name (CUDA0, ROCm1); its pinned host
    buffers (CUDA_Host), the mmap'd weights (CPU_Mapped) and CPU are the host's.
    """
    m = re.match(r"RPC(\d+)\[(.+)\]$", buft)
    if m:
        if m.group(2) in endpoints:
            return f"RPC{list(endpoints).index(m.group(2))}"
        return f"RPC?[{m.group(2)}]"
    if buft.startswith("RPC"):
        return buft
    if re.match(r"(CUDA|ROCm|Vulkan|MUSA|SYCL)\d+$", buft):
        return buft
    return "host"


def endpoints_from_log(lines):
    """The --rpc endpoints in device order, read back from the memory breakdown ("- RPC1 (host:port)")."""
    found = {}
    for ln in lines:
        m = re.search(r"memory_breakdown_print: \|\s+-\s+RPC(\d+) \(([^)]+)\)", ln)
        if m:
            found[int(m.group(1))] = m.group(2)
    return [found[i] for i in sorted(found)]


def mib(x):
    return int(round(float(x) * MIB))


def parse_log(lines, endpoints=()):
    """Per-device components (bytes) of the target and draft contexts, plus the raw lines."""
    comp = ("weights", "kv", "recurrent", "compute", "output")
    roles = {"target": {}, "draft": {}}
    layers = {"target": {}, "draft": {}}
    cparams = {"target": {}, "draft": {}}
    kv_caches = {"target": [], "draft": []}
    rs_caches = {"target": [], "draft": []}
    swa_cells = {"target": [], "draft": []}
    copies = {}
    breakdown = {}
    raw = []
    n_models = 0
    n_ctx = 0
    # reserves (logs that print "reserving ..."): a context may reserve again later -- the target once a block
    # drafter turns on its layer-input extraction (llama_set_embeddings_layer_inp), the draft on its first
    # decode -- and those lines come after the draft context was built. Each reserve is held until its node
    # count is known and given to the context whose first reserve had the nearest one.
    reserves = []
    block = None
    first_nodes = {}

    def add(role, dev, key, val):
        d = roles[role].setdefault(dev, {c: 0 for c in comp})
        d[key] += val

    def settle(blk):
        if blk["nodes"] is None:
            role = blk["ctx_role"]
        elif blk["ctx_role"] not in first_nodes:
            role = blk["ctx_role"]
        else:
            role = min(first_nodes, key=lambda r: abs(first_nodes[r] - blk["nodes"]))
        first_nodes.setdefault(role, blk["nodes"] if blk["nodes"] is not None else 0)
        blk["role"] = role
        for dev, size in blk["compute"].items():
            add(role, dev, "compute", 0)
            roles[role][dev]["compute"] = size
        if blk.get("copies") is not None:
            copies[role] = blk["copies"]
        reserves.append({"role": role, "nodes": blk["nodes"], "compute": dict(blk["compute"]),
                         "copies": blk.get("copies")})

    for ln in lines:
        if not any(r.search(ln) for r in WANTED):
            continue
        raw.append(ln)
        if RE_RESERVING.search(ln):
            if block is not None:
                settle(block)
            block = {"ctx_role": "target" if n_ctx <= 1 else "draft", "nodes": None, "compute": {}}
            continue
        if block is not None and (m := RE_NODES.search(ln)):
            block["nodes"] = int(m.group(1))
            continue
        if block is not None and (m := RE_COMPUTE.search(ln)):
            block["compute"][device_of(m.group(1), endpoints)] = mib(m.group(2))
            continue
        if block is not None and (m := RE_COPIES.search(ln)):
            block["copies"] = int(m.group(1))
            settle(block)
            block = None
            continue
        if RE_MODEL_START.search(ln):
            n_models += 1
            continue
        if RE_CTX_START.search(ln):
            n_ctx += 1
            continue
        mrole = "target" if n_models <= 1 else "draft"
        crole = "target" if n_ctx <= 1 else "draft"
        if m := RE_MODEL.search(ln):
            add(mrole, device_of(m.group(1), endpoints), "weights", mib(m.group(2)))
        elif m := RE_LAYER.search(ln):
            layers[mrole][int(m.group(1))] = {"device": m.group(2) if m.group(2) != "CPU" else "host",
                                              "is_swa": m.group(3) == "1"}
        elif m := RE_KV.search(ln):
            add(crole, device_of(m.group(1), endpoints), "kv", mib(m.group(2)))
        elif m := RE_KV_SIZE.search(ln):
            kv_caches[crole].append({"mib": float(m.group(1)), "cells": int(m.group(2)), "layers": int(m.group(3)),
                                     "seqs": int(m.group(4)), "streams": int(m.group(5))})
        elif m := RE_RS.search(ln):
            add(crole, device_of(m.group(1), endpoints), "recurrent", mib(m.group(2)))
        elif m := RE_RS_SIZE.search(ln):
            rs_caches[crole].append({"mib": float(m.group(1)), "cells": int(m.group(2)), "layers": int(m.group(3)),
                                     "seqs": int(m.group(4)), "rs_seq": int(m.group(5))})
        elif m := RE_OUT.search(ln):
            add(crole, device_of(m.group(1), endpoints), "output", mib(m.group(2)))
        elif m := RE_COMPUTE.search(ln):
            # a context may reserve more than once (the MTP context does); the scheduler's
            # buffers only grow, and each report is the buffer's size now: keep the last
            dev = device_of(m.group(1), endpoints)
            add(crole, dev, "compute", 0)
            roles[crole][dev]["compute"] = mib(m.group(2))
        elif m := RE_CPARAM.search(ln):
            cparams[crole][m.group(1)] = m.group(2)
        elif m := RE_COPIES.search(ln):
            copies[crole] = int(m.group(1))
        elif m := RE_SWA_CELLS.search(ln):
            swa_cells[crole].append({"kind": m.group(1), "cells": int(m.group(2))})
        elif m := RE_BREAKDOWN.search(ln):
            name = m.group(1).split(" (")[0]
            nums = [int(x) for x in re.findall(r"-?\d+", m.group(2))]
            if len(nums) == 7:      # a device row (RPCn, CUDA0): total = free + self + unaccounted
                breakdown[name] = dict(zip(("total", "free", "self", "model", "context", "compute", "unaccounted"), nums))
            elif len(nums) == 4:
                breakdown[name] = dict(zip(("self", "model", "context", "compute"), nums))

    if block is not None:
        settle(block)
    devices = {}
    for role in ("target", "draft"):
        for dev, d in roles[role].items():
            e = devices.setdefault(dev, {c: 0 for c in comp} | {"draft": {c: 0 for c in comp}})
            tgt = e if role == "target" else e["draft"]
            for c in comp:
                tgt[c] += d[c]
    for e in devices.values():
        e["draft"]["total"] = sum(e["draft"][c] for c in comp)
        e["total"] = sum(e[c] for c in comp) + e["draft"]["total"]
    return {
        "devices": devices,
        "layers": {r: [layers[r][i] for i in sorted(layers[r])] for r in layers},
        "cparams": cparams,
        "kv_caches": kv_caches,
        "rs_caches": rs_caches,
        "swa_cells": swa_cells,
        "sched_copies": copies,
        "breakdown_mib": breakdown,
        **({"reserves": reserves} if reserves else {}),
        "raw_lines": raw,
    }


# ---------------------------------------------------------------------------
# one configuration
# ---------------------------------------------------------------------------

def normalize(cfg):
    c = dict(DEFAULTS)
    c.update(cfg)
    if c["devices"] not in DEVICE_MODES:
        raise ValueError(f"devices must be one of {', '.join(DEVICE_MODES)}, got {c['devices']!r}")
    if c["devices"] in ("local", "cuda") and c.get("tensor_split"):
        raise ValueError("tensor_split needs devices: rpc or cuda+rpc")
    return c


def rpc_needed(cfg):
    """ggml-rpc-server processes a configuration needs: every device of 'rpc', all but the GPU of 'cuda+rpc'."""
    return {"rpc": cfg["n_devices"], "cuda+rpc": cfg["n_devices"] - 1}.get(cfg["devices"], 0)


def measure(cfg, bindir=None, endpoints=None, fit_params=True):
    """Measure one configuration; returns the JSON-able result."""
    cfg = normalize(cfg)
    bindir = Path(bindir or PREFIX / "bin")
    need = rpc_needed(cfg)
    rpc_pids = []
    with contextlib.ExitStack() as st:
        if need and len(endpoints or []) < need:
            endpoints = st.enter_context(rpc_servers(need, bindir, pids=rpc_pids))
        endpoints = list(endpoints or [])[:need]
        run = run_server(cfg, endpoints, bindir, request=bool(cfg.get("request")))
        fit = run_fit_params(cfg, endpoints, bindir) if fit_params else None
    parsed = parse_log(run["lines"], endpoints)
    ok = run["listening"] and run["rc"] == 0 and bool(parsed["devices"])
    out = {
        "build": BUILD,
        "config": cfg,
        "endpoints": endpoints,
        "ok": ok,
        "rc": run["rc"],
        "seconds": run["seconds"],
        "cmd": [os.path.basename(run["cmd"][0])] + run["cmd"][1:],
        "measured": parsed,
        "fit_params_mib": fit["rows"] if fit else None,
    }
    if cfg.get("request"):
        # the process ids are what the per-process nvidia-smi figures are keyed by
        out.update({"load_s": run["load_s"], "pids": {"server": run["pid"], "rpc": rpc_pids},
                    "nvidia_smi": run["nvidia_smi"], "request": run["request"]})
        if run["request"] is None or not run["request"].get("ok"):
            out["ok"] = ok = False
        if cfg.get("long_prompt") or cfg.get("n_cpu_moe") or cfg.get("cpu_moe"):
            out.update({"host_memory": run["host_memory"], "long_request": run["long_request"]})
            if cfg.get("long_prompt") and not (run["long_request"] or {}).get("ok"):
                out["ok"] = ok = False
    if not ok:
        out["log_tail"] = run["lines"][-60:]
    return out


# ---------------------------------------------------------------------------
# the matrix
# ---------------------------------------------------------------------------

# ctx values per model: KV in the hundreds of MiB at the larger one
CTX = {"dense": (8192, 32768), "hybrid": (32768, 65536), "hybrid_mtp": (32768, 65536), "swa": (32768, 131072)}
SPLITS = ([1, 1], [3, 1])


def _cfg(id_, kind, **kw):
    c = {"id": id_, "kind": kind}
    c.update(kw)
    return c


def matrix():
    """The configurations of the accuracy matrix, each with a stable id.

    Per model a half fraction of 2^5 over (ctx, parallel, ubatch, KV type, -ts)
    on two RPC devices with flash attention on (the deployed setting): every
    factor and every pair of factors is varied, in 16 loads instead of 32.
    Then flash attention off at f16 (the compute law without FA), one local
    (host-only) load per model, the speculative shapes (MTP on the qwen35 head,
    a draft-simple drafter pinned to either device or split),
    geometry variants that separate the compute law's n_embd and n_ff terms,
    and one and three RPC devices (pipeline-parallel copies off / a middle card).
    """
    out = []
    for kind in ("dense", "hybrid", "hybrid_mtp", "swa"):
        for ci, pi, ui, ki, ti in itertools.product(range(2), repeat=5):
            if (ci + pi + ui + ki + ti) % 2:
                continue
            kv = ("f16", "q8_0")[ki]
            ctx, np_, ub, ts = CTX[kind][ci], (1, 2)[pi], (512, 2048)[ui], SPLITS[ti]
            out.append(_cfg(f"{kind}-c{ctx}-np{np_}-ub{ub}-{kv}-ts{ts[0]}{ts[1]}", kind, ctx=ctx, parallel=np_,
                            ubatch=ub, cache_type_k=kv, cache_type_v=kv, devices="rpc", tensor_split=ts))
        for ci, ui in itertools.product(range(2), repeat=2):
            ctx, ub = CTX[kind][0] // (1, 4)[ci], (512, 2048)[ui]
            out.append(_cfg(f"{kind}-c{ctx}-np2-ub{ub}-f16-nofa-ts11", kind, ctx=ctx, parallel=2, ubatch=ub,
                            flash_attn="off", devices="rpc", tensor_split=[1, 1]))
        out.append(_cfg(f"{kind}-c{CTX[kind][0]}-np2-ub512-f16-local", kind, ctx=CTX[kind][0], parallel=2,
                        ubatch=512, devices="local"))
    for ci, ui in itertools.product(range(2), repeat=2):
        ctx, ub = CTX["hybrid_mtp"][ci], (512, 2048)[ui]
        out.append(_cfg(f"hybrid_mtp-c{ctx}-np2-ub{ub}-f16-mtp3-ts11", "hybrid_mtp", ctx=ctx, parallel=2, ubatch=ub,
                        devices="rpc", tensor_split=[1, 1], spec_type=["draft-mtp"], spec_draft_n_max=3))
    out.append(_cfg("hybrid_mtp-c32768-np1-ub512-q8_0-mtp7-ts31", "hybrid_mtp", ctx=32768, parallel=1, ubatch=512,
                    cache_type_k="q8_0", cache_type_v="q8_0", devices="rpc", tensor_split=[3, 1],
                    spec_type=["draft-mtp"], spec_draft_n_max=7))
    out.append(_cfg("hybrid_mtp-c32768-np2-ub512-f16-mtp3-local", "hybrid_mtp", ctx=32768, parallel=2, ubatch=512,
                    devices="local", spec_type=["draft-mtp"], spec_draft_n_max=3))
    for dev in ("RPC1", "RPC0", None):
        tag = dev.lower() if dev else "split"
        out.append(_cfg(f"dense-c32768-np2-ub512-f16-simple-{tag}-ts11", "dense", ctx=32768, parallel=2, ubatch=512,
                        devices="rpc", tensor_split=[1, 1], spec_type=["draft-simple"], spec_draft_n_max=8,
                        drafter_kind="drafter", draft_device=dev))
    # no DFlash drafter: b11434 aborts reserving the generated medium draft-dflash graph (ggml-backend.cpp:2133
    # hash_set.size >= n_nodes + n_leafs at -ub 512; ggml_reshape_3d in build_dflash2_selector at -np 2)
    for kind in ("dense_ff8k", "dense_e2k"):
        for ub in (512, 2048):
            out.append(_cfg(f"{kind}-c8192-np1-ub{ub}-f16-ts11", kind, ctx=8192, parallel=1, ubatch=ub,
                            devices="rpc", tensor_split=[1, 1]))
            out.append(_cfg(f"{kind}-c8192-np2-ub{ub}-f16-nofa-ts11", kind, ctx=8192, parallel=2, ubatch=ub,
                            flash_attn="off", devices="rpc", tensor_split=[1, 1]))
    for ub in (512, 2048):
        out.append(_cfg(f"dense-c8192-np1-ub{ub}-f16-rpc3-ts111", "dense", ctx=8192, parallel=1, ubatch=ub,
                        devices="rpc", n_devices=3, tensor_split=[1, 1, 1]))
        out.append(_cfg(f"dense-c8192-np1-ub{ub}-f16-rpc1", "dense", ctx=8192, parallel=1, ubatch=ub,
                        devices="rpc", n_devices=1))
    return out


# The CUDA matrix (issue 9): GiB-scale models, one H200. Per model a half fraction of 2^4 over
# (ctx, parallel, ubatch, KV type), each on the GPU alone and split with a ggml-rpc-server (CUDA
# backend) on the same GPU at -ts 1,1 and 3,1; then the speculative shapes (a draft-simple drafter
# beside the dense model, draft-mtp on the qwen35 head) alone, pinned and split.
CUDA_CTX = {"dense_g": (16384, 65536), "hybrid_mtp_g": (65536, 262144)}
CUDA_PLACES = (("cuda", None), ("ts11", [1, 1]), ("ts31", [3, 1]))


def _cuda_cfg(id_, kind, place, **kw):
    tag, ts = place
    kw.setdefault("devices", "cuda" if ts is None else "cuda+rpc")
    if ts is not None:
        kw["tensor_split"] = ts
    return _cfg(id_, kind, backend="cuda", request=True, **kw)


def matrix_cuda():
    out = []
    for kind in ("dense_g", "hybrid_mtp_g"):
        for ci, pi, ui, ki in itertools.product(range(2), repeat=4):
            if (ci + pi + ui + ki) % 2:
                continue
            kv = ("f16", "q8_0")[ki]
            ctx, np_, ub = CUDA_CTX[kind][ci], (1, 2)[pi], (512, 2048)[ui]
            for place in CUDA_PLACES:
                out.append(_cuda_cfg(f"{kind}-c{ctx}-np{np_}-ub{ub}-{kv}-{place[0]}", kind, place, ctx=ctx,
                                     parallel=np_, ubatch=ub, cache_type_k=kv, cache_type_v=kv))
    simple = dict(spec_type=["draft-simple"], spec_draft_n_max=8, drafter_kind="drafter")
    for ctx, np_, ub, kv, place, dev in ((16384, 1, 512, "f16", CUDA_PLACES[0], None),
                                         (65536, 2, 2048, "q8_0", CUDA_PLACES[0], None),
                                         (16384, 2, 512, "f16", CUDA_PLACES[1], "RPC0"),
                                         (65536, 1, 2048, "f16", CUDA_PLACES[2], None)):
        tag = place[0] if place[1] is None else ("%s-%s" % ((dev or "split").lower(), place[0]))
        out.append(_cuda_cfg(f"dense_g-c{ctx}-np{np_}-ub{ub}-{kv}-simple-{tag}", "dense_g", place, ctx=ctx,
                             parallel=np_, ubatch=ub, cache_type_k=kv, cache_type_v=kv, draft_device=dev, **simple))
    for ctx, np_, ub, kv, place in ((65536, 1, 512, "f16", CUDA_PLACES[0]), (262144, 2, 2048, "q8_0", CUDA_PLACES[0]),
                                    (65536, 2, 512, "f16", CUDA_PLACES[1]), (262144, 1, 2048, "q8_0", CUDA_PLACES[2])):
        out.append(_cuda_cfg(f"hybrid_mtp_g-c{ctx}-np{np_}-ub{ub}-{kv}-mtp3-{place[0]}", "hybrid_mtp_g", place,
                             ctx=ctx, parallel=np_, ubatch=ub, cache_type_k=kv, cache_type_v=kv,
                             spec_type=["draft-mtp"], spec_draft_n_max=3))
    return out


# Real scale (issue 19): the runbook's 27B qwen35 hybrid + MTP head (qwen35_27b, 27.0 GiB q8_0) on the
# H200 alone with the production serve shape (2 slots, batch 6144, ubatch 512, FA, f16 KV, draft-mtp
# n_max 3 with ngram-mod beside it) at 65536, 262144 and the planner's `ctx_size: max` under the 1 GiB
# floor (tests/gpu/serve_27b.yml rendered with the plan: 1695232 = 2 x 847616), and one q8_0 load
# without a drafter (the FA f16 K/V copies at scale).
CTX_27B_MAX = 1695232


def matrix_cuda_27b():
    prod = dict(parallel=2, batch=6144, ubatch=512, spec_type=["draft-mtp", "ngram-mod"], spec_draft_n_max=3)
    out = [_cuda_cfg(f"qwen35_27b-c{ctx}-np2-ub512-f16-mtp3-cuda", "qwen35_27b", CUDA_PLACES[0], ctx=ctx, **prod)
           for ctx in (65536, 262144, CTX_27B_MAX)]
    out.append(_cuda_cfg("qwen35_27b-c262144-np1-ub2048-q8_0-cuda", "qwen35_27b", CUDA_PLACES[0], ctx=262144,
                         parallel=1, ubatch=2048, cache_type_k="q8_0", cache_type_v="q8_0"))
    return out


# Issue 17: a gemma3-like sliding-window model (swa_g) with a q8_0 KV at 131072+ under CUDA flash
# attention, alone and split over CUDA0 + RPC0 (the last device is the RPC one), with f16 controls.
def matrix_cuda_swa():
    out = []
    for ctx, np_, ub, kv, places in ((131072, 1, 512, "q8_0", CUDA_PLACES), (262144, 2, 2048, "q8_0", CUDA_PLACES),
                                     (131072, 1, 512, "f16", CUDA_PLACES[::2])):
        for place in places:
            out.append(_cuda_cfg(f"swa_g-c{ctx}-np{np_}-ub{ub}-{kv}-{place[0]}", "swa_g", place, ctx=ctx,
                                 parallel=np_, ubatch=ub, cache_type_k=kv, cache_type_v=kv))
    return out


# Issue 24: the 27B target beside a real-size block drafter (benchmarks/block_drafters.py: DFlash2-like with a
# 2048 window, DSpark-like with none) at the production context, the drafter on the second device (pinned to
# RPC0, the target's output device under -ts 1,1), on the target's only device, and split like the target;
# f16 and q8_0 KV, ubatch 512 and 2048. The fitting set is every ub 512 f16 / ub 2048 q8_0 / ub 2048 f16 row;
# HELD_OUT_24 (never used to fit the law) are the ub 512 q8_0 rows and two other shapes.
BLOCK_PLACES = (("rpc0", [1, 1], "RPC0"), ("cuda", None, None), ("split", [1, 1], None))
HELD_OUT_24 = re.compile(r"-ub512-q8_0-|-c131072-|-c65536-")


def matrix_cuda_block():
    import block_drafters
    out = []
    for kv, ub in (("f16", 512), ("q8_0", 2048), ("f16", 2048), ("q8_0", 512)):
        for drafter in ("dflash2_r", "dspark_r"):
            spec, n_max = block_drafters.SPEC[drafter]
            for tag, ts, dev in BLOCK_PLACES:
                out.append(_cuda_cfg(f"{drafter}-c262144-np1-ub{ub}-{kv}-{tag}", "qwen35_27b", (tag, ts), ctx=262144,
                                     parallel=1, ubatch=ub, cache_type_k=kv, cache_type_v=kv, cache_type_k_draft=kv,
                                     cache_type_v_draft=kv, spec_type=[spec],
                                     spec_draft_n_max=n_max, drafter_kind=drafter, draft_device=dev))
    out.append(_cuda_cfg("dspark_r-c131072-np2-ub1024-f16-split", "qwen35_27b", ("split", [1, 1]), ctx=131072,
                         parallel=2, ubatch=1024, spec_type=["draft-dspark"], spec_draft_n_max=6, drafter_kind="dspark_r"))
    out.append(_cuda_cfg("dflash2_r-c65536-np1-ub1024-q8_0-rpc0", "qwen35_27b", ("rpc0", [1, 1]), ctx=65536,
                         parallel=1, ubatch=1024, cache_type_k="q8_0", cache_type_v="q8_0", cache_type_k_draft="q8_0",
                         cache_type_v_draft="q8_0", spec_type=["draft-dflash"],
                         spec_draft_n_max=5, drafter_kind="dflash2_r", draft_device="RPC0"))
    return out


# Issue 38: a Qwen3-30B-A3B-class qwen3moe at its real size and Q4_K_M type mix (benchmarks/moe_models.py
# qwen3moe_r, 17.3 GiB) all on the GPU, split over CUDA0 + RPC0, and with experts on the host at two N, --cpu-moe,
# and --cpu-moe --load-mode none (pinned); every load answers a first completion and then a long prompt, after
# which nvidia-smi per process and the host's memory are read. HELD_OUT_38: rows no MoE constant is fitted on.
MOE_LONG_PROMPT = 8192
HELD_OUT_38 = re.compile(r"-ncmoe40-|-ub2048-q8_0-")


def _moe_rows(kind, rows):
    """One load per (ctx, ubatch, KV type, place, expert settings) row of model `kind`, each after a long prompt."""
    out = []
    for ctx, ub, kv, place, where in rows:
        tag = ("-ncmoe%d" % where["n_cpu_moe"] if where.get("n_cpu_moe") else "") + (
            "-cmoe" if where.get("cpu_moe") else "") + ("-lm%s" % where["load_mode"] if where.get("load_mode") else "")
        out.append(_cuda_cfg(f"{kind}-c{ctx}-np1-ub{ub}-{kv}{tag}-{place[0]}", kind, place, ctx=ctx,
                             ubatch=ub, cache_type_k=kv, cache_type_v=kv, long_prompt=MOE_LONG_PROMPT, **where))
    return out


def matrix_cuda_moe():
    return _moe_rows("qwen3moe_r", ((32768, 512, "f16", CUDA_PLACES[0], {}),
                                    (131072, 2048, "q8_0", CUDA_PLACES[0], {}),
                                    (65536, 512, "f16", CUDA_PLACES[1], {}),
                                    (65536, 512, "f16", CUDA_PLACES[0], {"n_cpu_moe": 24}),
                                    (65536, 2048, "f16", CUDA_PLACES[0], {"n_cpu_moe": 40}),
                                    (131072, 512, "f16", CUDA_PLACES[0], {"cpu_moe": True}),
                                    (131072, 512, "f16", CUDA_PLACES[0], {"cpu_moe": True, "load_mode": "none"})))


# Issue 38's held-out set: qwen3moe_h (benchmarks/moe_models.py: 64 experts of 1280, 6 used, n_embd 2560, 40 blocks), a
# model no MoE constant was fitted on, at shapes the fitted set did not have (ub 1024, ctx 49152, N = 12 and 30,
# -ts 3,1, q8_0 KV with experts on the host): all on the GPU, split, experts on the host, each after a long prompt.
def matrix_cuda_moe2():
    return _moe_rows("qwen3moe_h", ((49152, 512, "f16", CUDA_PLACES[0], {}),
                                    (131072, 1024, "q8_0", CUDA_PLACES[0], {}),
                                    (65536, 1024, "f16", CUDA_PLACES[2], {}),
                                    (65536, 512, "f16", CUDA_PLACES[0], {"n_cpu_moe": 12}),
                                    (65536, 1024, "q8_0", CUDA_PLACES[0], {"n_cpu_moe": 30}),
                                    (49152, 1024, "f16", CUDA_PLACES[0], {"cpu_moe": True}),
                                    (65536, 512, "f16", CUDA_PLACES[0], {"cpu_moe": True, "load_mode": "none"})))


# Issue 38's second held-out model: qwen3moe_t (the Qwen3-Next expert shape, 10 of 512 used at n_embd 2048), measured
# after the MoE layer's moments were read off the small-model grid: all on the GPU at ub 512 and 2048, split with
# q8_0 KV, experts on the host (N = 16; all, with q8_0 at ub 2048), each after a long prompt.
def matrix_cuda_moe3():
    return _moe_rows("qwen3moe_t", ((65536, 512, "f16", CUDA_PLACES[0], {}),
                                    (131072, 2048, "f16", CUDA_PLACES[0], {}),
                                    (65536, 1024, "q8_0", CUDA_PLACES[1], {}),
                                    (65536, 1024, "f16", CUDA_PLACES[0], {"n_cpu_moe": 16}),
                                    (131072, 2048, "q8_0", CUDA_PLACES[0], {"cpu_moe": True})))


# Issue 34: the 27B target beside a generated real-size qwen3vl_merger projector (gen_models "mmproj-qwen35" at scale
# real: 27 layers x 1152, 4304 FFN, 16-pixel patches merged 2 x 2, projecting into the target's 5120) in the
# production serve shape at 65536: the limit at b11434's default (4096 tokens), 1024 and 8192, the projector on the
# GPU, on the second device (RPC0 of a -ts 1,1 split, the CUDA backend on the same GPU) and on the CPU.
VISION_PLACES = (("cuda", None, None, True), ("rpc0", [1, 1], "RPC0", True), ("cpu", None, None, False))


def matrix_cuda_vision():
    prod = dict(parallel=2, batch=6144, ubatch=512, ctx=65536, mmproj_kind="mmproj-qwen35")
    out = []
    for limit in (None, 1024, 8192):
        for tag, ts, dev, offload in VISION_PLACES:
            if not offload and limit != 1024:
                continue                # on the CPU b11434 takes ~34 s a 1024-token image; larger ones time out
            out.append(_cuda_cfg(f"qwen35_27b-vision-max{limit or 'default'}-{tag}", "qwen35_27b", (tag, ts),
                                 image_max_tokens=limit, mmproj_device=dev, mmproj_offload=offload, **prod))
    return out


SETS = {"cpu": matrix, "cuda-h200": matrix_cuda, "cuda-h200-27b": matrix_cuda_27b, "cuda-h200-swa": matrix_cuda_swa,
        "cuda-h200-block": matrix_cuda_block, "cuda-h200-moe": matrix_cuda_moe, "cuda-h200-moe2": matrix_cuda_moe2,
        "cuda-h200-moe3": matrix_cuda_moe3,
        "cuda-h200-vision": matrix_cuda_vision}


def projector_record(name, out_dir, models_dir=None):
    """Generate (once) the real-size projector `name`; its path and the fixture's record of it."""
    g = accuracy_models.gen_models()
    path = Path(models_dir or MODELS) / f"{name}-real.gguf"
    manifest = path.with_suffix(".json")
    entry = json.loads(manifest.read_text()) if manifest.exists() and path.exists() else None
    if entry is None or entry.get("size") != path.stat().st_size:
        entry = g.write_projector(name, path, scale="real")
        manifest.write_text(json.dumps(entry, indent=1, default=str) + "\n")
    rec = {"name": name, "generator": {"script": "tests/lab/gen_models.py", "projector": name, "scale": "real"},
           "file_size": entry.get("size"), "sha256": entry.get("sha256"), "header": accuracy_models.dump_header(path)}
    return str(path), rec


def model_record(name, out_dir, models_dir=None):
    """Generate (once) the matrix model `name`; its path and the fixture's record of it."""
    import block_drafters
    import moe_models
    # the header-only generators: one record shape for each
    for generator, script in ((moe_models, "benchmarks/moe_models.py"), (block_drafters, "benchmarks/block_drafters.py")):
        if name in generator.MODELS:
            entry = generator.ensure(name, models_dir or MODELS)
            rec = {"name": name, "generator": {"script": script, "params": generator.MODELS[name],
                                               "recipe_sha256": entry["recipe_sha256"], "header_only": True},
                   "file_size": entry["size"], "sha256": None, "header": accuracy_models.dump_header(entry["path"])}
            return entry["path"], rec
    entry = accuracy_models.ensure_model(name, models_dir or MODELS)
    header = accuracy_models.dump_header(entry["path"])
    kind, scale, overrides = accuracy_models.shape_of(name)
    rec = {"name": name, "generator": {"script": "tests/lab/gen_models.py", "kind": kind, "scale": scale,
                                       "overrides": overrides, "seed": entry["seed"],
                                       "recipe_sha256": entry["recipe_sha256"]},
           "file_size": entry["size"], "sha256": entry["sha256"], "header": header}
    return entry["path"], rec


def _scrub(out, c):
    """Paths and ports are of the recording machine only."""
    out["config"]["model"] = f"{c['kind']}.gguf"
    if out["config"].get("drafter"):
        out["config"]["drafter"] = f"{c['drafter_kind']}.gguf"
    if out["config"].get("mmproj"):
        out["config"]["mmproj"] = f"{c['mmproj_kind']}.gguf"
    out.pop("endpoints", None)
    out["cmd"] = [re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", re.sub(r"^/.*/", "", a)) for a in out["cmd"]]
    return out


def run_matrix(out_dir, only=None, bindir=None, force=False, set_name="cpu", models_dir=None, fit_params=True):
    out_dir = Path(out_dir)
    (out_dir / "models").mkdir(parents=True, exist_ok=True)
    bindir = Path(bindir or PREFIX / "bin")
    paths = {}
    todo = [c for c in SETS[set_name]() if not only or any(re.search(o, c["id"]) for o in only)]
    todo = [c for c in todo if force or not (out_dir / f"{c['id']}.json").exists()]
    print(f"{len(todo)} configurations to measure", file=sys.stderr)
    # CPU: one set of RPC servers for the whole run. CUDA: fresh servers per load, so each load's
    # nvidia-smi figures start from an RPC server that has allocated nothing yet.
    shared = set_name == "cpu"
    n_rpc = max([rpc_needed(normalize(c)) for c in todo] or [0]) if shared else 0
    with rpc_servers(n_rpc, bindir) if n_rpc else contextlib.nullcontext([]) as endpoints:
        for i, c in enumerate(todo):
            for k in (c["kind"], c.get("drafter_kind"), c.get("mmproj_kind")):
                if k and k not in paths:
                    make = projector_record if k == c.get("mmproj_kind") else model_record
                    paths[k], rec = make(k, out_dir, models_dir)
                    (out_dir / "models" / f"{k}.json").write_text(json.dumps(rec, indent=1) + "\n")
            cfg = {k: v for k, v in c.items() if k not in ("id", "kind", "drafter_kind", "mmproj_kind")}
            cfg["model"] = paths[c["kind"]]
            if c.get("drafter_kind"):
                cfg["drafter"] = paths[c["drafter_kind"]]
            if c.get("mmproj_kind"):
                cfg["mmproj"] = paths[c["mmproj_kind"]]
            t0 = time.monotonic()
            try:
                res = measure(cfg, bindir, endpoints if shared else None, fit_params=fit_params)
            except Exception as e:  # noqa: BLE001 - one broken load must not stop the matrix
                res = {"build": BUILD, "config": normalize(cfg), "ok": False, "error": repr(e), "cmd": ["llama-server"],
                       "measured": None}
            out = {"id": c["id"], "model": c["kind"], "drafter": c.get("drafter_kind")}
            out.update(res)
            _scrub(out, c)
            (out_dir / f"{c['id']}.json").write_text(json.dumps(out, indent=1) + "\n")
            print(f"[{i + 1}/{len(todo)}] {c['id']}: ok={out['ok']} {time.monotonic() - t0:.1f}s", file=sys.stderr,
                  flush=True)


def add_fit_params(out_dir, bindir=None, set_name="cpu", models_dir=None, only=None):
    """llama-fit-params for every recorded configuration that has none yet (a later, cheaper pass)."""
    out_dir = Path(out_dir)
    bindir = Path(bindir or PREFIX / "bin")
    by_id = {c["id"]: c for c in SETS[set_name]()}
    for path in sorted(out_dir.glob("*.json")):
        fx = json.loads(path.read_text())
        c = by_id.get(fx.get("id"))
        if c is None or fx.get("fit_params_mib") is not None or not fx.get("ok"):
            continue
        if only and not any(re.search(o, c["id"]) for o in only):
            continue
        cfg = normalize({k: v for k, v in c.items() if k not in ("id", "kind", "drafter_kind")})
        cfg["model"] = str(Path(models_dir or MODELS) / f"{c['kind']}.gguf")
        need = rpc_needed(cfg)
        t0 = time.monotonic()
        with rpc_servers(need, bindir) if need else contextlib.nullcontext([]) as endpoints:
            fit = run_fit_params(cfg, endpoints, bindir)
        fx["fit_params_mib"] = fit["rows"]
        path.write_text(json.dumps(fx, indent=1) + "\n")
        print(f"fit-params {c['id']}: {sorted(fit['rows'])} {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", help="one configuration as JSON (model path required)")
    p.add_argument("--matrix", action="store_true", help="measure the accuracy matrix into --out")
    p.add_argument("--list", action="store_true", help="print the matrix ids")
    p.add_argument("--only", action="append", help="regex on matrix ids (repeatable)")
    p.add_argument("--force", action="store_true", help="re-measure configurations already in --out")
    p.add_argument("--out", default=None, help="fixture dir (default tests/fixtures/llamacpp/b11434-<set>)")
    p.add_argument("--bindir", default=str(PREFIX / "bin"))
    p.add_argument("--set", default="cpu", choices=sorted(SETS),
                   help="which matrix (cpu: issue 3; cuda-h200: issue 9; cuda-h200-27b: issue 19; cuda-h200-swa: issue 17; "
                   "cuda-h200-block: issue 24; cuda-h200-moe: issue 38; cuda-h200-moe2: its held-out model; cuda-h200-vision: issue 34)")
    p.add_argument("--models-dir", default=None, help=f"where the matrix models are generated (default {MODELS})")
    p.add_argument("--no-fit-params", action="store_true", help="skip llama-fit-params during the matrix")
    p.add_argument("--fit-params-only", action="store_true",
                   help="add llama-fit-params to recorded configurations that lack it")
    args = p.parse_args(argv)
    out = args.out or f"tests/fixtures/llamacpp/{BUILD}-{args.set}"
    if args.list:
        for c in SETS[args.set]():
            print(c["id"])
        return 0
    if args.fit_params_only:
        add_fit_params(out, args.bindir, args.set, args.models_dir, args.only)
        return 0
    if args.matrix:
        run_matrix(out, args.only, args.bindir, args.force, args.set, args.models_dir, not args.no_fit_params)
        return 0
    if args.config:
        res = measure(json.loads(args.config), args.bindir)
        print(json.dumps(res, indent=1))
        return 0 if res["ok"] else 1
    p.error("give --config, --matrix or --list")
    return 2


if __name__ == "__main__":
    sys.exit(main())
