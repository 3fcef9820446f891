#!/usr/bin/env python
"""How long fit_plan takes to plan an auto split, by devices x layers.

    python benchmarks/plan_speed.py [--devices 2,4,8] [--layers 32,64,128] [--target 1.0] [--repeat 1]

Every cell is one ``fit_plan.plan()`` call with ``tensor_split: auto`` on a synthetic model
(gguf_info-shaped facts, no file): ``dense`` is a llama-like stack of full-attention layers,
``hybrid`` a qwen35-like one (three recurrent layers to one attention layer, an MTP head, draft-mtp
on). The model's weights fill about half of the devices (24 GiB each, cuda profile), so the
context matters. ``ctx max`` asks the planner for the largest context (a search over contexts, each
a split search); ``ctx fixed`` plans 16384 tokens (one slot). The best of ``--repeat`` runs is
printed, in seconds, with the split and context the planner chose.

Exits 1 when a cell takes ``--target`` seconds or more (default 1.0: issue 17's target).
"""
from __future__ import print_function

import argparse
import sys
import time

import import_paths  # noqa: F401 - run as a script: the collection on sys.path
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan

GIB = 1024 ** 3
MIB = 1024 ** 2
VRAM = 24 * GIB


def model(kind, n_layer, n_dev):
    """gguf_info-shaped facts: weights about 50 % of n_dev x 24 GiB."""
    n_embd, n_head, n_head_kv, head_dim, n_vocab = 4096, 32, 8, 128, 128000
    output = n_embd * n_vocab                       # q8_0-ish: one byte a weight
    per_layer = int((0.5 * n_dev * VRAM - output - n_embd * n_vocab) / n_layer)
    layers = []
    if kind == "dense":
        kinds = ["attention"] * n_layer
        arch, nextn = "llama", 0
    else:
        kinds = [("attention" if il % 4 == 3 else "recurrent") for il in range(n_layer - 1)] + ["nextn"]
        arch, nextn = "qwen35", 1
    for il, k in enumerate(kinds):
        kv = k in ("attention", "nextn")
        # a recurrent layer's weights are about 80 % of an attention layer's (no K/V projections)
        tb = per_layer if k != "recurrent" else int(per_layer * 0.8)
        layers.append({"index": il, "kind": k, "n_head_kv": n_head_kv if kv else 0,
                       "key_length": head_dim if kv else 0, "value_length": head_dim if kv else 0,
                       "n_ff": 4 * n_embd, "tensor_bytes": tb})
    return {"architecture": arch, "architecture_supported": True, "block_count": n_layer, "layers": layers,
            "layer_kinds": kinds, "embedding_length": n_embd, "feed_forward_length": 4 * n_embd,
            "vocab_size": n_vocab, "context_length": 1 << 20, "output_bytes": output,
            "token_embd_bytes": n_embd * n_vocab, "sliding_window": None, "nextn_predict_layers": nextn,
            "head_count": n_head, "key_length": head_dim,
            "recurrent_state": {"bytes_per_layer_per_seq": 3 * MIB if kind == "hybrid" else 0},
            "rs_rollback": arch == "qwen35"}


def serve(kind, ctx):
    s = {"backend": "cuda", "ctx_size": ctx, "parallel": 1, "ubatch_size": 512, "tensor_split": "auto",
         "floor_bytes": 1 * GIB, "flash_attn": "on"}
    if kind == "hybrid":
        s.update(spec_type=["draft-mtp"], spec_draft_n_max=3)
    return s


def cell(n_dev, n_layer, kind, ctx, repeat):
    gpus = [{"name": "CUDA%d" % i, "vram_total_bytes": VRAM} for i in range(n_dev)]
    m = model(kind, n_layer, n_dev)
    best, r = None, None
    for dummy in range(repeat):
        t0 = time.perf_counter()
        r = fit_plan.plan(gpus, m, serve(kind, ctx))
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return best, r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="2,4,8")
    ap.add_argument("--layers", default="32,64,128")
    ap.add_argument("--kinds", default="dense,hybrid")
    ap.add_argument("--ctx", default="max,16384", help="comma list: max and/or a fixed ctx_size")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--target", type=float, default=1.0, help="seconds a cell must stay under")
    a = ap.parse_args(argv)
    devices = [int(x) for x in a.devices.split(",")]
    layers = [int(x) for x in a.layers.split(",")]
    ctxs = [x if x == "max" else int(x) for x in a.ctx.split(",")]
    print("%-7s %-6s %-7s %-6s %9s  %-8s %s" % ("devices", "layers", "model", "ctx", "seconds", "ctx_size", "split"))
    slow = []
    for kind in a.kinds.split(","):
        for ctx in ctxs:
            for n_dev in devices:
                for n_layer in layers:
                    dt, r = cell(n_dev, n_layer, kind, ctx, a.repeat)
                    print("%-7d %-6d %-7s %-6s %9.3f  %-8d %s%s" % (
                        n_dev, n_layer, kind, ctx, dt, r["ctx_size"], ":".join(str(x) for x in r["tensor_split"]),
                        "" if r["fits"] else "  (does not fit)"))
                    sys.stdout.flush()
                    if dt >= a.target:
                        slow.append("%d x %d %s ctx %s: %.3f s" % (n_dev, n_layer, kind, ctx, dt))
    if slow:
        print("over the %.2f s target: %s" % (a.target, "; ".join(slow)))
        return 1
    print("every cell under %.2f s" % a.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
