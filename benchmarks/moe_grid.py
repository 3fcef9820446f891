"""The compute buffer of a qwen3moe layer across its shape (issue 38): a grid of small header-only models.

Each point generates a qwen3moe (benchmarks/moe_models.py's graph and tensor table) of a few layers at one
(n_embd, n_expert_used, n_ff_exp) and loads it with llama-server b11434 (``--no-warmup``: only the scheduler's
reserve), all on one device, and prints the device's compute buffer as llama.cpp reports it, one JSON line a point.
The buffer is a function of the graph's shapes only (the layer count and the expert count move nothing), so small
models measure the law a real-size one reserves; the planner's MoE terms are read off these lines.

    python benchmarks/moe_grid.py --bindir DIR --models-dir DIR [--device CUDA0|none] [--grid small|full]

``--device none`` loads on the CPU backend (``-ngl 0``). No GPU needed for that one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time

import moe_models
from measure_llamacpp_buffers import RE_COMPUTE

BASE = {"n_layer": 4, "n_head": 32, "n_head_kv": 4, "head_dim": 128, "n_expert": 16, "n_vocab": 512,
        "ctx_train": 32768, "rope_freq_base": 1e6, "rms_eps": 1e-6}


def grid(kind):
    if kind == "small":
        return [dict(n_embd=2048, n_expert_used=u, n_ff_exp=f, ub=512, kv="f16") for u, f in ((4, 768), (8, 768))]
    pts = []
    for n, u, f in itertools.product((1024, 2048, 3072), (2, 4, 8, 12), (256, 768, 1536)):
        pts.append(dict(n_embd=n, n_expert_used=u, n_ff_exp=f, ub=512, kv="f16"))
    for n, u, f in ((2048, 8, 768), (2560, 6, 1280), (2048, 4, 1536)):
        for ub, kv in ((1024, "f16"), (2048, "f16"), (1024, "q8_0"), (2048, "q8_0"), (512, "q8_0")):
            pts.append(dict(n_embd=n, n_expert_used=u, n_ff_exp=f, ub=ub, kv=kv))
    for x, ub in itertools.product((64, 128), (512, 2048)):   # the router's width
        pts.append(dict(n_embd=2048, n_expert_used=8, n_ff_exp=768, ub=ub, kv="f16", n_expert=x))
    return pts


def model(out_dir, n_embd, n_expert_used, n_ff_exp, n_expert=BASE["n_expert"]):
    name = "grid_e%d_u%d_f%d_x%d" % (n_embd, n_expert_used, n_ff_exp, n_expert)
    moe_models.MODELS[name] = dict(BASE, n_embd=n_embd, n_expert_used=n_expert_used, n_ff_exp=n_ff_exp,
                                   n_ff=n_ff_exp * n_expert_used, n_expert=n_expert)
    return moe_models.ensure(name, out_dir)["path"]


def load(bindir, path, device, ub, kv, ctx=8192, port=18691):
    cmd = [os.path.join(bindir, "llama-server"), "-m", str(path), "-c", str(ctx), "-np", "1", "-b", str(max(ub, 2048)),
           "-ub", str(ub), "-ctk", kv, "-ctv", kv, "-fa", "on", "-t", "1", "--no-warmup", "--host", "127.0.0.1",
           "--port", str(port), "--cache-ram", "0", "--fit", "off", "--no-webui", "-lv", "5"]
    cmd += ["-ngl", "0"] if device == "none" else ["-ngl", "999", "--device", device]
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(p for p in (bindir, os.environ.get("LD_LIBRARY_PATH")) if p))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    found, t0 = {}, time.time()
    try:
        for line in proc.stdout:
            m = RE_COMPUTE.search(line)
            if m:
                found[m.group(1)] = float(m.group(2))
            if "model loaded" in line or "exiting due to" in line or time.time() - t0 > 120:
                break
    finally:
        proc.kill()
        proc.wait()
    return found


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bindir", required=True)
    p.add_argument("--models-dir", required=True)
    p.add_argument("--device", default="CUDA0", help="CUDA0, or none for the CPU backend")
    p.add_argument("--grid", default="full", choices=("small", "full"))
    p.add_argument("--ctx", type=int, default=8192)
    args = p.parse_args(argv)
    os.makedirs(args.models_dir, exist_ok=True)
    for pt in grid(args.grid):
        path = model(args.models_dir, pt["n_embd"], pt["n_expert_used"], pt["n_ff_exp"], pt.get("n_expert", 16))
        found = load(args.bindir, path, args.device, pt["ub"], pt["kv"], args.ctx)
        print(json.dumps(dict(pt, ctx=args.ctx, device=args.device, compute_mib=found)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
