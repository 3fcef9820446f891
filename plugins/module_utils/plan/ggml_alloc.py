# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ggml's graph allocator replayed over a Mixture-of-Experts transformer block (issue 38).

llama.cpp b11434 sizes a device's compute buffer by allocating the graph once (ggml-alloc.c: ggml_gallocr over a
ggml_dyn_tallocr): every node in graph order takes the best-fitting free block other than the last one, else the
last (which grows the buffer); an in-place op reuses a parent with one child left; a tensor is freed when its last
child is computed. Where the freed blocks fall decides the peak, so an MoE block's buffer is not a sum of live
tensors: its up/gate/GLU outputs leave a hole the experts' outputs may not fit, and the buffer grows past it
(qwen3moe at n_embd 2048 with 10 of 512 used: 122 x n_embd per token where the live tensors peak at 92). This module
replays that allocation over the block's graph (llm_graph_context::build_attn with flash attention and
build_moe_ffn, b11434) and returns the peak.

On CUDA and HIP, ggml-cuda's graph_optimize adds allocation dependencies for the fused MoE kernels (ggml-cuda.cu:
the top-k router chain and the weighted reduction: the experts' outputs and the router weights stay alive to the
reduction's last add, so the weighting cannot reuse them in place); ggml-rpc and the CPU backend have none.
Measured: tests/fixtures/llamacpp/b11434-cuda-h100-moegrid (55 small models on one H100) and the real-scale
qwen3moe loads of tests/fixtures/llamacpp/b11434-cuda-h200-moe and b11434-cuda-h100-moe2/moe3.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

ALIGNMENT = 128          # ggml_backend_cuda_buffer_type_get_alignment; the CPU buffer's is smaller
REPLAY_LAYERS = 3        # the allocation repeats from the second block on (measured: 2..48 blocks give one peak)

_CACHE = {}


class _Tensor:
    __slots__ = ("size", "srcs", "inplace", "view_src", "is_input", "children", "views", "allocated", "addr")

    def __init__(self, size=0, srcs=(), inplace=False, view_src=None, is_input=False, external=False):
        self.size = size
        self.srcs = list(srcs)
        self.inplace = inplace
        self.view_src = view_src
        self.is_input = is_input
        self.children = 0
        self.views = 0
        self.allocated = False
        self.addr = "external" if external else None


class _Dep(_Tensor):
    """ggml-backend's GGML_OP_NONE dependency node: keeps its sources alive until it is reached, allocates nothing."""


def _aligned(size):
    return -(-size // ALIGNMENT) * ALIGNMENT


class _DynAllocator:
    """ggml_dyn_tallocr with one chunk: free blocks sorted by offset, the last one unbounded."""

    def __init__(self):
        self.free = [[0, 1 << 62]]
        self.max_size = 0

    def alloc(self, size):
        size = _aligned(size)
        best, best_size = -1, None
        for i in range(len(self.free) - 1):          # the best fit besides the last block (ties: the later one)
            if self.free[i][1] >= size and (best_size is None or self.free[i][1] <= best_size):
                best, best_size = i, self.free[i][1]
        if best == -1:
            best = len(self.free) - 1
        block = self.free[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del self.free[best]
        self.max_size = max(self.max_size, offset + size)
        return offset

    def release(self, offset, size):
        size = _aligned(size)
        for i, block in enumerate(self.free):
            if block[0] + block[1] == offset:                # at the end of a block
                block[1] += size
                if i + 1 < len(self.free) and block[0] + block[1] == self.free[i + 1][0]:
                    block[1] += self.free[i + 1][1]
                    del self.free[i + 1]
                return
            if offset + size == block[0]:                    # at the beginning of a block
                block[0] = offset
                block[1] += size
                if i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == block[0]:
                    self.free[i - 1][1] += block[1]
                    del self.free[i]
                return
        i = 0
        while i < len(self.free) and self.free[i][0] < offset:
            i += 1
        self.free.insert(i, [offset, size])


def replay(nodes):
    """The buffer ggml_gallocr reserves for nodes (in graph order): its high-water mark in bytes."""
    dyn = _DynAllocator()

    def allocate(t):
        if t.allocated or t.view_src is not None or isinstance(t, _Dep) or t.addr == "external":
            return
        t.allocated = True
        if t.inplace:
            # a parent of the same size whose last child this is; not through a view parent (ggml reuses a view's
            # source too, but replaying that moved 31 of the grid's 55 points 4-40 MiB off the measurement)
            for p in t.srcs:
                if p.view_src is None and p.size == t.size and p.allocated and p.children == 1 and p.views == 0:
                    t.addr, p.allocated = p.addr, False
                    return
        t.addr = dyn.alloc(t.size)

    def release(t):
        if t.allocated and t.addr != "external":
            dyn.release(t.addr, t.size)
            t.allocated = False

    for n in nodes:
        if n.view_src is not None and not isinstance(n, _Dep):
            n.view_src.views += 1
        if n.is_input:
            allocate(n)
        for p in n.srcs:
            p.children += 1
            if p.is_input:
                allocate(p)
    for n in nodes:
        for p in n.srcs:
            allocate(p)
        allocate(n)
        for p in n.srcs:
            p.children -= 1
            if p.children or p.views:
                continue
            if p.view_src is not None:
                p.view_src.views -= 1
                if not p.view_src.views and not p.view_src.children:
                    release(p.view_src)
            else:
                release(p)
    return dyn.max_size


def moe_block_graph(n_layer, n_embd, n_ff_exp, n_used, n_expert, q_width, k_width, v_width, ub, fused, fa_extra=0):
    """The nodes of n_layer attention + routed-experts blocks over ub tokens (flash attention, K/V written to the
    cache), after the hidden state handed in; views and dependency nodes as ggml-backend sees them."""
    f = 4 * ub
    weight = _Tensor(external=True)
    cache = _Tensor(external=True)
    nodes = []

    def node(*a, **kw):
        t = _Tensor(*a, **kw)
        nodes.append(t)
        return t

    def view(src, *extra):
        return node(0, [src] + list(extra), view_src=src)

    def dep(*srcs):
        t = _Dep(0, srcs)
        nodes.append(t)

    pos = _Tensor(4 * ub, is_input=True)
    idx = _Tensor(8 * ub, is_input=True)
    mask = _Tensor(0, is_input=True)            # beside the block (the planner books it on its own)
    inp = node(f * n_embd, is_input=True)       # the hidden state handed in
    for _ in range(n_layer):
        an = node(f * n_embd, [node(f * n_embd, [inp], True), weight], True)                  # attn_norm
        q = node(f * q_width, [weight, an])
        q = node(f * q_width, [node(f * q_width, [node(f * q_width, [view(q)], True), weight], True), pos], True)
        v = node(f * v_width, [weight, an])
        k = node(f * k_width, [weight, an])
        k = node(f * k_width, [node(f * k_width, [node(f * k_width, [view(k)], True), weight], True), pos], True)
        set_k = node(0, [view(k), idx, cache], view_src=cache)
        set_v = node(0, [view(v), idx, cache], view_src=cache)
        fa = node(f * q_width + fa_extra, [view(q), view(cache, set_k), view(cache, set_v), mask])
        ffn_inp = node(f * n_embd, [node(f * n_embd, [weight, view(fa)]), inp], True)
        fn = node(f * n_embd, [node(f * n_embd, [ffn_inp], True), weight], True)             # ffn_norm
        logits = node(f * n_expert, [weight, fn])
        probs = node(f * n_expert, [logits], True)
        argsort = node(f * n_expert, [probs])
        topk = view(argsort)
        probs3 = view(probs)
        w = node(f * n_used, [probs3, topk])
        w2 = view(w)
        wsum = node(f, [w2])
        wclamp = node(f, [wsum], True)
        wnorm = node(f * n_used, [w2, wclamp], True)
        w3 = view(wnorm)
        if fused:                                # ggml-cuda: the top-k router kernel keeps its chain to the end
            dep(logits, probs, argsort, topk, probs3, w, w2, wsum, wclamp, wnorm)
        fn3 = view(fn)
        gate = node(f * n_used * n_ff_exp, [weight, fn3, topk])
        up = node(f * n_used * n_ff_exp, [weight, fn3, topk])
        glu = node(f * n_used * n_ff_exp, [gate, up])
        down = node(f * n_used * n_embd, [weight, glu, topk])
        weighted = node(f * n_used * n_embd, [down, w3], True)
        parts = [view(weighted) for _ in range(n_used)]
        out = parts[0]
        for part in parts[1:]:
            out = node(f * n_embd, [out, part], True)
        if fused:                                # ggml-cuda: the weighted reduction keeps the experts' outputs
            dep(down, w3, out)
        inp = node(f * n_embd, [out, ffn_inp], True)
    return nodes


def moe_block_peak(n_embd, n_ff_exp, n_used, n_expert, q_width, k_width, v_width, ub, fused=True, fa_extra=0):
    """Bytes the compute buffer holds for an MoE block over ub tokens, beyond the KQ mask and the hidden state
    handed in (ggml-alloc replayed over REPLAY_LAYERS blocks). fa_extra: what the backend adds to a flash-attention
    node's allocation (ggml-cuda's f16 copies of K and V that are not f16)."""
    key = (n_embd, n_ff_exp, n_used, n_expert, q_width, k_width, v_width, ub, bool(fused), fa_extra)
    if key not in _CACHE:
        if len(_CACHE) >= 4096:                  # a long-lived controller process: bounded
            _CACHE.clear()
        nodes = moe_block_graph(REPLAY_LAYERS, n_embd, n_ff_exp, n_used, n_expert, q_width, k_width, v_width, ub,
                                fused, fa_extra)
        _CACHE[key] = replay(nodes) - _aligned(4 * ub * n_embd)
    return _CACHE[key]
