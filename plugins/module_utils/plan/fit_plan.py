# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fit_plan: size a llama.cpp layer-split deployment before it is deployed.

Plain Python (one Ansible import, its boolean rules, through strict_values): ``plan(gpus, model, serve, drafter=None, mmproj=None,
host_ram_bytes=None) -> dict``. ``model``/``drafter``/``mmproj`` are gguf_info facts
(plugins/module_utils/plan/gguf_facts.py), ``gpus`` a list of ``{name, vram_total_bytes,
vram_reserved_bytes}`` or gpu_facts' output as is. The filter plugin
``dankfleet.llm.fit_plan`` is a thin wrapper.

The laws are llama.cpp b11434's, each named where it lives:

* layer -> device (src/llama-model.cpp ``load_tensors``): the ``n_layer_all + 1`` slots
  (every block, then the output layer) are cut by the cumulative normalised tensor split;
  slot ``il`` goes to the first device whose cumulative share exceeds ``il / (n_layer_all+1)``.
  The token embedding stays on the host ("there is very little benefit to offloading the
  input layer"). With integer splits summing to the block count, as the runbook writes
  them, ``-ts a:b`` puts blocks ``0..a`` (a+1 of them) on the first card.
* context (src/llama-context.cpp): ``n_ctx`` padded to 256; unless ``kv_unified``,
  ``n_ctx_seq = pad256(n_ctx / n_seq_max)`` and ``n_ctx = n_ctx_seq * n_seq_max``; the KV
  cache holds ``n_ctx_seq`` cells per stream, one stream per slot.
* KV (src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp): per attention layer
  ``row(type_k, n_head_kv*key_length) + row(type_v, n_head_kv*value_length)`` per cell, on the
  device of that layer; sliding-window layers hold ``pad256(min(n_ctx_seq, n_swa*(unified ?
  n_seq_max : 1) + n_ubatch))`` cells per stream. Recurrent and nextn layers hold no KV in
  the main context.
* recurrent state (src/llama-memory-recurrent.cpp): per recurrent layer
  ``(n_embd_r + n_embd_s) * 4`` bytes (f32) per row, ``n_seq_max * (1 + n_rs_seq)`` rows, where
  ``n_rs_seq = spec_draft_n_max`` when a model-backed drafter is on and the arch supports
  rollback (common/common.h ``need_n_rs_seq``, llama-arch.cpp ``llm_arch_supports_rs_rollback``).
* speculative decoding (common/speculative.cpp): the draft context is built with
  ``n_ctx = llama_n_ctx(ctx_tgt)`` -- the *target's* context, no flag caps it -- so a drafter
  without a sliding window caches the whole window; ``draft-mtp`` builds a context against
  the target holding only the nextn layer(s), whose KV and weights sit on the nextn layer's
  device (the last one).
* compute buffers: a function of ubatch, context and vocab with per-backend constants in
  ``PROFILES`` below, each documented with where it came from.
* block drafters (draft-dflash / draft-dspark, src/models/dflash.cpp): the draft context reserves at
  n_ubatch tokens and the decoder sends every one of them through the lm_head, so the lm_head's device
  (the target's output device when the drafter shares the target's head) holds full-ubatch f32 logits at
  the graph's end -- twice for DSpark (``_block_draft_end``); each target layer the drafter extracts keeps
  its input alive to the target graph's end.
* Mixture-of-Experts (src/llama-graph.cpp build_moe_ffn, the ggml_mul_mat_id path; issue 38): a block's FFN
  activations are those of n_expert_used experts of width n_ff_exp (not feed_forward_length), plus the experts'
  f32 outputs before they are summed, n_expert_used x n_embd x 4 bytes per ubatch token. ``serve.n_cpu_moe`` /
  ``serve.cpu_moe`` (--n-cpu-moe / --cpu-moe, common/arg.cpp) keep the routed expert tensors of the first N blocks
  (all) in a CPU buffer: their bytes move to the host (mapped from the file, or pinned with load_mode none) and the
  device keeps a reserve for the experts the scheduler copies over for a batched prompt. Those are tensor
  overrides, so llama-context.cpp turns pipeline parallelism off (one copy of every split input).
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import math
import re
from bisect import bisect_left as _bisect_left

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import ggml_alloc
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import DRAFTER_ONLY_ARCHS, MOE_PLANNED_ARCHS
from ansible_collections.dankfleet.llm.plugins.module_utils.base.strict_values import to_bool
# The speculative types and which drafter needs what: llama.cpp's rules, one home for them.
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_cpp_rules import (
    BLOCK_DRAFT_TYPES, CONTEXT_DRAFT_TYPES, MODEL_DRAFT_TYPES, SELF_DRAFT_TYPES, SPEC_TYPES, model_drafters,
    spec_chain_conflict, LOAD_MODES, LOAD_MODE_MEMORY)

GIB = 1024 ** 3
MIB = 1024 ** 2
KV_PAD = 256            # llama-context.cpp: n_ctx and n_ctx_seq padded to 256; iswa SWA cache padded to 256

BACKENDS = ("hip", "cuda", "cpu")
CACHE_TYPES = {"f32": ("F32", 1, 4), "f16": ("F16", 1, 2), "bf16": ("BF16", 1, 2), "q8_0": ("Q8_0", 32, 34),
               "q4_0": ("Q4_0", 32, 18), "q4_1": ("Q4_1", 32, 20), "iq4_nl": ("IQ4_NL", 32, 18),
               "q5_0": ("Q5_0", 32, 22), "q5_1": ("Q5_1", 32, 24)}
# llm_arch_supports_rs_rollback (src/llama-arch.cpp b11434), used when facts lack "rs_rollback"
RS_ROLLBACK_ARCHS = ("kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                     "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3")

# ---------------------------------------------------------------------------------------------
# Per-backend compute constants. The one place to calibrate; every number says where it came from.
#
# Terms (per device, per llama_context whose graph runs there; "ub" = min(n_ctx, n_ubatch)):
#   device_overhead_bytes     runtime/driver context on every device the process uses (what rocm-smi
#                             counts beyond the buffers llama.cpp prints)
#   compute_base_bytes        fixed part of the target context's compute buffer on a device holding layers
#   act_embd_bytes            bytes per (ub token x n_embd) of activations on a device holding layers
#   act_ff_bytes              bytes per (ub token x n_ff) -- the FFN intermediates
#   split_embd_bytes          bytes per (ub token x n_embd) per pipeline copy: the hidden state a device is
#                             handed (two of them for the MTP graph: hidden state + token embedding)
#   first_embd_bytes          bytes per (ub token x n_embd) per *extra* pipeline copy on the device holding
#                             layer 0 of a model split over several devices
#   mask_bytes_per_cell       bytes per (KV cell x ub token) per pipeline copy: the KQ mask with flash
#                             attention on every device holding attention layers (and on the host that builds
#                             it), sized by the cells one stream attends (n_ctx_seq; the SWA cache for SWA
#                             layers, a mask of its own)
#   mask_bytes_per_cell_nofa  the same without flash attention (f32 mask; the KQ matrix is a law term)
#   attn_embd_bytes_nofa      without flash attention: bytes per (ub token x n_embd) alive beside the KQ
#                             matrix, which replaces the FFN's activations as the layer's peak
#   attn_gate_bytes_nofa      ... plus this per (ub token x n_head x key_length) where the attention output is
#                             gated (qwen3next/qwen35: the gate half of q lives across the attention)
#   host_embd_bytes           bytes per (ub token x n_embd) of the llama-server process's own CPU compute buffer
#   host_split_embd_bytes     ... plus this per pipeline copy (the split inputs the host sends)
#   mtp_host_share            the MTP context's host buffer as a share of the target's (one block, no mask
#                             of its own beyond the nextn layer's)
#   host_modelled             whether the host_* terms (and the masks the host builds) were measured; false: the
#                             plan's host compute is 0 (not predicted)
#   pipeline_copies           true: the split/first/mask constants are per pipeline copy and the law multiplies
#                             by the copies; false: they are effective totals (a profile fitted to card totals)
#   logits_ubatch_bytes       bytes per (ub token x n_vocab) on the output device *beyond* the law's
#                             n_outputs x n_vocab x 4 (b11434 reserves only n_outputs_max rows of logits;
#                             the runbook's build paid for a full ubatch)
#   draft_compute_base_bytes  fixed part of a draft context's (MTP or drafter model) compute buffer
#   draft_block_base_bytes    the same for a block drafter (draft-dflash/-dspark), beside the block-drafter law
#   mmproj_compute_bytes      the vision encoder's warm-up compute buffer on the mmproj device
#   draft_overhead_bytes      (optional) runtime memory beyond device_overhead on a device running a drafter
#                             model's layers; mtp_overhead_bytes the same on the device of an MTP head
#   fa_kv_f16_copy            (optional) flash attention over a KV cache that is not f16 reserves f16 copies of
#                             the K/V views in the FA node (CUDA); then fa_beside_embd_bytes, fa_beside_q_bytes
#                             and fa_beside_gate_bytes are what lives beside them per token, per n_embd / query
#                             element / gate element
#   mtp_act_embd_bytes, mtp_act_ff_bytes, mtp_split_embd_bytes, mtp_fa_beside_embd_bytes
#                             (optional) the MTP graph's own act_embd/act_ff/split_embd/fa_beside_embd, where
#                             they differ from the target's layers (CUDA)
# Law terms that need no constant: logits n_outputs x n_vocab x 4; without flash attention the
# KQ matrix n_kv x ub x n_head x 4 per attention device (the widest mask's cells: one layer at a time);
# the pipeline copies (GGML_SCHED_MAX_COPIES = 4 when the model spans more than one device, else 1).
# ---------------------------------------------------------------------------------------------

# The terms only the cuda profile measured (see there), for a profile that did not: off, or None for "as
# the target's layers".
_CUDA_ONLY_TERMS_OFF = {
    "draft_overhead_bytes": 0,
    "dflash2_head_overhead_bytes": 0,
    "mtp_overhead_bytes": 0,
    "fa_kv_f16_copy": False,
    "fa_beside_embd_bytes": 0.0,
    "fa_beside_q_bytes": 0.0,
    "fa_beside_gate_bytes": 0.0,
    "mtp_act_embd_bytes": None,
    "mtp_act_ff_bytes": None,
    "mtp_split_embd_bytes": None,
    "mtp_fa_beside_embd_bytes": None,
}

PROFILES = {
    "hip": {
        "source": "fitted (non-negative least squares, pulled towards the smallest worst error) to the 38 rocm-smi "
                  "figures the runbook records for 2x R9700 / frank-medium, 2026-09-16..17: the 1:1 ctx ladder, the "
                  "DSpark and DFlash2 -ts/ubatch tables, the 327680 and 393216 loads, the card-1 spec A/B "
                  "(tests/fixtures/runbook_points.py; benchmarks/fit_plan_calibrate_hip.py --fit re-derives it). "
                  "Worst residual 0.62 GiB. device_overhead is a prior (an idle HIP context); the activation "
                  "terms fitted to zero -- at ubatch 512..1536 the KQ mask and the logits carry the ubatch cost. "
                  "Effective constants (pipeline_copies false): the mask's 7.75 B per (cell x token) is the total "
                  "over the copies, fitted before the copies law was measured; re-fitting under the law (x4 split, "
                  "x1 pinned drafter) also reaches 0.63 GiB but moves the 393216/MTP balance to 35:30, so the hip "
                  "profile waits for HIP measurements that separate the two. Issue 24: a block drafter (DFlash2, DSpark) "
                  "is sized by the block-drafter law (its full-ubatch logits on the lm_head's device, measured on "
                  "CUDA), which replaces for it the two constants this fit had standing in for that term -- "
                  "draft_compute_base_bytes (551 MiB) and logits_ubatch_bytes (3.5 B per ubatch token x n_vocab) "
                  "on the drafter's device -- with draft_block_base_bytes (300 MiB) beside the law; the target "
                  "constants are held. Over the same 38 points: worst residual 0.61 GiB (ab-none, no drafter, as "
                  "before), the DFlash2-era card-1 figures and the DSpark tables within 0.47 GiB, the MTP "
                  "recalibration unchanged, the measured balance points 40:25 / 36:29 / 35:30 still found.",
        "pipeline_copies": False,
        "device_overhead_bytes": 300 * MIB,
        "compute_base_bytes": 561 * MIB,
        "act_embd_bytes": 0.0,
        "act_ff_bytes": 0.0,
        "split_embd_bytes": 0.0,
        "first_embd_bytes": 0.0,
        "mask_bytes_per_cell": 7.75,
        "mask_bytes_per_cell_nofa": 7.75,       # the fit's value, applied with and without flash attention
        "attn_embd_bytes_nofa": 0.0,
        "attn_gate_bytes_nofa": 0.0,
        "logits_ubatch_bytes": 3.5,              # the target's (and MTP's, draft-simple's); not a block drafter's
        "draft_compute_base_bytes": 551 * MIB,   # MTP and draft-simple; a block drafter's is the next one
        # issue 24: the fixed part of a block drafter's compute beside the block-drafter law (fitted, target
        # constants held: any value in 150..500 MiB gives the same worst residual, 0.61 GiB on ab-none)
        "draft_block_base_bytes": 300 * MIB,
        "mmproj_compute_bytes": 37 * MIB,
        # issue 34: the fitted 37 MiB stays the projector's load-time reserve (the fit absorbed the rest of what
        # clip reserves into the other constants); what a request adds beyond it is the cuda profile's law
        # (ggml-cuda's code compiled for HIP), a prior until ROCm figures after images are recorded
        "mmproj_reserve_fitted": True,
        "mmproj_compute_base_bytes": 8 * MIB,
        "mmproj_first_use_bytes": 100 * MIB,
        "mmproj_pool_bytes": 9.0,
        "host_modelled": False,                 # the runbook records no host RAM figures
        "host_embd_bytes": 0.0,
        "host_split_embd_bytes": 0.0,
        **_CUDA_ONLY_TERMS_OFF,
        # not measured on HIP: the cuda profile's MoE figures as a prior (rocBLAS/pool growth after mul_mat_id)
        "moe_overhead_bytes": 110 * MIB,
        "moe_overhead_nofa_bytes": 300 * MIB,
        "mtp_host_share": 0.5,
    },
    "cpu": {
        "source": "measured: llama.cpp b11434 (CPU + RPC build) llama-server --fit off, 101 loads of the lab generator's "
                  "medium models (dense llama, qwen35 hybrid, qwen35+MTP, gemma3 sliding-window, draft-small) over "
                  "one, two and three ggml-rpc-server devices and on the host alone, ctx 2048..131072, parallel 1/2, "
                  "ubatch 512/2048, f16/q8_0 KV, flash attention on/off, draft-mtp and draft-simple "
                  "(tests/fixtures/llamacpp/b11434-cpu; benchmarks/fit_accuracy.py prints every error). Each "
                  "constant is the per-token slope of the printed compute buffers: see the comment beside it.",
        "pipeline_copies": True,                # constants per pipeline copy; the law multiplies (x4 split, x1 alone)
        "device_overhead_bytes": 0,             # RPC devices: nothing beyond the buffers llama.cpp prints
        "compute_base_bytes": 0,                # no fixed part: every buffer scales with ubatch (+/- 0.1 MiB)
        # a layer's own peak beyond the FFN: 8 x n_embd per token on the dense, hybrid and SWA models alike
        # (measured 4 x n_embd plus 4..8 KiB; n_embd 1024 -> 2048 moved it by 4 x n_embd)
        "act_embd_bytes": 8.0,
        "act_ff_bytes": 12.0,                   # n_ff 2816 -> 8192 added 12.0 B per n_ff per token, every device
        "split_embd_bytes": 4.0,                # f32 hidden state per copy: 16 x n_embd with 4 copies, 4 with 1
        "first_embd_bytes": 12.0,               # layer-0 device: +36 x n_embd per token at 4 copies, +0 at 1
        "mask_bytes_per_cell": 2.0,             # f16 mask: 8 B per (cell x token) with 4 copies, 2 B alone
        "mask_bytes_per_cell_nofa": 4.0,        # f32 mask without flash attention: 16 B with 4 copies
        # without FA the attention is the peak (n_ff 2816 -> 8192 moved nothing): 30 x n_embd beside the KQ
        # matrix, + 12 B per gate element on qwen35 (the minimax over the 22 no-FA loads, worst 0.63 of bound)
        "attn_embd_bytes_nofa": 30.0,
        "attn_gate_bytes_nofa": 12.0,
        "logits_ubatch_bytes": 0.0,             # logits are n_outputs_max rows (n_vocab 32768 x 65536 x 128000 alike)
        "draft_compute_base_bytes": 0,
        "draft_block_base_bytes": 0,            # as compute_base_bytes: no fixed part
        # b11434's own worst case for the lab projector (tests/lab/gen_models.py mmproj-qwen35, measured with
        # llama-server -lv 4: "estimated worst-case memory usage of mmproj is 38.54 MiB", 0.18 MiB of it
        # weights): the qwen3vl warm-up image of 46x46 merged tokens. The RSS grows by 7 MiB at load and
        # 17 MiB after 160x160 images; the reservation is what a largest image touches
        "mmproj_compute_bytes": 38 * MIB,
        # issue 34: the projector law (MMPROJ_ACT_BYTES) with no fixed part and no runtime context of its own;
        # the CPU backend's work buffer (the activations converted to the weights' type for a matmul) stands
        # where a GPU's pool does
        "mmproj_reserve_fitted": False,
        "mmproj_compute_base_bytes": 0,
        "mmproj_first_use_bytes": 0,
        "mmproj_pool_bytes": 9.0,
        "host_modelled": True,
        "host_embd_bytes": 8.0,                 # host buffer 40 x n_embd per token at 4 copies, 16 at 1
        "host_split_embd_bytes": 8.0,
        **_CUDA_ONLY_TERMS_OFF,
        "moe_overhead_bytes": 0,                # RPC/CPU devices: nothing beyond the buffers (not measured for MoE)
        "moe_overhead_nofa_bytes": 0,
        "mtp_host_share": 0.5,                  # MTP host buffer 20 x n_embd per token at 4 copies (target's 40)
    },
    "cuda": {
        "source": "measured: llama.cpp b11434 (CUDA 13.0 + RPC build by the llama_cpp_build role, sm_90) on one NVIDIA "
                  "H200, llama-server --fit off, 56 loads of two GiB-scale lab models (dense llama 3.0 GiB q8_0, qwen35 "
                  "hybrid + MTP 2.9 GiB q8_0) and a draft-small drafter: the GPU alone and split with a ggml-rpc-server "
                  "(CUDA backend) on the same GPU at -ts 1,1 and 3,1; ctx 16384..262144, parallel 1/2, ubatch "
                  "512/2048, f16/q8_0 KV, draft-simple and draft-mtp; each load with nvidia-smi per process after the "
                  "load and after a first request (tests/fixtures/llamacpp/b11434-cuda-h200; benchmarks/fit_accuracy.py "
                  "--set cuda-h200 prints every error). The graph laws are the CPU backend's: every constant the cpu "
                  "profile measured reproduces the CUDA buffers except those marked CUDA below.",
        "pipeline_copies": True,                # measured: sched copies = 4 over CUDA0 + RPC0, 1 on the GPU alone
        # CUDA: what nvidia-smi shows per process beyond llama.cpp's buffers once a first request ran: 603-621 MiB
        # over the 80 processes of the matrix that run no drafter (589-591 MiB right after the load; an idle
        # ggml-rpc-server's bare context 518 MiB); the first request grows cuBLAS/pool memory by 14-30 MiB
        "device_overhead_bytes": 624 * MIB,
        # CUDA: + up to 99 MiB on the device that runs a draft-simple drafter's layers (705-719 MiB in all) and
        # + up to 32 MiB on the device of an MTP head (651.7 MiB), both after the first speculative request
        "draft_overhead_bytes": 100 * MIB,
        "mtp_overhead_bytes": 32 * MIB,
        # CUDA, issue 24: the device of a DFlash2 drafter's lm_head (its logits and selector run there) shows
        # 737-796 MiB beyond llama.cpp's buffers after a first drafted completion, 113-172 MiB over the base: the
        # runtime's pool after the selector's full-vocabulary top-k and the wide injection matmuls; DSpark's head
        # device 617-696 MiB, inside draft_overhead (tests/fixtures/llamacpp/b11434-cuda-h200-block)
        "dflash2_head_overhead_bytes": 80 * MIB,
        # CUDA, issue 38: a device running MoE blocks grows ~100 MiB after the first completion (dense: 14-30 MiB) and
        # holds 690-730 MiB beyond llama.cpp's buffers after real requests (the base 624 + up to 106), 922 MiB with
        # flash attention off after a long prompt (+298)
        "moe_overhead_bytes": 110 * MIB,
        "moe_overhead_nofa_bytes": 300 * MIB,
        "compute_base_bytes": 0,                # as cpu: every buffer scales with ubatch (+/- 0.3 MiB)
        # CUDA: a layer's own peak beyond the FFN is 12 x n_embd per token (cpu 8): the dense model's buffers
        # are 4 x n_embd x ubatch above the cpu law at ub 512 and 2048 alike (6.0 / 24.0 MiB)
        "act_embd_bytes": 12.0,
        "act_ff_bytes": 12.0,                   # as cpu
        "split_embd_bytes": 4.0,                # as cpu (measured: the GPU-alone / split differences agree)
        "first_embd_bytes": 12.0,               # as cpu
        "mask_bytes_per_cell": 2.0,             # as cpu: f16 KQ mask per copy (4096 MiB at 262144 cells x 2048 x 4)
        # without flash attention: not measured on CUDA (the deployed setting is FA on); the cpu law's values
        "mask_bytes_per_cell_nofa": 4.0,
        "attn_embd_bytes_nofa": 30.0,
        "attn_gate_bytes_nofa": 12.0,
        # CUDA: a flash-attention node whose KV is not f16 (q8_0) reserves f16 copies of its K and V views beside
        # its output (ggml-cuda fattn.cu ggml_cuda_flash_attn_ext_get_alloc_size): 2 B x (K + V width) x cells x
        # streams, e.g. +214 MiB at 65536 cells; it becomes the layer's peak together with 8 B x n_embd, 8 B per
        # query element (n_head x head_dim) and 12 B per gate element (qwen35) per token (dense q8_0 rows within
        # 0.4 MiB, hybrid within 5 MiB)
        "fa_kv_f16_copy": True,
        "fa_beside_embd_bytes": 8.0,
        "fa_beside_q_bytes": 8.0,
        "fa_beside_gate_bytes": 12.0,
        # CUDA: the MTP graph's block peaks at 17 x n_embd per token with no FFN-sized term, and each of its two
        # split inputs costs 8.25 x n_embd per pipeline copy (fitted to 106.0 / 680.1 MiB alone and 232.1 MiB over
        # 4 copies; residuals under 0.4 MiB); its FA node peaks at its f16 K/V copies alone
        "mtp_act_embd_bytes": 17.0,
        "mtp_act_ff_bytes": 0.0,
        "mtp_split_embd_bytes": 8.25,
        "mtp_fa_beside_embd_bytes": 0.0,
        "logits_ubatch_bytes": 0.0,             # as cpu: logits are n_outputs_max rows
        "draft_compute_base_bytes": 0,
        # issue 24: none beside the block-drafter law (tests/fixtures/llamacpp/b11434-cuda-h200-block)
        "draft_block_base_bytes": 0,
        # a projector whose image tokens are not modelled (a type outside MMPROJ_TYPES): a conservative prior
        "mmproj_compute_bytes": 256 * MIB,
        # issue 34, from a real-size qwen3vl_merger (n_embd 1152) beside the 27B target on one H200 (the issue's
        # figures): clip reserves at load for its warm-up image (46 x 46 tokens: ~252 MiB; 32 x 32 with
        # --image-max-tokens 1024: ~126 MiB) -> MMPROJ_ACT_BYTES per (patch x n_embd) + this fixed part
        "mmproj_reserve_fitted": False,
        "mmproj_compute_base_bytes": 8 * MIB,
        # the first image of any size: clip's own CUDA backend (stream, cuBLAS handle and workspace) ~100 MiB
        "mmproj_first_use_bytes": 100 * MIB,
        # the CUDA pool after an image of P patches: the activations converted to the BF16 weights' type for
        # cuBLAS (n_ff 4304 x 2 B per patch ~ 7.5 x n_embd) -- 9 B per (patch x n_embd) with the 2048^2 and
        # 2880^2 figures (+0.5 / +1.1 GiB over the load with the first-use context); never handed back
        "mmproj_pool_bytes": 9.0,
        "host_modelled": True,                  # the CUDA_Host compute buffer follows the cpu host law within 1.5 MiB
        "host_embd_bytes": 8.0,
        "host_split_embd_bytes": 8.0,
        "mtp_host_share": 0.5,
    },
}

# How far each profile's plan is to be trusted, measured (the capacity table's header says it; one line each).
PROFILE_ACCURACY = {
    "hip": "within 0.62 GiB per card of 38 rocm-smi loads on 2x R9700, fitted",
    "cuda": "within max(1 %, 64 MiB) per card of nvidia-smi on an H200, measured",
    "cpu": "within max(1 %, 64 MiB) per device of 101 llama.cpp loads, measured",
}


# What a ggml-rpc-server process takes on its device beyond the buffers llama.cpp prints, per the worker's
# backend (a device in gpus with rpc_backend set is charged this instead of the profile's device_overhead):
#   cpu   measured: b11434 CPU + RPC build (~/.cache/dankfleet/llama-b11434-cpu-rpc): the idle server's VmRSS is
#         5.7 MiB, and with the lab's dense-llama (ctx 8192) and qwen35-hybrid (ctx 65536) on it and a first
#         request served it grew by less than the buffers it holds (benchmarks/rpc_worker_overhead.py): 8 MiB
#   cuda  measured with the cuda profile: an idle ggml-rpc-server's CUDA context 518 MiB, 603-621 MiB per process
#         after a first request (the profile's device_overhead_bytes, taken over CUDA0 and RPC0 alike)
#   hip   the hip profile's prior (an idle HIP context); not measured over RPC
RPC_SERVER_OVERHEAD_BYTES = {
    "cpu": 8 * MIB,
    "cuda": 624 * MIB,
    "hip": 300 * MIB,
}


# The vision projector (tools/mtmd b11434; issue 34). An image of T tokens is T x merge^2 patches of patch_size
# pixels (clip-model.h set_limit_image_tokens: image_max_pixels = max tokens x patch^2 x merge^2), each patch
# n_embd wide through the ViT. At load clip reserves its compute for a warm-up image (clip.cpp warmup ->
# reserve_compute_meta): set_warmup_n_tokens(46*46) for the Qwen-VL family, floor(sqrt(max))^2 tokens when
# --image-max-tokens is lower. The preprocessor admits images up to the maximum (4096 tokens by default), so a
# larger image re-reserves the graph at request time (the allocator grows, never shrinks), and the first encode
# on the projector's backend adds its runtime context and pool. All of it lives on the projector's device
# (--mmproj-device, default the first of --device, common/arg.cpp), or with --no-mmproj-offload on the CPU
# backend, in host memory (clip.cpp clip_ctx: use_gpu false). The server caps the maximum at the ubatch only for
# projectors that need non-causal attention (server-context.cpp; mtmd_decode_use_non_causal): none of these.
# projector type: (default spatial merge, default patch size, min tokens, max tokens, warm-up tokens), as
# clip.cpp load_hparams sets them; the GGUF's own patch_size / spatial_merge_size win where it has them
MMPROJ_TYPES = {
    "qwen2vl_merger": (2, 14, 8, 4096, 46 * 46),
    "qwen2.5vl_merger": (2, 14, 8, 4096, 46 * 46),
    "qwen3vl_merger": (2, 16, 8, 4096, 46 * 46),
}
# The ViT's compute per (patch x n_embd) (the allocator's law, every profile): fitted to the two load-time
# reserves of the real-size qwen3vl_merger on CUDA (~252 MiB at 46 x 46 tokens, ~126 MiB at 32 x 32)
MMPROJ_ACT_BYTES = 26.0
# b11434 encoding on the CPU (--no-mmproj-offload), measured on the H200 host's 16 cores (issue 34)
MMPROJ_CPU_ENCODE = "~34 s for a 1024-token image; a 4096-token one did not finish in 120 s"
# Flash attention on CUDA and HIP (ggml-cuda/fattn.cu ggml_cuda_fattn_kv_type_supported, b11434): the K/V types
# with a kernel. Any other type makes ggml_cuda_flash_attn_ext_supported false, so the scheduler runs every
# attention layer's FA on the CPU, copying the layer's K and V views to the host (per pipeline copy)
FA_KV_TYPES_GPU = ("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0")
# The backends built from ggml-cuda's code (HIP compiles the same files): its flash-attention kernels and its
# graph_optimize (the fused MoE kernels' allocation dependencies)
GGML_CUDA_BACKENDS = ("cuda", "hip")


# Mixture-of-Experts layer (b11434 llm_graph_context::build_moe_ffn; issue 38). Its compute is not a sum of live
# tensors: ggml-alloc's best fit leaves holes (the GLU's outputs free a block the experts' outputs may not fit), so
# the block's allocation is REPLAYED over its graph (ggml_alloc.moe_block_peak: attention with flash attention and
# its f16 K/V copies, the router, up/gate/GLU/down over the used experts, the weighted reduction; ggml-cuda's fused
# MoE dependencies on CUDA/HIP devices, none on RPC or CPU ones) for the architectures whose block is exactly that
# (MOE_REPLAYED_ARCHS). Measured: the 55-point grid of tests/fixtures/llamacpp/b11434-cuda-h100-moegrid within
# 10 MiB at every f16 point (15+ exact; its 36-54 MiB allocator gaps reproduced); qwen3moe_r/_h/_t all on the GPU
# within 1.5 MiB with f16 KV and 29 MiB with q8_0 (the f16 copies' placement), split devices within 11 MiB.
# Per ubatch token, F = n_expert_used x n_ff_exp, E = n_expert_used x n_embd, the live tensors peak at the largest
# of three moments (bytes per F, per E, per n_embd):
#   glu     up, gate and their GLU output (no in-place op) beside two hidden states: 12 F + 8 n_embd
#   down    the GLU output and the experts' f32 outputs [n_embd, used, tokens] beside three: 4 F + 4 E + 12 n_embd
#   reduce  the experts' outputs AND their weighted copy beside three (ggml-cuda's graph_optimize keeps the outputs
#           alive to the reduction's last add): 8 E + 12 n_embd
# which book the other MoE architectures (shared experts, recurrent hybrids: under where a hole opens, up to
# 30 x n_embd per token on qwen3moe_t). The dense law (act_embd 12 + act_ff 12) booked 12 n_embd + 12 F + 4 E.
#   EXPERT_COPY_PHASE  with experts on the CPU the GPU's compute buffer holds one expert tensor (the largest
#                      offloaded: a batched prompt copies the experts over and runs them there) at the down moment,
#                      a moment of its own beside the block's peak (fitted on qwen3moe_r --n-cpu-moe 24 and
#                      --cpu-moe at ub 512; within 1 MiB on qwen3moe_h and _t with f16 KV, +15 with q8_0)
#   MOE_EXPERT_OUT_BYTES  (moments only) with flash attention on K/V that are not f16 the experts' f32 outputs
#                      stay beside the f16 copies: all-GPU at ub 2048 q8_0 ctx 131072 (qwen3moe_r) was under by
#                      127.5 MiB = 8 x 2048 x 4 x 2048 without it; not there at ub 1024 (over, the safe side)
MOE_PHASES = {"glu": (12, 0, 8), "down": (4, 4, 12), "reduce": (0, 8, 12)}
EXPERT_COPY_PHASE = "down"
MOE_EXPERT_OUT_BYTES = 4


def _moe_phase(name, n_embd, n_ff, used):
    """Bytes per ubatch token of one moment of an MoE layer (MOE_PHASES)."""
    f, e, n = MOE_PHASES[name]
    return f * n_ff + e * used * n_embd + n * n_embd


def _moe_layer(n_embd, n_ff, used):
    """An MoE layer's peak per ubatch token: the largest moment (MOE_PHASES)."""
    return max(_moe_phase(k, n_embd, n_ff, used) for k in MOE_PHASES)


# The MoE blocks whose graph ggml_alloc replays (attention + routed experts, no shared expert, no recurrent layers:
# llm_graph_context::build_attn + build_moe_ffn); the others are booked by their moments (MOE_PHASES)
MOE_REPLAYED_ARCHS = ("qwen3moe", "qwen3vlmoe", "olmoe", "granitemoe", "phimoe", "llama")


def _moe_block(model, layers):
    """(n_ff_exp, n_expert, K width, V width) of a model whose MoE blocks ggml_alloc replays, else None."""
    experts = [L for L in layers if int(L.get("expert_bytes") or 0)]
    if (model.get("architecture") not in MOE_REPLAYED_ARCHS or not experts
            or any(int(L.get("n_ff_shexp") or 0) for L in layers)):
        return None
    return (max(int(L.get("n_ff_exp") or 0) for L in experts), int(model.get("expert_count") or 0),
            max(int(L["n_head_kv"]) * int(L["key_length"]) for L in experts),
            max(int(L["n_head_kv"]) * int(L["value_length"]) for L in experts))


# --load-mode (llama_cpp_rules.LOAD_MODES / LOAD_MODE_MEMORY): how the host-side expert tensors are held -- pages
# of the mapped file (resident: every token reads them), the same locked, or a pinned host buffer the system cannot
# reclaim (measured: ~16.9 GiB pinned with --cpu-moe --load-mode none)
# What the system keeps for itself when experts live in host RAM: the planned host bytes (experts, the process's
# own buffers) plus the prompt cache must leave this much of the host's RAM (the larger of the two) -- a policy,
# not a llama.cpp law: below it the page cache the mapped experts need is what the kernel evicts first
HOST_RAM_FLOOR_BYTES = 4 * GIB
HOST_RAM_FLOOR_SHARE = 0.10


class FitPlanError(ValueError):
    """Malformed input: the message names the field and what would fix it."""


# ------------------------------------------------------------------------------ input handling

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# No input number beyond this is a real size, count or rate (2**53 bytes = 8 PiB; floats stay exact below it).
MAX_INPUT_NUMBER = 2 ** 53
MAX_INPUT_DEPTH = 16


# Subtrees of gguf_info's result the planner never reads: the raw metadata dump and the tensor table.
UNREAD_FACTS = ("metadata", "tensors")


def check_inputs(**inputs):
    """Refuse, naming where, a non-finite or out-of-range number, a negative size, or absurd nesting.

    Runs before anything is computed, so no NaN reaches a split and no huge number an OverflowError.
    Negative numbers are refused in the GGUF facts (model, drafter, mmproj) and in the byte counts of
    gpus; serve has its own per-field rules. gguf_info's raw metadata and tensor table are not read.
    """
    stack = [(name, name, value, 0) for name, value in sorted(inputs.items())]
    while stack:
        root, where, value, depth = stack.pop()
        if depth > MAX_INPUT_DEPTH:
            raise FitPlanError("%s is nested deeper than %d levels: not gpu_facts/gguf_info output or a serve dict"
                               % (where, MAX_INPUT_DEPTH))
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, (int, float)):
            if isinstance(value, float) and not math.isfinite(value):
                raise FitPlanError("%s is %r: every size, count and share must be a finite number" % (where, value))
            if abs(value) > MAX_INPUT_NUMBER:
                raise FitPlanError("%s is %r, out of range (more than 2**53): not a real size or count"
                                   % (where, value))
            if value < 0 and (root in ("model", "drafter", "mmproj") or (root == "gpus" and "bytes" in where)):
                raise FitPlanError("%s is %r: a size or count from gpu_facts/gguf_info is never negative; pass the "
                                   "module's result unmodified" % (where, value))
            continue
        if isinstance(value, dict):
            stack.extend((root, "%s.%s" % (where, k), v, depth + 1) for k, v in value.items()
                         if not (depth == 0 and root != "gpus" and k in UNREAD_FACTS))
        elif isinstance(value, (list, tuple)):
            stack.extend((root, "%s[%d]" % (where, i), v, depth + 1) for i, v in enumerate(value))


def _int_field(d, key, where, default=None, minimum=None, required=False):
    if d is None or key not in d or d.get(key) is None:
        if required:
            raise FitPlanError("%s.%s is missing" % (where, key))
        return default
    v = d[key]
    if isinstance(v, str) and re.match(r"^-?\d+$", v.strip()):
        v = int(v.strip())
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not _is_int(v):
        raise FitPlanError("%s.%s must be an integer, got %r" % (where, key, v))
    if minimum is not None and v < minimum:
        raise FitPlanError("%s.%s must be >= %d, got %d" % (where, key, minimum, v))
    if abs(v) > MAX_INPUT_NUMBER:
        raise FitPlanError("%s.%s is %d, out of range (more than 2**53)" % (where, key, v))
    return v


def _bool_field(d, key, default):
    """A serve boolean by Ansible's rules ("false", "no", "off", 0 are false); anything else is refused by name."""
    v = d.get(key)
    if v is None:
        return default
    return to_bool(v, "serve.%s" % key, FitPlanError)


def _gpu_list(gpus):
    """Accept a list of gpu dicts or gpu_facts' result ({'gpus': [...]}); drop integrated GPUs."""
    if isinstance(gpus, dict):
        if "gpus" not in gpus:
            raise FitPlanError("gpus: a dict must be gpu_facts' result with a 'gpus' list; got keys %s"
                               % ", ".join(sorted(gpus)) if gpus else "gpus: empty dict; pass gpu_facts' result or a list")
        gpus = gpus["gpus"]
    if not isinstance(gpus, (list, tuple)):
        raise FitPlanError("gpus must be a list of {name, vram_total_bytes, vram_reserved_bytes} "
                           "(or gpu_facts' result), got %s" % type(gpus).__name__)
    out, skipped = [], []
    for i, g in enumerate(gpus):
        where = "gpus[%d]" % i
        if not isinstance(g, dict):
            raise FitPlanError("%s must be a dict with name and vram_total_bytes, got %r" % (where, g))
        if any(to_bool(g[k], "%s.%s" % (where, k), FitPlanError) for k in ("integrated", "hidden")
               if g.get(k) is not None):
            skipped.append(str(g.get("name") or g.get("marketing_name") or "gpus[%d]" % i))
            continue
        name = g.get("name")
        if name in (None, ""):
            raise FitPlanError("%s.name is missing: name each GPU (gpu_facts provides it)" % where)
        total = _int_field(g, "vram_total_bytes", where, required=True, minimum=1)
        reserved = _int_field(g, "vram_reserved_bytes", where, default=0, minimum=0)
        pcie = g.get("pcie") if isinstance(g.get("pcie"), dict) else {}
        width = g.get("narrowest_link_width", pcie.get("narrowest_link_width"))
        gbps = g.get("narrowest_link_gbps", pcie.get("narrowest_link_gbps"))
        out.append({"name": str(name), "index": len(out), "vram_total_bytes": total, "vram_reserved_bytes": reserved,
                    "narrowest_link_width": width, "narrowest_link_gbps": gbps,
                    "device": g.get("device") or g.get("llama_device"),
                    # a device on another host (llama.cpp RPC, see rpc_fleet.rpc_devices): where it is, and the
                    # worker's own backend, whose ggml-rpc-server overhead it is charged (RPC_SERVER_OVERHEAD_BYTES)
                    "host": g.get("host"), "endpoint": g.get("endpoint"), "rpc_backend": g.get("rpc_backend")})
    if not out:
        excluded = " (integrated GPUs excluded: %s)" % ", ".join(skipped) if skipped else ""
        raise FitPlanError("gpus: no usable GPU%s -- this host has nothing to split the model over; plan for a "
                           "host with at least one discrete GPU" % excluded)
    return out, skipped


def _check_facts(facts, what):
    if not isinstance(facts, dict):
        raise FitPlanError("%s must be gguf_info facts (a dict), got %s" % (what, type(facts).__name__))
    if facts.get("is_mmproj"):
        raise FitPlanError("%s is an mmproj file (%s); pass it as mmproj=, not %s=" % (what, facts.get("path"), what))
    if what == "model" and (facts.get("is_drafter") or facts.get("architecture") in DRAFTER_ONLY_ARCHS):
        raise FitPlanError("model is a drafter GGUF, not a model llama-server can serve (%s: %s); pass the target "
                           "model's gguf_info as model= and this file as drafter= (llama_server_draft_model_path)"
                           % (facts.get("path") or "?", facts.get("drafter_reason")
                              or "architecture %s is a drafter" % facts.get("architecture")))
    for key in ("architecture", "block_count", "layers", "embedding_length"):
        if facts.get(key) in (None, ""):
            raise FitPlanError("%s.%s is missing: pass the result of dankfleet.llm.gguf_info for the %s GGUF"
                               % (what, key, what))
    arch = facts["architecture"]
    n_expert = facts.get("expert_count")
    if n_expert and (arch not in MOE_PLANNED_ARCHS or facts.get("moe_planned") is False or what != "model"):
        why = ("fit_plan models the experts of %s only" % ", ".join(sorted(MOE_PLANNED_ARCHS)) if what == "model" else
               "a Mixture-of-Experts drafter is not planned (its experts' compute and placement are not modelled)")
        raise FitPlanError("%s.architecture %r is a Mixture-of-Experts model (%s experts, %s used) that fit_plan does not "
                           "model: %s; it is refused rather than planned as dense (its expert compute and layout would "
                           "be wrong)" % (what, arch, n_expert, facts.get("expert_used_count"), why))
    if facts.get("architecture_supported") is False:
        raise FitPlanError("%s.architecture %r is not one fit_plan knows how to size (its layer kinds are not derived); "
                           "supported: dense llama-family, qwen35/qwen35moe/qwen3next hybrids, sliding-window "
                           "gemma2/gemma3/cohere2/gpt-oss, mamba/rwkv, dflash drafters" % (what, arch))
    layers = facts["layers"]
    if not isinstance(layers, list) or len(layers) != facts["block_count"]:
        raise FitPlanError("%s.layers must list block_count (%s) layers, has %s"
                           % (what, facts["block_count"], len(layers) if isinstance(layers, list) else type(layers).__name__))
    for i, L in enumerate(layers):
        for key in ("kind", "tensor_bytes"):
            if not isinstance(L, dict) or key not in L:
                raise FitPlanError("%s.layers[%d].%s is missing: pass gguf_info's result unmodified" % (what, i, key))
        if L["kind"] not in ("attention", "swa", "recurrent", "nextn", "ffn"):
            raise FitPlanError("%s.layers[%d].kind %r is unknown (architecture %r): fit_plan sizes attention, swa, "
                               "recurrent, nextn and ffn layers" % (what, i, L["kind"], arch))
        if L["kind"] in ("attention", "swa", "nextn"):
            for key in ("n_head_kv", "key_length", "value_length"):
                if L.get(key) is None:
                    raise FitPlanError("%s.layers[%d].%s is missing for a %s layer" % (what, i, key, L["kind"]))
    if n_expert:
        for key in ("expert_used_count",):
            if not _is_int(facts.get(key)) or facts[key] < 1:
                raise FitPlanError("%s.%s is missing or 0 for a Mixture-of-Experts model: pass gguf_info's result "
                                   "unmodified" % (what, key))
        for i, L in enumerate(layers):
            for key in ("expert_bytes", "n_ff_exp"):
                if not _is_int(L.get(key)):
                    raise FitPlanError("%s.layers[%d].%s is missing for a Mixture-of-Experts model: pass the result "
                                       "of this collection's gguf_info unmodified (an older one reports no experts)"
                                       % (what, i, key))
            if L["expert_bytes"] > int(L["tensor_bytes"]):
                raise FitPlanError("%s.layers[%d].expert_bytes %d exceeds its tensor_bytes %d: pass gguf_info's "
                                   "result unmodified" % (what, i, L["expert_bytes"], L["tensor_bytes"]))
            _check_span(L.get("expert_span"), "%s.layers[%d].expert_span" % (what, i), L["expert_bytes"])
        _check_span(facts.get("input_span"), "%s.input_span" % what, int(facts.get("token_embd_bytes") or 0))
    else:
        routed = [i for i, L in enumerate(layers) if isinstance(L, dict) and _is_int(L.get("expert_bytes"))
                  and L["expert_bytes"] > 0]
        if routed:
            # routed expert tensors without the count that routes them: never planned as dense
            raise FitPlanError("%s.architecture %r carries routed expert tensors (blk.%d.ffn_*_exps, %d blocks) but no "
                               "%s.expert_count: a Mixture-of-Experts file llama.cpp b11434 cannot route (it refuses "
                               "it); re-convert the model, it is refused rather than planned as dense"
                               % (what, arch, routed[0], len(routed), arch))
    if any(L["kind"] == "recurrent" for L in layers):
        rs = facts.get("recurrent_state") or {}
        if rs.get("bytes_per_layer_per_seq") is None:
            raise FitPlanError("%s.recurrent_state.bytes_per_layer_per_seq is missing: the model has recurrent layers "
                               "and their state cannot be sized without the ssm.* dimensions" % what)
    if any(L["kind"] == "swa" for L in layers) and not facts.get("sliding_window"):
        raise FitPlanError("%s.sliding_window is missing although layers are sliding-window" % what)


def _check_span(span, where, nbytes):
    """A file range [first byte, end) from gguf_info (absent from an older one: the sum is booked then)."""
    if span is None:
        return
    if (not isinstance(span, list) or len(span) != 2 or not all(_is_int(v) for v in span)
            or not 0 <= span[0] <= span[1] or span[1] - span[0] < nbytes):
        raise FitPlanError("%s %r is not a file range [first byte, end) holding its %d bytes: pass gguf_info's result "
                           "unmodified" % (where, span, nbytes))


def _cache_row(type_name, n, field):
    t = CACHE_TYPES.get(str(type_name).lower())
    if t is None:
        raise FitPlanError("serve.%s %r is not a KV cache type llama.cpp accepts; use one of %s"
                           % (field, type_name, ", ".join(sorted(CACHE_TYPES))))
    _name, blck, size = t
    if n % blck:
        raise FitPlanError("serve.%s %s needs row lengths that are multiples of %d; this model's are %d"
                           % (field, type_name, blck, n))
    return n // blck * size


def _normalize_serve(serve, model, drafter):
    if not isinstance(serve, dict):
        raise FitPlanError("serve must be a dict (backend, ctx_size, parallel, ...), got %s" % type(serve).__name__)
    s = {}
    backend = serve.get("backend")
    if backend is None:
        raise FitPlanError("serve.backend is missing: one of %s (picks the compute-buffer profile)" % ", ".join(BACKENDS))
    if backend not in PROFILES:
        raise FitPlanError("serve.backend %r is unknown; use one of %s" % (backend, ", ".join(sorted(PROFILES))))
    s["backend"] = backend
    split_mode = serve.get("split_mode", "layer") or "layer"
    if split_mode != "layer":
        raise FitPlanError("serve.split_mode %r is not planned: fit_plan sizes --split-mode layer only" % split_mode)
    s["split_mode"] = split_mode
    if "ctx_size" not in serve or serve.get("ctx_size") is None:
        raise FitPlanError("serve.ctx_size is missing: an integer (the whole pool, divided by parallel) or 'max'")
    ctx = serve["ctx_size"]
    if ctx == "max":
        s["ctx_size"] = "max"
    else:
        s["ctx_size"] = _int_field(serve, "ctx_size", "serve", minimum=1)
    s["parallel"] = _int_field(serve, "parallel", "serve", default=1, minimum=1)
    s["batch_size"] = _int_field(serve, "batch_size", "serve", default=2048, minimum=1)
    s["ubatch_size"] = _int_field(serve, "ubatch_size", "serve", default=512, minimum=1)
    s["kv_unified"] = _bool_field(serve, "kv_unified", False)
    s["cache_type_k"] = str(serve.get("cache_type_k", "f16") or "f16").lower()
    s["cache_type_v"] = str(serve.get("cache_type_v", "f16") or "f16").lower()
    fa = serve.get("flash_attn", "on")
    if isinstance(fa, str) and fa.strip().lower() == "auto":
        s["flash_attn"] = True
    else:
        try:
            s["flash_attn"] = to_bool(fa, "serve.flash_attn", FitPlanError)
        except FitPlanError:
            raise FitPlanError("serve.flash_attn %r: use on, off or auto (or a boolean by Ansible's rules)" % (fa,))
    st = serve.get("spec_type") or []
    if isinstance(st, str):
        st = [x.strip() for x in st.split(",") if x.strip()]
    if not isinstance(st, (list, tuple)):
        raise FitPlanError("serve.spec_type must be a list of speculative types, got %r" % (st,))
    for t in st:
        if t not in SPEC_TYPES:
            raise FitPlanError("serve.spec_type %r is not a llama.cpp b11434 speculative type; use %s"
                               % (t, ", ".join(SPEC_TYPES)))
    s["spec_type"] = list(st)
    s["spec_draft_n_max"] = _int_field(serve, "spec_draft_n_max", "serve", default=3, minimum=0)
    # the draft context's KV types are --spec-draft-type-k/-v, f16 unless given: they do NOT follow -ctk/-ctv
    # (common/common.h common_params_speculative_draft cache_type_k/v = GGML_TYPE_F16; common/speculative.cpp
    # common_base_params_to_speculative copies them over the target's). Measured: draft-mtp beside a q8_0 target
    # KV holds an f16 nextn cache (tests/fixtures/llamacpp/b11434-cpu/hybrid_mtp-c32768-np1-ub512-q8_0-mtp7-ts31).
    s["cache_type_k_draft"] = str(serve.get("cache_type_k_draft") or "f16").lower()
    s["cache_type_v_draft"] = str(serve.get("cache_type_v_draft") or "f16").lower()
    s["draft_device"] = serve.get("draft_device")
    s["mmproj_device"] = serve.get("mmproj_device")
    # --no-mmproj-offload (or --mmproj-device none): the projector on the CPU backend, in host memory
    s["mmproj_offload"] = _bool_field(serve, "mmproj_offload", True)
    if isinstance(s["mmproj_device"], str) and s["mmproj_device"].strip().lower() == "none":
        s["mmproj_device"], s["mmproj_offload"] = None, False
    if s["mmproj_device"] == "":
        s["mmproj_device"] = None
    # --image-min-tokens / --image-max-tokens; 0 (or unset): the projector type's own default
    s["image_min_tokens"] = _int_field(serve, "image_min_tokens", "serve", default=0, minimum=0)
    s["image_max_tokens"] = _int_field(serve, "image_max_tokens", "serve", default=0, minimum=0)
    s["floor_bytes"] = _int_field(serve, "floor_bytes", "serve", default=0, minimum=0)
    s["max_gap_bytes"] = _int_field(serve, "max_gap_bytes", "serve", default=None, minimum=0)
    s["lean_layers"] = _int_field(serve, "lean_layers", "serve", default=0, minimum=0)
    cr = serve.get("cache_ram_mib")
    if cr is None or cr == "auto":
        s["cache_ram_mib"] = cr
    else:
        s["cache_ram_mib"] = _int_field(serve, "cache_ram_mib", "serve", minimum=-1)
    ts = serve.get("tensor_split", "auto")
    if ts is None or ts == "auto":
        s["tensor_split"] = "auto"
    else:
        if isinstance(ts, str):
            ts = [x for x in re.split(r"[,/:]", ts) if x.strip()]
        if not isinstance(ts, (list, tuple)):
            raise FitPlanError("serve.tensor_split must be a list of numbers or 'auto', got %r" % (ts,))
        vals = []
        for x in ts:
            try:
                vals.append(float(x))
            except (TypeError, ValueError, OverflowError):
                raise FitPlanError("serve.tensor_split entry %r is not a number" % (x,))
            if not math.isfinite(vals[-1]) or vals[-1] > MAX_INPUT_NUMBER:
                raise FitPlanError("serve.tensor_split entry %r is not a finite share (at most 2**53)" % (x,))
        if any(v < 0 for v in vals) or sum(vals) <= 0:
            raise FitPlanError("serve.tensor_split %r: entries must be >= 0 and not all zero" % (list(ts),))
        s["tensor_split"] = vals
    s["max_ctx_per_slot"] = _int_field(serve, "max_ctx_per_slot", "serve", default=None, minimum=KV_PAD)
    # --n-cpu-moe N / --cpu-moe: the routed experts of the first N blocks (of all) stay on the CPU
    # unset (or "auto"): the planner may choose it (_choose_n_cpu_moe); 0 keeps every expert on the GPUs
    s["n_cpu_moe_open"] = serve.get("n_cpu_moe") is None or serve.get("n_cpu_moe") == "auto"
    s["n_cpu_moe"] = 0 if s["n_cpu_moe_open"] else _int_field(serve, "n_cpu_moe", "serve", default=0, minimum=0)
    s["cpu_moe"] = _bool_field(serve, "cpu_moe", False)
    lm = serve.get("load_mode")
    lm = "auto" if lm is None or lm == "" else lm
    if not isinstance(lm, str) or lm not in LOAD_MODES:
        raise FitPlanError("serve.load_mode %r is not a llama.cpp b11434 --load-mode; use one of %s"
                           % (lm, ", ".join(LOAD_MODES)))
    s["load_mode"] = lm
    # derived KV row sizes (per cell) need the model geometry: checked in _kv_bytes_per_cell
    if not s["flash_attn"] and s["cache_type_v"] not in ("f16", "f32", "bf16"):
        raise FitPlanError("serve.cache_type_v %s needs flash_attn on: llama.cpp refuses a quantized V cache without "
                           "flash attention" % s["cache_type_v"])
    return s


def _device_index(ref, gpus, field):
    if ref is None:
        return None
    if _is_int(ref):
        if 0 <= ref < len(gpus):
            return ref
        raise FitPlanError("serve.%s %d is out of range: %d device(s)" % (field, ref, len(gpus)))
    ref = str(ref)
    matches = [g["index"] for g in gpus if ref in (g["name"], g.get("device"))]
    if len(matches) == 1:
        return matches[0]
    m = re.match(r"^[A-Za-z_-]*?(\d+)$", ref)
    if m and int(m.group(1)) < len(gpus):
        return int(m.group(1))
    raise FitPlanError("serve.%s %r names no device; use an index 0..%d, a llama.cpp device name (ROCm1, CUDA0) "
                       "or a unique gpus[].name" % (field, ref, len(gpus) - 1))


# ------------------------------------------------------------------------------ llama.cpp laws

def pad(n, to=KV_PAD):
    return ((n + to - 1) // to) * to


def context_shape(n_ctx, n_seq_max, kv_unified=False):
    """llama-context.cpp: (n_ctx, n_ctx_seq) after padding."""
    n_ctx = pad(n_ctx)
    if kv_unified:
        return n_ctx, n_ctx
    n_ctx_seq = pad(n_ctx // n_seq_max)
    if n_ctx_seq == 0:
        raise FitPlanError("serve.ctx_size %d over %d slots leaves 0 tokens per slot" % (n_ctx, n_seq_max))
    return n_ctx_seq * n_seq_max, n_ctx_seq


def assign_slots(n_layer_all, split, n_dev):
    """llama-model.cpp load_tensors: device of each of the n_layer_all + 1 slots (last = output)."""
    if split is None or all(x == 0 for x in split):
        split = [1.0] * n_dev
    total = float(sum(split))
    cum, acc = [], 0.0
    for x in split:
        acc += x
        cum.append(acc / total)
    act = n_layer_all + 1
    # slot il -> the first device j with cum[j] > il / act; il / act grows with il, so device j's slots end
    # at the first il whose share reaches cum[j] (found with the same float comparison, not a formula)
    out, start = [], 0
    for j, share in enumerate(cum):
        end = min(max(int(share * act), start), act)
        while end > start and not float(end - 1) / act < share:
            end -= 1
        while end < act and float(end) / act < share:
            end += 1
        out.extend([j] * (end - start))
        start = end
    out.extend([n_dev - 1] * (act - start))
    return out


def counts_to_split(counts, n_layer_all):
    """Integer -ts over the block count (the runbook's convention) that reproduces per-device slot counts."""
    ts = list(counts)
    ts[0] -= 1
    if sum(ts) != n_layer_all or ts[0] < 1:
        return None
    return ts


def _kv_row(layer, s, draft=False):
    tk = s["cache_type_k_draft"] if draft else s["cache_type_k"]
    tv = s["cache_type_v_draft"] if draft else s["cache_type_v"]
    nk = layer["n_head_kv"] * layer["key_length"]
    nv = layer["n_head_kv"] * layer["value_length"]
    return (_cache_row(tk, nk, "cache_type_k_draft" if draft else "cache_type_k")
            + _cache_row(tv, nv, "cache_type_v_draft" if draft else "cache_type_v"))


def _is_rpc(gpu):
    """A device llama.cpp reaches through ggml-rpc (its device name is RPCn)."""
    return any(str(x or "").startswith("RPC") for x in (gpu.get("device"), gpu.get("name")))


def _fa_kv_f16(layer, s, cells, draft=False):
    """Bytes of the f16 copies of one layer's K and V views (cells x streams) that a CUDA flash-attention
    node reserves when the cache type is not f16 (ggml-cuda fattn-common.cuh get_f16_extra_data)."""
    tk = s["cache_type_k_draft"] if draft else s["cache_type_k"]
    tv = s["cache_type_v_draft"] if draft else s["cache_type_v"]
    n = 0
    if tk != "f16":
        n += 2 * layer["n_head_kv"] * layer["key_length"] * cells
    if tv != "f16":
        n += 2 * layer["n_head_kv"] * layer["value_length"] * cells
    return n


def swa_cells(n_ctx_seq, n_swa, n_seq_max, n_ubatch, unified):
    """llama-kv-cache-iswa.cpp: cells per stream of the SWA cache."""
    return pad(min(n_ctx_seq, n_swa * (n_seq_max if unified else 1) + n_ubatch))


def _n_stream(s):
    return 1 if s["kv_unified"] else s["parallel"]


SCHED_COPIES = 4        # ggml-backend.cpp GGML_SCHED_MAX_COPIES (b11434 default build)


def pipeline_copies(n_model_devices):
    """Input copies the scheduler keeps (llama-context.cpp: pipeline parallelism).

    On when the model spans more than one device with every layer offloaded, --split-mode layer, KQV
    offloaded and no tensor overrides, on backends with async compute and events (CUDA, HIP, RPC): then
    every split input -- the KQ mask, the hidden state handed between devices -- is allocated
    GGML_SCHED_MAX_COPIES times. One device: one copy.
    """
    return SCHED_COPIES if n_model_devices > 1 else 1


GATED_ATTN_ARCHS = ("qwen3next", "qwen35", "qwen35moe")    # attention output gated: q projects to 2 x n_head x d


def _graph_compute(prof, fa, ub, copies, n_embd, n_ff, n_head, cells_full, cells_swa, first, n_inputs=1,
                   base_key="compute_base_bytes", gate_width=0, fa_kv_f16=0, q_width=0, end_bytes=0, moe_used=0,
                   copy_bytes=0, moe_block=None):
    """Compute buffer of one context's graph on one device (everything but the logits).

    per ub token: act_embd x n_embd + act_ff x n_ff (the layer's own activations: one layer's peak, the
    allocator reuses it layer after layer) + n_inputs x split_embd x copies x n_embd (the hidden state(s)
    handed in, one per pipeline copy) + on the first device of a pipelined model
    first_embd x (copies - 1) x n_embd; the KQ mask, copies x (f16 with flash attention, f32 without) per
    (cell one stream attends x ub token), full-attention and sliding-window masks apiece; without flash
    attention the KQ matrix 4 x n_head per (cell x token) of the widest mask (one layer at a time) with
    attn_embd_bytes_nofa x n_embd beside it, in place of the FFN's peak when that is the larger.

    moe_block: (n_ff_exp, n_expert, K width, V width, fused) of an MoE block ggml_alloc replays: the layer's peak is
    the replayed allocation's (ggml_alloc.moe_block_peak), else the largest of its moments (MOE_PHASES).

    copy_bytes: an MoE expert tensor copied over for a batched prompt (experts on the CPU): it lives at the layer's
    down moment (EXPERT_COPY_PHASE), a peak of its own when that outgrows the layer's others.

    end_bytes: what lives at the graph's end, after the last layer freed its activations (a block drafter's
    full-ubatch logits, see _block_draft_end): a peak of its own in place of the layer's when it is the larger.
    The split inputs of a pipelined graph (copies > 1) stay allocated beside it; on one copy the KQ mask and the
    hidden state are freed by then (measured: DSpark on the GPU alone peaks at its logits + result_norm, the
    256 MiB mask of a 262144-cell context not among them; split over 4 copies the 1 GiB of masks are).
    """
    handed = n_inputs * prof["split_embd_bytes"] * copies * n_embd
    if first and copies > 1:
        handed += prof["first_embd_bytes"] * (copies - 1) * n_embd
    fa_copy = fa and fa_kv_f16 and prof.get("fa_kv_f16_copy")
    # n_ff of an MoE block is n_expert_used x n_ff_exp (_ffn_width): its replayed allocation, else its moments
    if moe_used and moe_block:
        # the replay places the flash-attention node's f16 K/V copies itself (where they land decides the peak)
        n_ff_exp, n_expert, k_width, v_width, fused = moe_block
        layer = ggml_alloc.moe_block_peak(n_embd, n_ff_exp, moe_used, n_expert, q_width, k_width, v_width, ub,
                                          fused, fa_kv_f16 if fa_copy else 0) / float(ub)
        fa_copy = False
    elif moe_used:
        layer = _moe_layer(n_embd, n_ff, moe_used)
    else:
        layer = prof["act_embd_bytes"] * n_embd + prof["act_ff_bytes"] * n_ff
    if not fa and max(cells_full, cells_swa):
        # without flash attention the peak is the attention's: the KQ matrix and what lives beside it, not
        # the FFN (measured: n_ff 2816 -> 8192 moved nothing without FA)
        kq = 4 * n_head * max(cells_full, cells_swa) * ub
        beside = prof["attn_embd_bytes_nofa"] * n_embd + prof["attn_gate_bytes_nofa"] * gate_width
        layer_total = max(ub * layer, kq + ub * beside)
    else:
        layer_total = ub * layer
    if fa_copy:
        # CUDA: a flash-attention node whose K/V are not f16 reserves f16 copies of the K and V views it
        # reads beside its output (ggml-cuda fattn.cu get_alloc_size, MMA/tile kernels): one layer at a time,
        # a peak of its own when it outgrows the FFN's
        beside = (prof["fa_beside_embd_bytes"] * n_embd + prof["fa_beside_q_bytes"] * q_width
                  + prof["fa_beside_gate_bytes"] * gate_width + MOE_EXPERT_OUT_BYTES * moe_used * n_embd)
        layer_total = max(layer_total, fa_kv_f16 + ub * beside)
    if copy_bytes:
        layer_total = max(layer_total, copy_bytes + ub * _moe_phase(EXPERT_COPY_PHASE, n_embd, n_ff, moe_used))
    mb = prof["mask_bytes_per_cell"] if fa else prof["mask_bytes_per_cell_nofa"]
    inputs = ub * handed + copies * mb * ub * (cells_full + cells_swa)
    if end_bytes and copies == 1:
        return prof[base_key] + max(inputs + layer_total, end_bytes)
    return prof[base_key] + inputs + max(layer_total, end_bytes)


# Block drafters (draft-dflash / draft-dspark; src/models/dflash.cpp, common/speculative.cpp b11434). The draft
# context reserves its worst case at n_tokens = min(n_ctx, n_ubatch) (llama-context.cpp sched_reserve) and the
# decoder projects EVERY token of that ubatch through the lm_head -- it never selects output rows -- so the
# graph's end holds an f32 [n_vocab, ubatch] logits tensor beside result_norm ([n_embd, ubatch] f32), on the
# device of the lm_head weight: the drafter's own head, else the target's (shared through ctx_other), i.e. the
# target's output device. The DSpark path (a Markov head; masked nextn embeddings) reserves a second time once
# the speculative implementation is set up (215 graph nodes against 179) and that reserve holds two such
# logits tensors. DFlash2's selector (top-k candidates, the gate, the lattice) adds beside them. Measured on the
# H200 (tests/fixtures/llamacpp/b11434-cuda-h200-block, fitting rows: f16 at ubatch 512 and 2048, q8_0 at 2048):
#   DSpark   2 x 4 x n_vocab + 4 x n_embd bytes per ubatch token (within 1 MiB at 512 and 2048)
#   DFlash2  1 x 4 x n_vocab + 24 x n_embd bytes per ubatch token (result_norm's 4 + 20 of selector work;
#            residuals -56..+184 MiB at ubatch 2048: f16 KV above q8_0 there by 240 MiB on one copy, not modelled)
# The graph laws are the ggml allocator's, so every profile uses them; the hip profile's fitted
# draft_compute_base_bytes and logits_ubatch_bytes stood in for exactly this term and are not added to it.
BLOCK_DRAFT_LOGITS = {"dspark": 2, "dflash2": 1, "dflash": 1}
BLOCK_DRAFT_END_EMBD = {"dspark": 4.0, "dflash2": 24.0, "dflash": 4.0}
# The layers themselves: a block drafter's first device is not handed layer 0's extra pipeline copies (its input
# is the target's token rows, gathered on the host): measured 36 x n_embd per token below the target's law on the
# first device of a split DSpark/DFlash2 (ubatch 512..2048). DFlash2's dynamic convolutions (build_dflash2_conv:
# the per-token tap weights, the padded views, the products) keep 21 x n_embd per token more alive in a layer.
BLOCK_DRAFT_LAYER_EMBD = {"dspark": 0.0, "dflash2": 21.0, "dflash": 0.0}
# A pipelined draft (split over devices, 4 copies): 7 x n_embd per token more beside the end peak on the head
# device (measured -18.5 / -37 / -73 MiB without it at ubatch 512 / 1024 / 2048, DSpark and DFlash2 alike).
BLOCK_DRAFT_END_PIPE_EMBD = 7.0
# The target side of a block drafter: llama_set_embeddings_layer_inp on each extract layer makes the target
# re-reserve with that layer's input [n_embd, ubatch] f32 kept to the graph's end, on the layer's device
# (measured: +40 MiB at ubatch 512 on the GPU alone, the five extract layers of the 27B target).
EXTRACT_EMBD_BYTES = 4.0


def _block_draft_kind(dm):
    d = dm.get("drafter") or {}
    kind = d.get("kind")
    if kind in BLOCK_DRAFT_LOGITS:
        return kind
    if d.get("markov_head"):
        return "dspark"
    return "dflash2" if (d.get("selector_top_k") or dm.get("selector_top_k")) else "dflash"


def _block_draft_end(dm, ub, n_vocab, d_embd, copies=1):
    """Bytes at the end of a block drafter's reserved graph on its lm_head's device (see above)."""
    kind = _block_draft_kind(dm)
    embd = BLOCK_DRAFT_END_EMBD[kind] + (BLOCK_DRAFT_END_PIPE_EMBD if copies > 1 else 0.0)
    return ub * (4 * BLOCK_DRAFT_LOGITS[kind] * n_vocab + embd * d_embd)


def _host_mask(prof, fa, ub, copies, cells):
    if not prof["host_modelled"]:
        return 0
    return copies * (prof["mask_bytes_per_cell"] if fa else prof["mask_bytes_per_cell_nofa"]) * ub * cells


def _host_compute(prof, fa, ub, copies, n_embd, cells):
    """The CPU backend's compute buffer in the llama-server process: the input embeddings and the split
    inputs it sends, per pipeline copy, and the KQ masks it builds (every kind the context attends).
    0 for a profile whose host side was never measured (host_modelled false)."""
    if not prof["host_modelled"]:
        return 0
    return (ub * (prof["host_embd_bytes"] + prof["host_split_embd_bytes"] * copies) * n_embd
            + _host_mask(prof, fa, ub, copies, cells))


# ------------------------------------------------------------------------------ the sizing

class _Ctx(object):
    pass


def _prepare(gpus, model, serve, drafter, mmproj):
    c = _Ctx()
    c.gpus, c.skipped = _gpu_list(gpus)
    _check_facts(model, "model")
    c.model = model
    c.s = _normalize_serve(serve, model, drafter)
    c.prof = PROFILES[c.s["backend"]]
    if drafter is not None:
        _check_facts(drafter, "drafter")
    c.drafter = drafter
    if mmproj is not None:
        looks_like = isinstance(mmproj, dict) and (mmproj.get("is_mmproj") or mmproj.get("mmproj_bytes")
                                                   or (mmproj.get("mmproj") or {}).get("bytes"))
        if not looks_like:
            raise FitPlanError("mmproj must be gguf_info facts of an mmproj GGUF (is_mmproj true, mmproj_bytes); "
                               "got %s" % (sorted(mmproj) if isinstance(mmproj, dict) else type(mmproj).__name__))
    c.mmproj = mmproj
    c.n_dev = len(c.gpus)
    c.n_layer_all = int(model["block_count"])
    c.layers = model["layers"]
    c.n_layer = c.n_layer_all - int(model.get("nextn_predict_layers") or 0)
    ts = c.s["tensor_split"]
    if ts != "auto" and len(ts) != c.n_dev:
        raise FitPlanError("serve.tensor_split has %d entries but there are %d device(s) (%s): give one share per "
                           "device, or 'auto'" % (len(ts), c.n_dev, ", ".join(g["name"] for g in c.gpus)))
    c.draft_dev = _device_index(c.s["draft_device"], c.gpus, "draft_device")
    c.mmproj_dev = _device_index(c.s["mmproj_device"], c.gpus, "mmproj_device")
    if c.mmproj_dev is None:
        c.mmproj_dev = 0          # arg.cpp: the mmproj device defaults to the first of --device
    c.mm = _mmproj_terms(c.prof, mmproj, c.s) if mmproj is not None else None
    types = c.s["spec_type"]
    c.mtp = any(t in SELF_DRAFT_TYPES for t in types)
    c.model_draft = model_drafters(types)
    arch = model["architecture"]
    rollback = model.get("rs_rollback", arch in RS_ROLLBACK_ARCHS)
    c.n_rs_seq = c.s["spec_draft_n_max"] if (rollback and any(t in CONTEXT_DRAFT_TYPES for t in types)) else 0
    c.n_vocab = int(model.get("vocab_size") or 0)
    c.n_embd = int(model["embedding_length"])
    c.n_ff = int(model.get("feed_forward_length") or 0)
    # MoE: the experts used per token, and which blocks keep their routed experts on the host
    c.n_used = int(model.get("expert_used_count") or 0) if model.get("expert_count") else 0
    c.cpu_moe_blocks = set()
    c.moe_block = None
    if c.n_used:
        c.n_ff = max([_ffn_width(L, c.n_used, 0) for L in c.layers] or [c.n_ff]) or c.n_ff
        _host_expert_blocks(c, c.s["n_cpu_moe"])
        c.moe_block = _moe_block(model, c.layers)
    return c


def _host_expert_blocks(c, n_cpu_moe):
    """The blocks whose routed experts stay on the host at --n-cpu-moe n_cpu_moe (all of them with --cpu-moe); the
    per-block tables made for another choice are dropped."""
    c.s["n_cpu_moe"] = n_cpu_moe
    n_host = c.n_layer_all if c.s["cpu_moe"] else min(n_cpu_moe, c.n_layer_all)
    c.cpu_moe_blocks = set(il for il in range(n_host) if int(c.layers[il].get("expert_bytes") or 0))
    c.__dict__.pop("layer_tables", None)


def _choose_n_cpu_moe(c, floor):
    """serve.n_cpu_moe left open with an auto split at ctx_size max: what operators do by hand. Every expert stays
    on the GPUs when the plan then reaches the per-slot cap (the trained window, or max_ctx_per_slot); else the
    smallest --n-cpu-moe whose plan reaches it, or -- when none does -- the smallest whose context is the largest
    any N reaches. More blocks on the host never shrink the context (they free VRAM; the reserve for copied
    experts is the same for 1 block or all), so both are a bisection. Returns the note that says so, or None."""
    if not c.n_used or c.s["cpu_moe"]:
        return None
    n_seq = c.s["parallel"]
    unit = KV_PAD * (1 if c.s["kv_unified"] else n_seq)
    cap_slot = c.s["max_ctx_per_slot"] or int(c.model.get("context_length") or 0) or 1 << 20
    top = (cap_slot * (1 if c.s["kv_unified"] else n_seq)) // unit * unit
    memo = {}

    def ctx_at(n):
        if n not in memo:
            _host_expert_blocks(c, n)
            memo[n] = _max_ctx(c, None, floor, True)[0] or 0
        return memo[n]

    if ctx_at(0) >= top:
        _host_expert_blocks(c, 0)
        return None
    n_all = max([il + 1 for il, L in enumerate(c.layers) if int(L.get("expert_bytes") or 0)] or [0])
    goal = min(top, ctx_at(n_all))
    if goal <= ctx_at(0):
        _host_expert_blocks(c, 0)     # experts on the host buy no context here: keep them on the GPUs
        return None
    lo, hi = 0, n_all                 # ctx_at(lo) < goal <= ctx_at(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ctx_at(mid) >= goal:
            hi = mid
        else:
            lo = mid
    _host_expert_blocks(c, hi)
    per_slot = 1 if c.s["kv_unified"] else n_seq
    reached = "reaches the %d-token cap per slot" % cap_slot if goal >= top else (
        "reaches %d tokens per slot, the most any number of blocks does (the cap is %d)" % (goal // per_slot, cap_slot))
    all_gpu = "%d tokens per slot" % (ctx_at(0) // per_slot) if ctx_at(0) else "does not fit"
    return ("serve.n_cpu_moe chosen by the planner: %d -- the routed experts of blocks 0-%d stay on the host, the "
            "fewest blocks whose plan %s (every expert on the GPUs: %s); set serve.n_cpu_moe to pin it (0 keeps "
            "every expert on the GPUs)" % (hi, hi - 1, reached, all_gpu))


def _mmproj_geometry(mm, s):
    """The projector's image-token law: type, width, patch, merge and the token limits as b11434 sets them
    (MMPROJ_TYPES; --image-min-tokens / --image-max-tokens override). None for a type it does not model."""
    info = mm.get("mmproj") if isinstance(mm.get("mmproj"), dict) else {}
    ptype = info.get("projector_type")
    known = MMPROJ_TYPES.get(ptype) if isinstance(ptype, str) else None
    n_embd = info.get("embedding_length")
    if known is None or not _is_int(n_embd) or n_embd < 1:
        return None
    merge_d, patch_d, min_d, max_d, warm_d = known
    patch, merge = info.get("patch_size"), info.get("spatial_merge_size")
    patch = patch if _is_int(patch) and patch > 0 else patch_d
    merge = merge if _is_int(merge) and merge > 0 else merge_d
    max_tokens = s["image_max_tokens"] or max_d
    min_tokens = s["image_min_tokens"] or min_d
    # clip-model.h set_warmup_n_tokens: never warm up with more tokens than a custom maximum allows
    side = int(round(math.sqrt(warm_d)))
    if s["image_max_tokens"] and warm_d > s["image_max_tokens"]:
        side = max(1, int(math.sqrt(s["image_max_tokens"])))
    return {"projector_type": ptype, "n_embd": n_embd, "patch_size": patch, "merge": merge,
            "image_min_tokens": min_tokens, "image_max_tokens": max_tokens, "warmup_tokens": side * side,
            "default_max_tokens": max_d}


def image_geometry(mmproj, image_min_tokens=0, image_max_tokens=0):
    """The image-token law of an mmproj's gguf_info facts under --image-min/max-tokens (0: the type's own):
    {projector_type, n_embd, patch_size, merge, image_min_tokens, image_max_tokens, warmup_tokens, ...}, or None
    for a projector type fit_plan does not model. The verify stage sizes its largest image with it."""
    if not isinstance(mmproj, dict):
        return None
    return _mmproj_geometry(mmproj, {"image_min_tokens": int(image_min_tokens or 0),
                                     "image_max_tokens": int(image_max_tokens or 0)})


def _mmproj_reserve(prof, g, tokens):
    """clip's compute buffer for an image of this many tokens: a fixed part + the ViT's activations."""
    return int(prof["mmproj_compute_base_bytes"] + MMPROJ_ACT_BYTES * tokens * g["merge"] ** 2 * g["n_embd"])


def _mmproj_pool(prof, g, tokens):
    """The backend's matmul temporaries after an image of this many tokens (the CUDA pool, the CPU work buffer)."""
    return int(prof["mmproj_pool_bytes"] * tokens * g["merge"] ** 2 * g["n_embd"])


def _mmproj_request(prof, g, tokens, first_use):
    """What an image of this many tokens adds beyond the load: the first-use context, the graph's growth past the
    warm-up reservation, the pool."""
    grow = max(0, _mmproj_reserve(prof, g, tokens) - _mmproj_reserve(prof, g, g["warmup_tokens"]))
    return int(first_use + grow + _mmproj_pool(prof, g, tokens))


def _mmproj_terms(prof, mm, s):
    """The projector's bytes at load and at the peak a request can reach (the largest image the limit admits),
    and where they live: the projector's device, or the host with mmproj_offload false."""
    weights = int(mm.get("mmproj_bytes") or (mm.get("mmproj") or {}).get("bytes") or mm.get("tensor_bytes_total") or 0)
    on_gpu = s["mmproj_offload"] and prof is not PROFILES["cpu"]
    # the CPU backend keeps no runtime context of its own: only a GPU backend's first encode adds one
    first_use = int(prof["mmproj_first_use_bytes"]) if s["mmproj_offload"] else 0
    cpu_prof = prof if s["mmproj_offload"] else PROFILES["cpu"]
    g = _mmproj_geometry(mm, s)
    out = {"weights_bytes": weights, "offload": bool(s["mmproj_offload"]), "modelled": g is not None,
           "projector_type": (mm.get("mmproj") or {}).get("projector_type"), "first_use_bytes": first_use,
           "geometry": g, "prof": cpu_prof, "on_gpu": on_gpu}
    if g is None:
        out.update(reserve_bytes=int(prof["mmproj_compute_bytes"]), request_bytes=first_use)
        return out
    if cpu_prof.get("mmproj_reserve_fitted"):
        reserve = int(cpu_prof["mmproj_compute_bytes"])
    else:
        reserve = _mmproj_reserve(cpu_prof, g, g["warmup_tokens"])
    out.update(reserve_bytes=reserve, request_bytes=_mmproj_request(cpu_prof, g, g["image_max_tokens"], first_use))
    return out


def _ffn_width(layer, n_used, n_ff):
    """The FFN width a block's activations scale with: n_expert_used x n_ff_exp for the routed experts (the shared
    expert runs after them, on its own width: the larger is the peak); a dense block's n_ff."""
    exp = int(layer.get("n_ff_exp") or 0)
    if n_used and exp and int(layer.get("expert_bytes") or 0):
        return max(n_used * exp, int(layer.get("n_ff_shexp") or 0))
    return int(layer.get("n_ff") or n_ff or 0)


def _spec_errors(c):
    """Spec-chain rules: errors, not warnings (runbook: MTP cannot chain with a drafter; n_max <= block_size-1)."""
    errs = []
    s = c.s
    types = s["spec_type"]
    if spec_chain_conflict(types):
        errs.append("serve.spec_type %s chains draft-mtp with the model-backed %s: a chain has ONE draft context and "
                    "MTP builds against whatever model it holds ('context type MTP requested but model doesn't contain "
                    "MTP layers'); keep one of them (ngram-* types may ride beside either)"
                    % (",".join(types), ",".join(c.model_draft)))
    if c.mtp and not c.model.get("nextn_predict_layers"):
        errs.append("serve.spec_type draft-mtp needs a model with MTP layers; model.nextn_predict_layers is 0 -- "
                    "use a GGUF that carries blk.N.nextn.* or drop draft-mtp")
    if c.model_draft and c.drafter is None:
        errs.append("serve.spec_type %s needs a drafter model: pass drafter=<gguf_info of the draft GGUF>"
                    % ",".join(c.model_draft))
    # A drafter the spec type does not load is no error: the runbook keeps the DFlash2 sidecar on disk under
    # MTP so that switching back is one change. It is planned as present and unused (nothing charged: every
    # drafter charge below is gated on c.model_draft) and reported in the result's drafter_unused.
    if c.drafter is not None and c.model_draft:
        d = c.drafter.get("drafter") or {}
        bs = c.drafter.get("block_size") or d.get("block_size")
        if any(t in BLOCK_DRAFT_TYPES for t in c.model_draft):
            if not bs:
                errs.append("drafter.block_size is missing: a draft-dflash/draft-dspark drafter carries dflash.block_size")
            elif s["spec_draft_n_max"] > bs - 1:
                errs.append("serve.spec_draft_n_max %d exceeds the drafter's block_size %d - 1 = %d: a block drafter "
                            "yields at most block_size - 1 draft tokens per step; set spec_draft_n_max <= %d"
                            % (s["spec_draft_n_max"], bs, bs - 1, bs - 1))
    if c.model_draft and s["spec_draft_n_max"] < 1:
        errs.append("serve.spec_draft_n_max must be >= 1 with a model-backed drafter")
    return errs


def _drafter_unused(c):
    """Why a given drafter is present and unused (None when it is used or none was given): nothing is charged."""
    if c.drafter is None or c.model_draft:
        return None
    return ("drafter %s is present and unused: serve.spec_type %s loads no draft model (only %s take "
            "--spec-draft-model); nothing is charged for it - switching back to it is one change of spec_type"
            % (c.drafter.get("path") or c.drafter.get("architecture"), ",".join(c.s["spec_type"]) or "[]",
               ", ".join(MODEL_DRAFT_TYPES)))


def _draft_placement(c, split):
    """Device of every draft slot: --spec-draft-device pins all of it; otherwise the target's split law."""
    d = c.drafter
    n = int(d["block_count"])
    if c.draft_dev is not None:
        return [c.draft_dev] * (n + 1)
    return assign_slots(n, split, c.n_dev)


def _layer_table(c, n_ctx_seq, n_stream, swa_n):
    """Per-block bytes at one context shape, as prefix sums: a device's share of a run of blocks is then a
    difference of two entries, not a walk over its layers (the split search evaluates many splits per context).
    Nextn blocks count for nothing here: the main graph never runs them (draft-mtp sizes them apart)."""
    cache = c.__dict__.setdefault("layer_tables", {})
    key = (n_ctx_seq, n_stream, swa_n)
    if key in cache:
        return cache[key]
    s, m = c.s, c.model
    rs_row = int((m.get("recurrent_state") or {}).get("bytes_per_layer_per_seq") or 0)
    rs_rows = max(1, s["parallel"]) * (1 + c.n_rs_seq)
    sums = dict((k, [0]) for k in ("layers", "weights_bytes", "kv_bytes", "recurrent_bytes", "attn", "swa",
                                   "expert_bytes", "host_expert_bytes"))
    n_ff, fa, real, att, moe_used, copy_max = [], [], [], [], [], []
    for il, L in enumerate(c.layers):
        kind = L["kind"]
        row = dict.fromkeys(sums, 0)
        ff = f16 = used = copy = 0
        if kind != "nextn":
            real.append(il)
            row["layers"] = 1
            row["weights_bytes"] = int(L["tensor_bytes"])
            ff = _ffn_width(L, c.n_used, c.n_ff)
            experts = int(L.get("expert_bytes") or 0) if c.n_used else 0
            if experts:
                used = c.n_used
                if il in c.cpu_moe_blocks:
                    # --n-cpu-moe / --cpu-moe: the routed experts live on the host, the rest of the block here;
                    # the largest of them is what a batched prompt copies back over (see EXPERT_COPY_PHASE)
                    row["weights_bytes"] -= experts
                    row["host_expert_bytes"] = experts
                    copy = int(L.get("expert_tensor_bytes_max") or 0)
                else:
                    row["expert_bytes"] = experts
            if kind in ("attention", "swa"):
                att.append(il)
            if kind == "attention":
                row["kv_bytes"] = _kv_row(L, s) * n_ctx_seq * n_stream
                row["attn"] = 1
                f16 = _fa_kv_f16(L, s, n_ctx_seq * n_stream)
            elif kind == "swa":
                row["kv_bytes"] = _kv_row(L, s) * swa_n * n_stream
                row["swa"] = 1
                f16 = _fa_kv_f16(L, s, swa_n * n_stream)
            elif kind == "recurrent":
                row["recurrent_bytes"] = rs_row * rs_rows
        for k, v in row.items():
            sums[k].append(sums[k][-1] + v)
        n_ff.append(ff)
        fa.append(f16)
        moe_used.append(used)
        copy_max.append(copy)
    lt = {"sums": sums, "n_ff": n_ff, "fa": fa, "real": real, "att": att, "moe_used": moe_used, "copy_max": copy_max}
    cache[key] = lt
    return lt


class DeviceTerms(object):
    """One device's terms in one evaluation (_evaluate): what each component charges it, under the names of the
    result's ``devices[]`` rows (``row()`` writes one), and what the later components read back -- which kinds of
    block it holds, its widest FFN, its f16 K/V copy, the experts it runs, the drafter roles it plays."""

    __slots__ = ("name", "index", "layers", "layer_first", "layer_last", "weights_bytes", "kv_bytes",
                 "recurrent_bytes", "draft_bytes", "mmproj_bytes", "mmproj_peak_bytes", "compute_bytes",
                 "overhead_bytes", "expert_weights_bytes", "expert_copy_bytes", "host_expert_bytes",
                 "has_layers", "has_attn", "has_swa", "n_ff", "fa_kv_f16", "moe_used", "expert_copy_max",
                 "draft_detail", "runs_drafter", "runs_mtp", "dflash2_head")

    def __init__(self, gpu):
        self.name, self.index = gpu["name"], gpu["index"]
        self.layers = 0
        self.layer_first = self.layer_last = None
        self.weights_bytes = self.kv_bytes = self.recurrent_bytes = self.draft_bytes = 0
        self.mmproj_bytes = self.mmproj_peak_bytes = self.compute_bytes = self.overhead_bytes = 0
        self.expert_weights_bytes = self.expert_copy_bytes = self.host_expert_bytes = 0
        self.has_layers = self.has_attn = self.has_swa = False
        self.n_ff = self.fa_kv_f16 = self.moe_used = self.expert_copy_max = 0
        # {weights_bytes, kv_bytes, compute_bytes} of the draft context here (draft-mtp or a drafter model)
        self.draft_detail = None
        self.runs_drafter = self.runs_mtp = self.dflash2_head = False

    def detail(self):
        """The draft context's share of draft_bytes on this device, made on first use."""
        if self.draft_detail is None:
            self.draft_detail = {"weights_bytes": 0, "kv_bytes": 0, "compute_bytes": 0}
        return self.draft_detail

    def row(self, gpu, out_dev):
        """The result's ``devices[]`` entry: its keys, their order and values are fit_plan's interface."""
        total = (self.weights_bytes + self.kv_bytes + self.recurrent_bytes + self.draft_bytes + self.mmproj_bytes
                 + self.compute_bytes + self.overhead_bytes)
        free = gpu["vram_total_bytes"] - gpu["vram_reserved_bytes"] - total
        row = {"name": self.name, "layers": self.layers, "weights_bytes": self.weights_bytes,
               "kv_bytes": self.kv_bytes, "recurrent_bytes": self.recurrent_bytes, "draft_bytes": self.draft_bytes,
               "mmproj_bytes": self.mmproj_bytes, "compute_bytes": self.compute_bytes,
               "overhead_bytes": self.overhead_bytes,
               # MoE: of weights_bytes, the routed experts held here; of compute_bytes, the reserve for experts copied
               "expert_weights_bytes": self.expert_weights_bytes, "expert_copy_bytes": self.expert_copy_bytes,
               # of mmproj_bytes, what only an image request adds (the load-time figure is mmproj_bytes minus this)
               "mmproj_peak_bytes": self.mmproj_peak_bytes,
               "index": self.index, "total_bytes": int(total), "free_bytes": int(free),
               "vram_total_bytes": gpu["vram_total_bytes"], "vram_reserved_bytes": gpu["vram_reserved_bytes"],
               "layer_range": [self.layer_first, self.layer_last] if self.layer_first is not None else None,
               "holds_output": self.index == out_dev}
        if gpu.get("host"):
            row.update(host=gpu["host"], endpoint=gpu.get("endpoint"), rpc_backend=gpu.get("rpc_backend"))
        if self.draft_detail is not None:
            row["draft_detail"] = self.draft_detail
        return row


class _Shape(object):
    """One evaluation's context shape and placement, shared by the components (_evaluate)."""

    __slots__ = ("split", "n_seq", "n_ctx", "n_ctx_seq", "n_stream", "ub", "slots", "out_dev", "swa_n", "fa",
                 "copies", "n_head", "q_width", "gate_width")

    def __init__(self, c, split, n_ctx_req):
        s, m = c.s, c.model
        self.split = split
        self.n_seq = s["parallel"]
        self.n_ctx, self.n_ctx_seq = context_shape(n_ctx_req, self.n_seq, s["kv_unified"])
        self.n_stream = _n_stream(s)
        self.ub = min(self.n_ctx, s["ubatch_size"], s["batch_size"])
        self.slots = assign_slots(c.n_layer_all, split, c.n_dev)
        self.out_dev = self.slots[-1]
        n_swa = int(m.get("sliding_window") or 0)
        self.swa_n = swa_cells(self.n_ctx_seq, n_swa, self.n_seq, s["ubatch_size"], s["kv_unified"]) if n_swa else 0
        self.fa = s["flash_attn"]
        # experts on the CPU are tensor overrides: llama-context.cpp builds no pipeline copies then
        self.copies = pipeline_copies(1 if c.cpu_moe_blocks else c.n_dev) if c.prof["pipeline_copies"] else 1
        self.n_head = int(m.get("head_count") or 0)
        self.q_width = self.n_head * int(m.get("key_length") or 0)
        self.gate_width = self.q_width if m.get("architecture") in GATED_ATTN_ARCHS else 0


def _fill_device(d, lt, lo, hi, rpc=False):
    """Add blocks lo..hi-1 (the run of blocks one device holds) to its DeviceTerms."""
    sums = lt["sums"]
    n = sums["layers"][hi] - sums["layers"][lo]
    if not n:
        return
    d.layers += n
    d.weights_bytes += sums["weights_bytes"][hi] - sums["weights_bytes"][lo]
    d.kv_bytes += sums["kv_bytes"][hi] - sums["kv_bytes"][lo]
    d.recurrent_bytes += sums["recurrent_bytes"][hi] - sums["recurrent_bytes"][lo]
    d.expert_weights_bytes += sums["expert_bytes"][hi] - sums["expert_bytes"][lo]
    d.host_expert_bytes += sums["host_expert_bytes"][hi] - sums["host_expert_bytes"][lo]
    d.moe_used = max([d.moe_used] + lt["moe_used"][lo:hi])
    d.expert_copy_max = max([d.expert_copy_max] + lt["copy_max"][lo:hi])
    d.has_layers = True
    d.has_attn = d.has_attn or sums["attn"][hi] > sums["attn"][lo]
    d.has_swa = d.has_swa or sums["swa"][hi] > sums["swa"][lo]
    d.n_ff = max([d.n_ff] + lt["n_ff"][lo:hi])
    if rpc:
        # ggml-rpc caches get_alloc_size by the output tensor's shape and op params, not its sources
        # (ggml-rpc.cpp ggml_backend_rpc_buffer_type_get_alloc_size): every FA node on an RPC device is
        # sized like the device's FIRST one. A sliding-window layer first (gemma3: 5 of every 6) hands
        # its window-sized f16 K/V copies to the full-attention layers after it (measured: 940 MiB
        # less than the full-context copy at 131072, tests/fixtures/llamacpp/b11434-cuda-h200-swa)
        att = lt["att"]
        i = _bisect_left(att, lo)
        if i < len(att) and att[i] < hi:
            d.fa_kv_f16 = lt["fa"][att[i]]
    else:
        d.fa_kv_f16 = max([d.fa_kv_f16] + lt["fa"][lo:hi])
    real = lt["real"]
    if d.layer_first is None:
        d.layer_first = real[_bisect_left(real, lo)]
    d.layer_last = real[_bisect_left(real, hi) - 1]


def _evaluate(c, split, n_ctx_req):
    """Per-device bytes for one split (list of shares) and one requested n_ctx: each component charges the
    devices (DeviceTerms) and the host in turn, the overhead last (it depends on what runs where)."""
    sh = _Shape(c, split, n_ctx_req)
    devs = [DeviceTerms(g) for g in c.gpus]
    _target_layers(c, sh, devs)
    _target_compute(c, sh, devs)
    host = _target_host(c, sh)
    host_experts = _experts_on_host(devs, host)
    gap = _mapped_gap(c)
    host["weights_bytes"] += gap
    _draft_mtp(c, sh, devs, host)
    host_draft = _model_drafter(c, sh, devs, host)
    _mmproj_charge(c, devs, host)
    _overhead(c, sh, devs)
    rows = [d.row(g, sh.out_dev) for d, g in zip(devs, c.gpus)]
    frees = [r["free_bytes"] for r in rows]
    return {
        "split": list(split), "slots": sh.slots, "n_ctx": sh.n_ctx, "n_ctx_seq": sh.n_ctx_seq, "devices": rows,
        "gap_bytes": max(frees) - min(frees) if len(frees) > 1 else 0,
        "min_free_bytes": min(frees),
        "host_weights_bytes": int(c.model.get("token_embd_bytes") or 0) + host_draft + host_experts + gap,
        "host": dict(host, total_bytes=sum(host.values())),
        "host_experts": _host_experts(c, host_experts, gap),
        "n_ubatch": sh.ub, "n_rs_seq": c.n_rs_seq,
    }


def _target_layers(c, sh, devs):
    """The target's blocks, their weights, KV and recurrent state, on the devices the split gives them.

    Layer -> device (src/llama-model.cpp load_tensors): the n_layer_all + 1 slots are cut by the cumulative
    normalised split (assign_slots); the output layer is the last slot, its weights on that device. KV
    (src/llama-kv-cache.cpp, llama-kv-cache-iswa.cpp) and recurrent state (src/llama-memory-recurrent.cpp) per
    block as _layer_table sizes them; with --n-cpu-moe the block's routed experts are host weights
    (_experts_on_host)."""
    m = c.model
    lt = _layer_table(c, sh.n_ctx_seq, sh.n_stream, sh.swa_n)
    lo = 0
    for d in devs:
        # the device's blocks: a run of slots (assign_slots hands them out in order); the output slot is not a block
        hi = lo + sh.slots.count(d.index)
        blk_hi = min(hi, c.n_layer_all)
        if blk_hi > lo:
            _fill_device(d, lt, lo, blk_hi, _is_rpc(c.gpus[d.index]))
        lo = hi
    od = devs[sh.out_dev]
    od.weights_bytes += int(m.get("output_bytes") or 0)
    od.has_layers = True


def _target_compute(c, sh, devs):
    """The target context's compute buffer on every device holding its layers (_graph_compute, PROFILES).

    Pipeline copies when the model spans more than one device (llama-context.cpp, ggml-backend.cpp
    GGML_SCHED_MAX_COPIES); the logits on the output device: n_outputs x n_vocab x 4 (llama-context.cpp
    output_reserve, n_outputs_max = min(n_batch, n_seq_max x (1 + draft tokens))) plus the profile's
    logits_ubatch_bytes; MoE experts copied over for a batched prompt (EXPERT_COPY_PHASE); a block drafter's
    extract layers keep their input alive to the graph's end (llama_set_embeddings_layer_inp, EXTRACT_EMBD_BYTES)."""
    s, prof = c.s, c.prof
    ub = sh.ub
    n_outputs_max = min(s["batch_size"], sh.n_seq * (1 + (s["spec_draft_n_max"] if s["spec_type"] else 0)))
    n_outputs = min(ub, max(n_outputs_max, sh.n_seq))
    extract_on = {}
    if c.drafter is not None and any(t in BLOCK_DRAFT_TYPES for t in c.model_draft):
        for il in (c.drafter.get("drafter") or {}).get("target_layers") or []:
            if 0 <= int(il) < c.n_layer:
                extract_on[sh.slots[int(il)]] = extract_on.get(sh.slots[int(il)], 0) + 1
    for d in devs:
        if not d.has_layers:
            continue
        args = (prof, sh.fa, ub, sh.copies, c.n_embd, d.n_ff or c.n_ff, sh.n_head,
                sh.n_ctx_seq if d.has_attn else 0, sh.swa_n if d.has_swa else 0)
        kw = dict(first=d.index == sh.slots[0], gate_width=sh.gate_width, fa_kv_f16=d.fa_kv_f16,
                  q_width=sh.q_width, moe_used=d.moe_used)
        if d.moe_used and c.moe_block:
            # ggml-cuda (CUDA, HIP) fuses the router and the weighted reduction and keeps their tensors alive for
            # it; ggml-rpc and the CPU backend do not (no graph_optimize)
            fused = c.s["backend"] in GGML_CUDA_BACKENDS and not _is_rpc(c.gpus[d.index])
            kw["moe_block"] = c.moe_block + (fused,)
        comp = _graph_compute(*args, **kw)
        if d.expert_copy_max:
            # the experts copied over for a batched prompt: a moment of the layer of its own (EXPERT_COPY_PHASE)
            d.expert_copy_bytes = int(_graph_compute(*args, copy_bytes=d.expert_copy_max, **kw) - comp)
            comp += d.expert_copy_bytes
        if d.index == sh.out_dev:
            comp += 4 * n_outputs * c.n_vocab + prof["logits_ubatch_bytes"] * ub * c.n_vocab
        comp += EXTRACT_EMBD_BYTES * c.n_embd * ub * extract_on.get(d.index, 0)
        d.compute_bytes += int(comp)


def _target_host(c, sh):
    """The host's terms of the target: the token embedding (src/llama-model.cpp load_tensors keeps the input layer
    on the host), the process's CPU compute buffer (_host_compute: the input embeddings, the split inputs, the
    masks it builds) and one row of f32 logits per sequence (llama-context.cpp output_reserve(n_seq_max))."""
    m, prof = c.model, c.prof
    kinds_all = set(L["kind"] for L in c.layers[:c.n_layer])
    return {"weights_bytes": int(m.get("token_embd_bytes") or 0), "draft_weights_bytes": 0,
            "compute_bytes": int(_host_compute(prof, sh.fa, sh.ub, sh.copies, c.n_embd,
                                               (sh.n_ctx_seq if "attention" in kinds_all else 0)
                                               + (sh.swa_n if "swa" in kinds_all else 0))),
            # llama-context.cpp output_reserve(n_seq_max): one row of f32 logits per sequence, on the host
            "output_bytes": 4 * sh.n_seq * c.n_vocab,
            "draft_compute_bytes": 0, "draft_output_bytes": 0, "mmproj_bytes": 0}


def _experts_on_host(devs, host):
    """MoE experts kept on the host (--n-cpu-moe / --cpu-moe, common/arg.cpp tensor overrides): the routed expert
    tensors of those blocks are host weights -- llama.cpp prints them in the CPU model buffer -- and their bytes
    leave the devices (_layer_table). Returns the bytes moved."""
    host_experts = sum(d.host_expert_bytes for d in devs)
    host["weights_bytes"] += host_experts
    return host_experts


def _mapped_gap(c):
    """With experts on the host and the file mapped (load_mode auto/mmap/mmap+mlock), the bytes llama.cpp's one
    CPU_Mapped buffer holds beyond the tensors kept there: llama-model-loader.cpp get_mapping_range maps one range
    per file from the first byte of the CPU's tensors (token_embd, the offloaded blocks' routed experts) to the last
    one's end, so the blocks' other tensors lying between count -- and are resident, every token reads the range
    (measured: RssFile = the range + the libraries; tests/fixtures/llamacpp/b11434-cuda-h200-moe). A pinned load
    (load_mode none/mlock/dio) copies the tensors alone: the sum. Facts without the spans (an older gguf_info): 0."""
    if not c.cpu_moe_blocks or LOAD_MODE_MEMORY[c.s["load_mode"]] not in ("mapped", "locked"):
        return 0
    spans = [c.layers[il].get("expert_span") for il in c.cpu_moe_blocks] + [c.model.get("input_span")]
    if any(sp is None for sp in spans):
        return 0
    held = sum(int(c.layers[il]["expert_bytes"]) for il in c.cpu_moe_blocks) + int(c.model.get("token_embd_bytes") or 0)
    return max(0, max(sp[1] for sp in spans) - min(sp[0] for sp in spans) - held)


def _draft_mtp(c, sh, devs, host):
    """draft-mtp: nextn weights + nextn KV + the MTP graph's compute, on the nextn layer's device (the last one).

    common/speculative.cpp builds the draft context against the target with n_ctx = llama_n_ctx(ctx_tgt): the
    nextn KV holds the target's whole window, in the draft KV types (common/common.h: --spec-draft-type-k/-v,
    f16 unless given). The MTP graph is one block fed two split inputs per token (the target's hidden state and
    the token embedding), on the target's devices: the target's pipeline copies. On an RPC device its FA node is
    handed the target's size (ggml-rpc.cpp ggml_backend_rpc_buffer_type_get_alloc_size)."""
    s, prof = c.s, c.prof
    if not (c.mtp and c.n_layer_all > c.n_layer):
        return
    ub, fa = sh.ub, sh.fa
    for il in range(c.n_layer, c.n_layer_all):
        L = c.layers[il]
        d = devs[sh.slots[il]]
        kvb = _kv_row(L, s, draft=True) * sh.n_ctx_seq * sh.n_stream
        d.draft_bytes += int(L["tensor_bytes"]) + kvb
        dd = d.detail()
        dd["weights_bytes"] += int(L["tensor_bytes"])
        dd["kv_bytes"] += kvb
    d = devs[sh.slots[c.n_layer_all - 1]]
    d.runs_mtp = True
    n_out_mtp = min(ub, sh.n_seq)
    # the MTP graph is one block on the nextn device, fed two split inputs per token (the target's hidden
    # state and the token embedding), on the target model's devices: the target's pipeline copies.
    # A profile may size that block apart from the target's layers (mtp_* keys: the cuda one does).
    mprof = prof
    if prof.get("mtp_act_embd_bytes") is not None:
        mprof = dict(prof, act_embd_bytes=prof["mtp_act_embd_bytes"], act_ff_bytes=prof["mtp_act_ff_bytes"],
                     split_embd_bytes=prof["mtp_split_embd_bytes"],
                     fa_beside_embd_bytes=prof["mtp_fa_beside_embd_bytes"], fa_beside_q_bytes=0.0,
                     fa_beside_gate_bytes=0.0)
    nextn = c.layers[c.n_layer_all - 1]
    mtp_fa = _fa_kv_f16(nextn, s, sh.n_ctx_seq * sh.n_stream, draft=True)
    if _is_rpc(c.gpus[d.index]):
        # ggml-rpc caches get_alloc_size by the output tensor's shape and op params, not its sources
        # (ggml-rpc.cpp ggml_backend_rpc_buffer_type_get_alloc_size): the nextn FA node has the target's
        # shape, so on an RPC device it is handed the target's FA size, f16 K/V copies included
        mtp_fa = max(mtp_fa, d.fa_kv_f16)
    comp = (_graph_compute(mprof, fa, ub, sh.copies, c.n_embd, c.n_ff, sh.n_head, sh.n_ctx_seq, 0, first=False,
                           n_inputs=2, base_key="draft_compute_base_bytes", gate_width=sh.gate_width,
                           fa_kv_f16=mtp_fa, q_width=sh.q_width)
            + 4 * n_out_mtp * c.n_vocab + prof["logits_ubatch_bytes"] * ub * c.n_vocab)
    d.draft_bytes += int(comp)
    host["draft_compute_bytes"] += int(prof["mtp_host_share"] * _host_compute(prof, fa, ub, sh.copies, c.n_embd, 0)
                                       + _host_mask(prof, fa, ub, sh.copies, sh.n_ctx_seq))
    host["draft_output_bytes"] += 4 * sh.n_seq * c.n_vocab
    d.detail()["compute_bytes"] += int(comp)


def _model_drafter(c, sh, devs, host):
    """A drafter model (draft-simple, draft-dflash, draft-dspark): its layers and KV (_drafter_layers), then its
    compute on every device it touches, and its host terms.

    A block drafter (src/models/dflash.cpp) sends every ubatch token through the lm_head -- its own head, else
    the target's output device (ctx_other) -- so that device holds full-ubatch logits at the graph's end
    (_block_draft_end, BLOCK_DRAFT_*); a draft-simple drafter pays n_outputs x n_vocab x 4 of logits on its
    output device. --spec-draft-device pins the drafter to one device: no pipeline copies for its context
    (llama-context.cpp). Returns the drafter's host weights (its token embedding)."""
    s, prof = c.s, c.prof
    if not (c.drafter is not None and c.model_draft):
        return 0
    dm = c.drafter
    ub, fa, n_ctx_seq, n_seq = sh.ub, sh.fa, sh.n_ctx_seq, sh.n_seq
    dslots = _draft_placement(c, sh.split)
    d_swa = int(dm.get("sliding_window") or 0)
    d_swa_n = swa_cells(n_ctx_seq, d_swa, n_seq, s["ubatch_size"], s["kv_unified"]) if d_swa else 0
    touched, d_fa = _drafter_layers(c, sh, devs, dslots, d_swa_n)
    od_i = dslots[-1]
    d_embd = int(dm.get("embedding_length") or c.n_embd)
    d_ff = int(dm.get("feed_forward_length") or c.n_ff)
    host_draft = int(dm.get("token_embd_bytes") or 0)
    block = any(t in BLOCK_DRAFT_TYPES for t in c.model_draft)
    per_seq = (s["spec_draft_n_max"] + 1) if block else 1
    n_out_d = min(ub, n_seq * per_seq)
    # --spec-draft-device pins the drafter to one device: no pipeline copies for its context
    d_copies = pipeline_copies(1 if c.draft_dev is not None else c.n_dev) if prof["pipeline_copies"] else 1
    d_head = int(dm.get("head_count") or sh.n_head)
    head_dev, end = None, 0
    if block:
        # the lm_head's device: the drafter's own head, else the target's output device (ctx_other)
        head_dev = od_i if (dm.get("drafter") or {}).get("has_output") else sh.out_dev
        end = _block_draft_end(dm, ub, c.n_vocab, d_embd, d_copies)
        touched.setdefault(head_dev, set()).add("head")
        if _block_draft_kind(dm) == "dflash2":
            devs[head_dev].dflash2_head = True
        devs[head_dev].detail()
    d_kinds = set()
    for di, what in touched.items():
        d_kinds |= what
        at_end = end if di == head_dev else 0
        if "layer" in what:
            lprof = prof
            if block:
                lprof = dict(prof, act_embd_bytes=prof["act_embd_bytes"]
                             + BLOCK_DRAFT_LAYER_EMBD[_block_draft_kind(dm)])
            comp = _graph_compute(lprof, fa, ub, d_copies, d_embd, d_ff, d_head,
                                  n_ctx_seq if "attn" in what else 0, d_swa_n if "swa" in what else 0,
                                  first=di == dslots[0] and not block,
                                  base_key="draft_block_base_bytes" if block else "draft_compute_base_bytes",
                                  fa_kv_f16=d_fa.get(di, 0), q_width=d_head * int(dm.get("key_length") or 0),
                                  end_bytes=at_end)
        else:
            # a device holding only the drafter's output head runs only the head: its logits (measured:
            # tests/fixtures/llamacpp/b11434-cuda-h200/dense_g-c65536-np1-ub2048-f16-simple-split-ts31)
            comp = at_end
        if not block and ("out" in what or di == od_i):
            comp += 4 * n_out_d * c.n_vocab + prof["logits_ubatch_bytes"] * ub * c.n_vocab
        devs[di].draft_bytes += int(comp)
        devs[di].detail()["compute_bytes"] += int(comp)
    host["draft_weights_bytes"] += host_draft
    host["draft_compute_bytes"] += int(_host_compute(prof, fa, ub, d_copies, d_embd,
                                                     (n_ctx_seq if "attn" in d_kinds else 0)
                                                     + (d_swa_n if "swa" in d_kinds else 0)))
    host["draft_output_bytes"] += 4 * n_seq * c.n_vocab
    return host_draft


def _drafter_layers(c, sh, devs, dslots, d_swa_n):
    """A drafter model's layers, their KV and its output head on the devices dslots gives them (_draft_placement).

    common/speculative.cpp sizes the draft context from the target's n_ctx (llama_n_ctx(ctx_tgt)), no flag caps
    it: a drafter without a sliding window caches the whole window; a sliding-window drafter holds
    llama-kv-cache-iswa.cpp's swa_cells. The draft KV types are --spec-draft-type-k/-v (common/common.h). Returns
    ({device: the kinds it runs: layer, attn, swa, out}, {device: the widest f16 K/V copy of a CUDA FA node})."""
    s, dm = c.s, c.drafter
    touched, d_fa = {}, {}
    for il, L in enumerate(dm["layers"]):
        di = dslots[il]
        dd = devs[di].detail()
        dd["weights_bytes"] += int(L["tensor_bytes"])
        kvb = 0
        if L["kind"] == "attention":
            kvb = _kv_row(L, s, draft=True) * sh.n_ctx_seq * sh.n_stream
            touched.setdefault(di, set()).add("attn")
        elif L["kind"] == "swa":
            kvb = _kv_row(L, s, draft=True) * d_swa_n * sh.n_stream
            touched.setdefault(di, set()).add("swa")
        touched.setdefault(di, set()).add("layer")
        devs[di].runs_drafter = True
        if L["kind"] in ("attention", "swa"):
            # the widest f16 K/V copy a CUDA FA node of the drafter reserves (quantized draft KV types)
            cells = (sh.n_ctx_seq if L["kind"] == "attention" else d_swa_n) * sh.n_stream
            d_fa[di] = max(d_fa.get(di, 0), _fa_kv_f16(L, s, cells, draft=True))
        dd["kv_bytes"] += kvb
        devs[di].draft_bytes += int(L["tensor_bytes"]) + kvb
    od_i = dslots[-1]
    devs[od_i].draft_bytes += int(dm.get("output_bytes") or 0)
    devs[od_i].detail()["weights_bytes"] += int(dm.get("output_bytes") or 0)
    touched.setdefault(od_i, set()).add("out")
    return touched, d_fa


def _mmproj_charge(c, devs, host):
    """The projector (tools/mtmd clip) at the peak a request can reach (_mmproj_terms): weights + the warm-up
    reserve + what the largest admitted image adds, on its device (--mmproj-device, the first device by default,
    common/arg.cpp), or in host memory with --no-mmproj-offload; of it, mmproj_peak_bytes is what only a request
    adds."""
    if c.mm is None:
        return
    mm_total = c.mm["weights_bytes"] + c.mm["reserve_bytes"] + c.mm["request_bytes"]
    if c.mm["offload"]:
        devs[c.mmproj_dev].mmproj_bytes += mm_total
        devs[c.mmproj_dev].mmproj_peak_bytes += c.mm["request_bytes"]
    else:
        host["mmproj_bytes"] = mm_total


def _overhead(c, sh, devs):
    """Runtime memory beyond the buffers llama.cpp prints, on every device the process uses: the profile's
    device_overhead_bytes (a ggml-rpc-server's own, RPC_SERVER_OVERHEAD_BYTES, on an RPC worker), plus the
    profile's extra on a device running a drafter model's layers, an MTP head, a DFlash2 head, or MoE experts
    (rocBLAS/cuBLAS pool growth after mul_mat_id; moe_overhead_nofa_bytes without flash attention)."""
    prof = c.prof
    for d, g in zip(devs, c.gpus):
        base = RPC_SERVER_OVERHEAD_BYTES[g["rpc_backend"]] if g.get("rpc_backend") in RPC_SERVER_OVERHEAD_BYTES \
            else prof["device_overhead_bytes"]
        d.overhead_bytes = int(base
                               + (prof.get("draft_overhead_bytes", 0) if d.runs_drafter else 0)
                               + (prof.get("mtp_overhead_bytes", 0) if d.runs_mtp else 0)
                               + (prof.get("dflash2_head_overhead_bytes", 0) if d.dflash2_head else 0)
                               + (prof.get("moe_overhead_bytes" if sh.fa else "moe_overhead_nofa_bytes", 0)
                                  if d.moe_used else 0))


def _host_experts(c, nbytes, gap=0):
    """Where the offloaded experts live on the host: the blocks, their bytes, and how --load-mode holds them;
    mapped_gap_bytes: the file between them that a mapped load holds beside them (_mapped_gap)."""
    s = c.s
    if not c.n_used:
        return None
    memory = LOAD_MODE_MEMORY[s["load_mode"]]
    pinned = memory == "pinned"
    blocks = sorted(c.cpu_moe_blocks)
    return {"blocks": len(blocks), "block_range": [blocks[0], blocks[-1]] if blocks else None, "bytes": nbytes,
            "load_mode": s["load_mode"], "memory": memory, "pinned_bytes": nbytes if pinned else 0,
            "mapped_gap_bytes": gap,
            "n_cpu_moe": s["n_cpu_moe"], "cpu_moe": s["cpu_moe"]}


def _passes(ev, floor):
    return all(r["free_bytes"] >= floor for r in ev["devices"])


def _fits_key(ev, floor):
    """Sort key: splits that keep the floor, by smallest gap; failing ones by the least-starved card."""
    if _passes(ev, floor):
        return (0, ev["gap_bytes"], -ev["min_free_bytes"])
    return (1, -ev["min_free_bytes"], ev["gap_bytes"])


def _search_key(ev, floor):
    """_fits_key, ties to the lowest split: the split an enumeration in ascending order would meet first."""
    return (_fits_key(ev, floor), list(ev["split"]))


def _bounds_to_split(bounds, n):
    """Integer -ts over n blocks from device block boundaries (device j holds blocks bounds[j-1]..bounds[j]-1;
    the first device one slot more than its share, the output slot on the last: see assign_slots)."""
    edges = [0] + list(bounds) + [n + 1]
    split = [edges[j + 1] - edges[j] for j in range(len(edges) - 1)]
    split[0] -= 1
    return split


def _balance_split(c, n_ctx, probe):
    """The split at which every device would be left the same free bytes, read off the cumulative per-block
    bytes: each device's bytes that do not move with its blocks (compute, overhead, output, drafter, MTP head)
    are taken from an evaluated probe split, the rest is cut where the running sum of block bytes reaches the
    devices' running budgets. O(devices + blocks)."""
    n, k = c.n_layer_all, c.n_dev
    lt = _layer_table(c, probe["n_ctx_seq"], 1 if c.s["kv_unified"] else c.s["parallel"], _probe_swa(c, probe))
    sums = lt["sums"]
    cum = [sums["weights_bytes"][i] + sums["kv_bytes"][i] + sums["recurrent_bytes"][i] for i in range(n + 1)]
    avail = []
    lo = 0
    for r, g in zip(probe["devices"], c.gpus):
        hi = lo + probe["slots"].count(r["index"])
        b = min(hi, n)
        moving = cum[b] - cum[lo]
        avail.append(g["vram_total_bytes"] - g["vram_reserved_bytes"] - (r["total_bytes"] - moving))
        lo = hi
    level = (sum(avail) - cum[n]) / float(k)        # the free bytes every device would keep
    bounds, run, at = [], 0.0, 0
    for j in range(k - 1):
        run += avail[j] - level
        # the boundary whose running block bytes come closest to the running budget
        while at < n and cum[at + 1] <= run:
            at += 1
        b = at + 1 if at < n and (run - cum[at]) > (cum[at + 1] - run) else at
        lowest = (bounds[-1] + 1) if bounds else 2            # the first device holds >= 2 slots (-ts >= 1)
        highest = n - (k - 2 - j)                            # leave every later device a slot
        bounds.append(min(max(b, lowest), highest))
    return _bounds_to_split(bounds, n)


def _probe_swa(c, ev):
    n_swa = int(c.model.get("sliding_window") or 0)
    return swa_cells(ev["n_ctx_seq"], n_swa, c.s["parallel"], c.s["ubatch_size"], c.s["kv_unified"]) if n_swa else 0


def _even_split(n, k):
    base = [n // k] * k
    for i in range(n - sum(base)):
        base[i] += 1
    return base


def _search(c, n_ctx, floor, wide=True, any_pass=False):
    """(best evaluation, all evaluations) for one context.

    One device: its whole stack. Two: every split (n - 1 of them; each evaluation is O(devices) over the
    context's prefix sums). More: the balance point from the cumulative per-block bytes (_balance_split,
    twice, the second time with the fixed bytes measured at the first), then a steepest descent over moves
    of one block between any two devices, to the lowest split among equally good ones -- devices x blocks,
    not the (blocks choose devices) enumeration this replaced (issue 17: 3 x 128 layers took a minute).
    ``wide`` then also tries moves of 2..WIDE_STEPS blocks at the optimum. ``any_pass`` (the context search,
    which asks only whether some split keeps the floor) stops at the first split that keeps it, with no wide moves.
    """
    n, k = c.n_layer_all, c.n_dev
    if k == 1:
        ev = _evaluate(c, [n], n_ctx)
        return ev, [ev]
    if k == 2:
        evs = []
        for a in range(1, n):
            evs.append(_evaluate(c, [a, n - a], n_ctx))
            if any_pass and _passes(evs[-1], floor):
                return evs[-1], evs
        if not evs:
            evs = [_evaluate(c, [1, 1], n_ctx)]
        return min(evs, key=lambda e: _fits_key(e, floor)), evs
    ev_of = _memo_evaluate(c, n_ctx)
    seen = ev_of.seen
    start = _even_split(n, k)
    if n >= k:
        for dummy in range(2):
            start = _balance_split(c, n_ctx, ev_of(start))
    best = ev_of(start)
    if any_pass and _passes(best, floor):
        return best, list(seen.values())
    if n >= k and not _passes(best, floor):
        # the balance point starves a device: start from the greedy split instead when it keeps the floor
        # (then the descent, which never trades a passing split for a failing one, ends on one that does)
        greedy = _greedy_split(c, n_ctx, floor, ev_of)
        if greedy is not None and _search_key(greedy, floor) < _search_key(best, floor):
            best = greedy
    if any_pass and _passes(best, floor):
        return best, list(seen.values())
    while True:
        best = _descend(best, k, floor, ev_of, _one_block_moves, any_pass)
        if not wide or any_pass:
            break
        # a device between two others can sit on a run of blocks whose kinds alternate (hybrid: three
        # recurrent to one attention): moving it one block at a time worsens before it improves. Moving up
        # to WIDE_STEPS blocks at once escapes that; then descend again.
        nxt = _descend(best, k, floor, ev_of, _wide_moves)
        if nxt is best:
            break
        best = nxt
    return best, list(seen.values())


WIDE_STEPS = 4


def _memo_evaluate(c, n_ctx):
    """_evaluate at one context, once per split; .seen holds every evaluation."""
    seen = {}

    def ev_of(split):
        t = tuple(split)
        if t not in seen:
            seen[t] = _evaluate(c, list(split), n_ctx)
        return seen[t]
    ev_of.seen = seen
    return ev_of


def _greedy_split(c, n_ctx, floor, ev_of):
    """A split that keeps every device at or above the floor, or None when this one does not.

    A device's bytes depend only on the run of blocks it holds (its drafter share and MTP head follow the same
    boundaries) and grow with it, so each device in turn takes the most blocks it can hold above the floor (a
    bisection per device: devices x log(blocks) evaluations). Not exhaustive -- a device pushed onto a heavy
    block by its predecessor's greed fails where a leaner predecessor would have left it a light one -- but a
    second start far from the balance point when the balance point fails."""
    n, k = c.n_layer_all, c.n_dev
    bounds = []
    for j in range(k - 1):
        lo = (bounds[-1] + 1) if bounds else 2
        hi = n - (k - 2 - j)
        if lo > hi or _free_with_bound(n, k, bounds, lo, ev_of) < floor:
            return None
        while lo < hi:              # the largest bound that keeps device j at the floor
            mid = (lo + hi + 1) // 2
            if _free_with_bound(n, k, bounds, mid, ev_of) >= floor:
                lo = mid
            else:
                hi = mid - 1
        bounds.append(lo)
    e = ev_of(_bounds_to_split(bounds, n))
    return e if _passes(e, floor) else None


def _free_with_bound(n, k, bounds, b, ev_of):
    """Free bytes of device len(bounds) when it ends at block b (the later devices' boundaries do not change
    its bytes: one block each, the rest on the last)."""
    j = len(bounds)
    tail = [b + i for i in range(1, k - 1 - j)]
    return ev_of(_bounds_to_split(bounds + [b] + tail, n))["devices"][j]["free_bytes"]


def _one_block_moves(split, k):
    for i in range(k):
        if split[i] <= 1:
            continue
        for j in range(k):
            if i != j:
                cand = list(split)
                cand[i] -= 1
                cand[j] += 1
                yield cand


def _wide_moves(split, k):
    for i in range(k):
        for j in range(k):
            if i == j:
                continue
            for m in range(2, WIDE_STEPS + 1):
                if split[i] - m < 1:
                    break
                cand = list(split)
                cand[i] -= m
                cand[j] += m
                yield cand


def _descend(best, k, floor, ev_of, moves, any_pass=False):
    """Steepest descent on _search_key over the given moves; returns the local optimum (any_pass: the first
    split met that keeps the floor)."""
    while True:
        cur = best
        for cand in moves(cur["split"], k):
            e = ev_of(cand)
            if any_pass and _passes(e, floor):
                return e
            if _search_key(e, floor) < _search_key(best, floor):
                best = e
        if best is cur:
            return best


def _apply_lean(c, best, evs, n_ctx, floor, warnings, errors):
    k = c.s["lean_layers"]
    if not k:
        return best
    widths = [(g.get("narrowest_link_width"), g.get("narrowest_link_gbps")) for g in c.gpus]
    if c.n_dev < 2:
        errors.append("serve.lean_layers %d needs two or more GPUs" % k)
        return best
    if any(w is None and b is None for w, b in widths):
        errors.append("serve.lean_layers %d needs each GPU's narrowest_link_width (pass gpu_facts' result as gpus); "
                      "missing for %s" % (k, ", ".join(g["name"] for g, (w, b) in zip(c.gpus, widths) if w is None and b is None)))
        return best
    keyed = [((w if w is not None else 1e9), (b if b is not None else 1e9)) for w, b in widths]
    narrow = min(range(c.n_dev), key=lambda i: keyed[i])
    if all(x == keyed[narrow] for x in keyed):
        errors.append("serve.lean_layers %d: every card has the same link (x%s), so there is no narrow card to lean "
                      "away from; drop lean_layers" % (k, widths[0][0]))
        return best
    split = list(best["split"])
    neighbours = [j for j in (narrow - 1, narrow + 1) if 0 <= j < c.n_dev]
    to = max(neighbours, key=lambda j: best["devices"][j]["free_bytes"])
    moved = 0
    cur = best
    for dummy in range(k):
        if split[narrow] <= 1:
            break
        split[narrow] -= 1
        split[to] += 1
        ev = _evaluate(c, split, n_ctx)
        if not _passes(ev, floor):
            warnings.append("lean: moving layer %d of %d off %s (narrowest link x%s) would leave a card under the "
                            "floor; stopped at %s" % (moved + 1, k, c.gpus[narrow]["name"], widths[narrow][0],
                                                      ":".join(_fmt_ts(x) for x in cur["split"])))
            break
        cur = ev
        moved += 1
        evs.append(ev)
    if moved:
        warnings.append("lean: moved %d layer(s) off %s (narrowest link x%s, %s Gb/s) onto %s beyond the balance point "
                        "%s -> %s, as serve.lean_layers asks" % (moved, c.gpus[narrow]["name"], widths[narrow][0],
                                                                 widths[narrow][1], c.gpus[to]["name"],
                                                                 ":".join(_fmt_ts(x) for x in best["split"]),
                                                                 ":".join(_fmt_ts(x) for x in cur["split"])))
    return cur


def _fmt_ts(x):
    return str(int(x)) if float(x).is_integer() else ("%g" % x)


def _gib(b):
    return "%.2f" % (b / float(GIB))


def _table(c, chosen, evs, floor):
    names = [g["name"] for g in c.gpus]  # llama.cpp's device names, as the capacity table prints them
    head = ["-ts"] + ["%s free" % n for n in names] + ["gap", "fits"]
    order = sorted(evs, key=lambda e: [-x for x in e["split"]])
    uniq, seen = [], set()
    for e in order:
        t = tuple(e["split"])
        if t not in seen:
            seen.add(t)
            uniq.append(e)
    if chosen is not None and tuple(chosen["split"]) in seen:
        idx = [tuple(e["split"]) for e in uniq].index(tuple(chosen["split"]))
        lo, hi = max(0, idx - 3), min(len(uniq), idx + 4)
        uniq = uniq[lo:hi]
    else:
        uniq = uniq[:7]
    lines = [" | ".join(head)]
    for e in uniq:
        mark = " <- chosen" if chosen is not None and tuple(e["split"]) == tuple(chosen["split"]) else ""
        cells = [",".join(_fmt_ts(x) for x in e["split"])]
        cells += ["%s GiB" % _gib(r["free_bytes"]) for r in e["devices"]]
        cells += ["%s" % _gib(e["gap_bytes"]), ("yes" if _passes(e, floor) else "no") + mark]
        lines.append(" | ".join(cells))
    if chosen is not None and any(g.get("host") for g in c.gpus):
        # across hosts: which host holds which blocks at the chosen split
        for r, g in zip(chosen["devices"], c.gpus):
            where = "this host"
            if g.get("host"):
                where = "%s (%s, %s ggml-rpc-server)" % (g["host"], g.get("endpoint") or "?", g.get("rpc_backend") or "?")
            blocks = "blocks %d-%d" % tuple(r["layer_range"]) if r["layer_range"] else "no blocks"
            if r["holds_output"]:
                blocks += " + output"
            lines.append("%s on %s: %s, %s GiB free" % (names[r["index"]], where, blocks, _gib(r["free_bytes"])))
    return "\n".join(lines)


def _state_law(c, n_ctx_seq):
    """Bytes one slot's saved prompt state takes (server_prompt_cache): KV + draft KV + recurrent state."""
    s, m = c.s, c.model
    per_tok = 0
    swa_fixed = 0
    n_swa = int(m.get("sliding_window") or 0)
    for L in c.layers[:c.n_layer]:
        if L["kind"] == "attention":
            per_tok += _kv_row(L, s)
        elif L["kind"] == "swa":
            swa_fixed += _kv_row(L, s) * min(n_ctx_seq, swa_cells(n_ctx_seq, n_swa, 1, s["ubatch_size"], False))
    draft_tok = 0
    if c.mtp:
        for L in c.layers[c.n_layer:]:
            draft_tok += _kv_row(L, s, draft=True)
    if c.drafter is not None and c.model_draft:
        d_swa = int(c.drafter.get("sliding_window") or 0)
        for L in c.drafter["layers"]:
            if L["kind"] == "attention":
                draft_tok += _kv_row(L, s, draft=True)
            elif L["kind"] == "swa":
                swa_fixed += _kv_row(L, s, draft=True) * min(n_ctx_seq, swa_cells(n_ctx_seq, d_swa, 1, s["ubatch_size"], False))
    rs = int((m.get("recurrent_state") or {}).get("bytes_per_layer_per_seq") or 0)
    rs_total = rs * sum(1 for L in c.layers if L["kind"] == "recurrent")
    slot = (per_tok + draft_tok) * n_ctx_seq + swa_fixed + rs_total
    return {"kv_bytes_per_token": per_tok, "draft_kv_bytes_per_token": draft_tok,
            "bytes_per_token": per_tok + draft_tok, "swa_bytes_per_slot": swa_fixed,
            "recurrent_bytes_per_slot": rs_total, "slot_tokens": n_ctx_seq, "slot_state_bytes": slot}


def _cache_ram(c, n_ctx_seq, host_ram_bytes, errors, warnings, experts_bytes=0):
    """The prompt cache's law and its budget: at most half of the host RAM the experts kept there leave."""
    law = _state_law(c, n_ctx_seq)
    slot = law["slot_state_bytes"]
    want = c.s["cache_ram_mib"]
    res = dict(law)
    res["auto_mib"] = int(math.ceil(slot / float(GIB))) * 1024
    explain = ("one full slot of %d tokens x %d B/token (%d KV + %d draft KV) + %.1f MiB recurrent state + %.1f MiB "
               "window = %.2f GiB" % (n_ctx_seq, law["bytes_per_token"], law["kv_bytes_per_token"],
                                      law["draft_kv_bytes_per_token"], law["recurrent_bytes_per_slot"] / float(MIB),
                                      law["swa_bytes_per_slot"] / float(MIB), slot / float(GIB)))
    if want is None:
        res["mib"] = None
        return res
    mib = res["auto_mib"] if want == "auto" else want
    res["mib"] = mib
    if mib == 0:
        warnings.append("serve.cache_ram_mib 0 disables the prompt cache: no slot state survives a slot reassignment")
        return res
    if mib == -1:
        errors.append("serve.cache_ram_mib -1 (unlimited) is refused: the prompt cache must be bounded under half the "
                      "host RAM; %s, so cache_ram_mib: %d (auto) is the smallest that stores it" % (explain, res["auto_mib"]))
        return res
    if mib * MIB < slot:
        errors.append("serve.cache_ram_mib %d cannot store one full slot: %s > %d MiB (%.2f GiB); llama.cpp would refuse "
                      "every full-length state ('prompt state size ... exceeds cache size limit'); use at least %d "
                      "(cache_ram_mib: auto)" % (mib, explain, mib, mib * MIB / float(GIB), res["auto_mib"]))
    if host_ram_bytes is None:
        warnings.append("host_ram_bytes not given: cache_ram_mib %d is not checked against half the host RAM" % mib)
    elif mib * MIB > (host_ram_bytes - experts_bytes) / 2.0:
        left = host_ram_bytes - experts_bytes
        beside = (" beside the %.2f GiB of experts kept there (serve.n_cpu_moe / serve.cpu_moe)" % (experts_bytes / float(GIB))
                  if experts_bytes else "")
        errors.append("serve.cache_ram_mib %d (%.2f GiB) is more than half the host RAM%s (%.2f GiB of %.2f GiB); the "
                      "prompt cache may not claim more than %d MiB on this host"
                      % (mib, mib * MIB / float(GIB), beside, left / 2.0 / GIB, left / float(GIB), int(max(0, left) / 2 // MIB)))
    return res


def _moe_checks(c, best, cache, host_ram_bytes, errors, warnings):
    """Experts on the host: a setting with nothing to move is said; the host must hold them under its RAM floor."""
    s = c.s
    asked = s["cpu_moe"] or s["n_cpu_moe"]
    if asked and not c.n_used:
        warnings.append("serve.%s has no effect: model %s has no routed experts (a dense model); drop it"
                        % ("cpu_moe" if s["cpu_moe"] else "n_cpu_moe", c.model.get("architecture")))
        return
    if s["n_cpu_moe"] > c.n_layer_all and not s["cpu_moe"]:
        warnings.append("serve.n_cpu_moe %d is more than the model's %d blocks: every block's experts stay on the host "
                        "(serve.cpu_moe says so)" % (s["n_cpu_moe"], c.n_layer_all))
    hx = best.get("host_experts") or {}
    if not hx.get("bytes"):
        return
    host_total = best["host"]["total_bytes"]
    cache_bytes = max(0, cache.get("mib") or 0) * MIB
    if host_ram_bytes is None:
        warnings.append("host_ram_bytes not given: the %s GiB of experts on the host (%s) are not checked against its "
                        "RAM" % (_gib(hx["bytes"]), hx["memory"]))
        return
    floor = max(HOST_RAM_FLOOR_BYTES, int(HOST_RAM_FLOOR_SHARE * host_ram_bytes))
    if host_total + cache_bytes > host_ram_bytes - floor:
        gap = hx.get("mapped_gap_bytes") or 0
        errors.append("host RAM: %s GiB of experts on the host (%d blocks, %s%s)%s + %s GiB of the process's host buffers "
                      "+ %s GiB of prompt cache (serve.cache_ram_mib) leave less than the %s GiB the system keeps of "
                      "%s GiB; lower serve.n_cpu_moe (more experts on the GPU), lower serve.cache_ram_mib, or plan "
                      "for a host with more RAM"
                      % (_gib(hx["bytes"]), hx["blocks"], hx["memory"],
                         ", not reclaimable" if hx["memory"] in ("pinned", "locked") else "",
                         (" + %s GiB of the file between them (one mapped range)" % _gib(gap)) if gap else "",
                         _gib(host_total - hx["bytes"] - gap), _gib(cache_bytes), _gib(floor), _gib(host_ram_bytes)))


def _image_side(g, tokens):
    """The side in pixels of the largest square image of at most this many tokens."""
    return int(math.sqrt(max(0, tokens))) * g["patch_size"] * g["merge"]


def _mmproj_result(c, best, floor, errors, warnings):
    """The projector's terms in the result, the largest image that fits its device, and what to say about them."""
    s, mm = c.s, c.mm
    image_set = s["image_max_tokens"] or s["image_min_tokens"]
    if mm is None:
        if image_set or not s["mmproj_offload"]:
            warnings.append("serve.%s has no effect: no projector (mmproj) is planned"
                            % ("image_max_tokens" if s["image_max_tokens"] else
                               "image_min_tokens" if s["image_min_tokens"] else "mmproj_offload"))
        return None
    g = mm["geometry"]
    peak = mm["weights_bytes"] + mm["reserve_bytes"] + mm["request_bytes"]
    out = {"offload": mm["offload"], "projector_type": mm["projector_type"], "modelled": mm["modelled"],
           "device": c.gpus[c.mmproj_dev]["name"] if mm["offload"] else "CPU",
           "weights_bytes": mm["weights_bytes"], "reserve_bytes": mm["reserve_bytes"],
           "load_bytes": mm["weights_bytes"] + mm["reserve_bytes"], "first_use_bytes": mm["first_use_bytes"],
           "request_bytes": mm["request_bytes"], "peak_bytes": peak,
           "image_min_tokens": None, "image_max_tokens": None, "warmup_tokens": None, "max_image_px": None,
           "largest_image_tokens": None, "largest_image_px": None}
    if not mm["offload"] and s["mmproj_device"] is not None:
        warnings.append("serve.mmproj_device %s is not used: serve.mmproj_offload false keeps the projector on the CPU"
                        % s["mmproj_device"])
    if not mm["modelled"]:
        warnings.append("projector type %s: its image tokens are not modelled (fit_plan knows %s); planned at the "
                        "profile's %.0f MiB of compute + %.0f MiB first-use context, whatever serve.image_max_tokens says"
                        % (mm["projector_type"], ", ".join(sorted(MMPROJ_TYPES)), mm["reserve_bytes"] / float(MIB),
                           mm["first_use_bytes"] / float(MIB)))
        return out
    out.update(image_min_tokens=g["image_min_tokens"], image_max_tokens=g["image_max_tokens"],
               warmup_tokens=g["warmup_tokens"], max_image_px=_image_side(g, g["image_max_tokens"]),
               patch_size=g["patch_size"], spatial_merge_size=g["merge"])
    if g["image_min_tokens"] > g["image_max_tokens"]:
        errors.append("serve.image_min_tokens %d is more than serve.image_max_tokens %d: every image would be scaled "
                      "past the maximum the projector was planned for; lower image_min_tokens"
                      % (g["image_min_tokens"], g["image_max_tokens"]))
    if not mm["offload"]:
        out["largest_image_tokens"], out["largest_image_px"] = g["image_max_tokens"], out["max_image_px"]
        warnings.append("serve.mmproj_offload false: the projector runs on the CPU - %s GiB of host memory at the "
                        "largest image (%d tokens, %dx%d px), and b11434's encode there is slow (%s); keep it on a GPU "
                        "(mmproj_offload true) unless images are rare and small"
                        % (_gib(peak), g["image_max_tokens"], out["max_image_px"], out["max_image_px"], MMPROJ_CPU_ENCODE))
        return out
    dev = best["devices"][c.mmproj_dev]
    prof, first = mm["prof"], mm["first_use_bytes"]
    room = dev["free_bytes"] - floor + mm["request_bytes"]      # what any image may add above the load

    def fits(tokens):
        return _mmproj_request(prof, g, tokens, first) <= room
    lo, hi = 0, g["image_max_tokens"]
    if fits(hi):
        lo = hi
    else:
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
    out["largest_image_tokens"], out["largest_image_px"] = lo, _image_side(g, lo)
    if lo < g["image_max_tokens"] and lo < g["image_min_tokens"]:
        warnings.append("serve.image_max_tokens %d: no image fits %s under the %.2f GiB floor - the first image alone "
                        "adds %s GiB at request time (the projector's own runtime context, %s GiB, and its graph), "
                        "beyond what the load shows; move the projector (mmproj_device) or give the card fewer "
                        "layers/context" % (g["image_max_tokens"], dev["name"], floor / float(GIB),
                                            _gib(_mmproj_request(prof, g, g["image_min_tokens"], first)), _gib(first)))
    elif lo < g["image_max_tokens"]:
        beyond = _mmproj_request(prof, g, g["image_max_tokens"], first) - _mmproj_request(prof, g, lo, first)
        warnings.append("serve.image_max_tokens %d is what fills %s: an image of that many tokens (%dx%d px) adds %s GiB "
                        "at request time (%s GiB past the largest that fits), beyond what the load shows; the largest "
                        "image that keeps the %.2f GiB floor is %d tokens (%dx%d px) - set image_max_tokens %d, move the "
                        "projector (mmproj_device) or give the card fewer layers/context"
                        % (g["image_max_tokens"], dev["name"], out["max_image_px"], out["max_image_px"],
                           _gib(mm["request_bytes"]), _gib(beyond), floor / float(GIB), lo, out["largest_image_px"],
                           out["largest_image_px"], lo))
    return out


def _fa_kernel_warnings(c):
    """KV types with no flash-attention kernel on CUDA/HIP: b11434 runs that attention on the CPU."""
    s = c.s
    if s["backend"] not in GGML_CUDA_BACKENDS or not s["flash_attn"]:
        return []
    fields = ["cache_type_k", "cache_type_v"]
    if c.mtp or (c.drafter is not None and c.model_draft):
        fields += ["cache_type_k_draft", "cache_type_v_draft"]
    bad = [(f, s[f]) for f in fields if s[f] not in FA_KV_TYPES_GPU]
    if not bad:
        return []
    return ["serve.%s: b11434 has no %s flash-attention kernel for %s KV (ggml-cuda/fattn.cu has one for %s): "
            "every attention layer then runs on the CPU, its K and V copied to the host each ubatch - slow, and "
            "host memory the plan does not hold (1.27 GiB more was measured with iq4_nl); use q4_0 (the same 4.5 "
            "bits per value) or q8_0" % (" and serve.".join(f for f, _ in bad), s["backend"].upper(),
                                         "/".join(sorted(set(t for _, t in bad))), ", ".join(FA_KV_TYPES_GPU))]


def _max_ctx(c, split, floor, auto):
    """Largest n_ctx (a multiple of 256 x n_seq_max, so nothing is padded) that passes the floor."""
    n_seq = c.s["parallel"]
    unit = KV_PAD * (1 if c.s["kv_unified"] else n_seq)
    cap_slot = c.s["max_ctx_per_slot"] or int(c.model.get("context_length") or 0) or 1 << 20
    hi = (cap_slot * (1 if c.s["kv_unified"] else n_seq)) // unit

    def ok(k):
        n_ctx = k * unit
        if auto:
            # whether some split keeps the floor is all this asks: no wide moves (the plan's own context has them)
            best = _search(c, n_ctx, floor, wide=False, any_pass=True)[0]
        else:
            best = _evaluate(c, split, n_ctx)
        return _passes(best, floor), best

    good, best = ok(1)
    if not good:
        return None, best
    lo = 1
    good_hi, best_hi = ok(hi)
    if good_hi:
        return hi * unit, best_hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        g, b = ok(mid)
        if g:
            lo, best = mid, b
        else:
            hi = mid
    return lo * unit, best


def plan(gpus, model, serve, drafter=None, mmproj=None, host_ram_bytes=None):
    """Plan one llama-server deployment; see the module docstring and the filter's DOCUMENTATION."""
    check_inputs(gpus=gpus, model=model, serve=serve, drafter=drafter, mmproj=mmproj, host_ram_bytes=host_ram_bytes)
    c = _prepare(gpus, model, serve, drafter, mmproj)
    if host_ram_bytes is not None:
        if not _is_int(host_ram_bytes) or host_ram_bytes <= 0:
            raise FitPlanError("host_ram_bytes must be a positive integer (bytes), got %r" % (host_ram_bytes,))
    s = c.s
    errors, warnings = [], []
    if c.skipped:
        warnings.append("integrated GPU(s) excluded from the split: %s (hide them, e.g. HIP_VISIBLE_DEVICES)"
                        % ", ".join(c.skipped))
    errors.extend(_spec_errors(c))
    floor = s["floor_bytes"]
    auto = s["tensor_split"] == "auto"
    fixed_split = None if auto else s["tensor_split"]
    evs = []
    moe_choice = None
    if auto and s["ctx_size"] == "max" and s["n_cpu_moe_open"]:
        note = _choose_n_cpu_moe(c, floor)
        if note:
            warnings.append(note)
            moe_choice = {"n_cpu_moe": s["n_cpu_moe"], "reason": note}
    if s["ctx_size"] == "max":
        n_ctx_max, best = _max_ctx(c, fixed_split, floor, auto)
        if n_ctx_max is None:
            errors.append("serve.ctx_size max: not even %d tokens per slot fit %s under the %.2f GiB floor; the "
                          "weights alone leave %s GiB -- add a GPU, lower floor_bytes or use a smaller quant"
                          % (KV_PAD, "any split" if auto else "tensor_split %s" % fixed_split, floor / float(GIB),
                             "/".join(_gib(r["free_bytes"]) for r in best["devices"])))
            n_ctx_req = KV_PAD * s["parallel"]
        else:
            n_ctx_req = n_ctx_max
    else:
        n_ctx_req = s["ctx_size"]
    if auto:
        best, evs = _search(c, n_ctx_req, floor)
        if _passes(best, floor):
            best = _apply_lean(c, best, evs, n_ctx_req, floor, warnings, errors)
    else:
        best = _evaluate(c, fixed_split, n_ctx_req)
        evs = [best]
        if c.n_dev == 2 and all(float(x).is_integer() for x in fixed_split):
            a, b = int(fixed_split[0]), int(fixed_split[1])
            for d in (-3, -2, -1, 1, 2, 3):
                if a + d >= 1 and b - d >= 1:
                    evs.append(_evaluate(c, [a + d, b - d], n_ctx_req))
        if s["lean_layers"]:
            errors.append("serve.lean_layers needs tensor_split: auto (it leans from the balance point)")
    fits = _passes(best, floor)
    if not fits and s["ctx_size"] != "max":
        below = ["%s %s GiB free" % (r["name"], _gib(r["free_bytes"])) for r in best["devices"] if r["free_bytes"] < floor]
        n_max, best_max = _max_ctx(c, fixed_split, floor, auto)
        hint = ("the largest ctx_size that fits is %d (%d per slot)" % (n_max, n_max // (1 if s["kv_unified"] else s["parallel"]))
                if n_max else "no ctx_size fits at all -- the weights alone do not fit")
        errors.append("serve.ctx_size %d does not fit %s under the %.2f GiB floor: %s; %s, or add VRAM / lower floor_bytes / "
                      "quantize the KV (cache_type_k/v q8_0)"
                      % (s["ctx_size"], "at any split (best %s)" % ":".join(_fmt_ts(x) for x in best["split"]) if auto
                         else "at tensor_split %s" % ":".join(_fmt_ts(x) for x in best["split"]),
                         floor / float(GIB), ", ".join(below), hint))
    if s["max_gap_bytes"] is not None and best["gap_bytes"] > s["max_gap_bytes"]:
        errors.append("gap %.2f GiB between the cards exceeds serve.max_gap_bytes %.2f GiB at %s"
                      % (best["gap_bytes"] / float(GIB), s["max_gap_bytes"] / float(GIB),
                         ":".join(_fmt_ts(x) for x in best["split"])))
        fits = False
    n_ctx, n_ctx_seq = best["n_ctx"], best["n_ctx_seq"]
    trained = c.model.get("context_length")
    if trained and n_ctx_seq > trained:
        warnings.append("rope: ctx_per_slot %d is beyond the trained window %d; the top %d positions of a full "
                        "conversation extrapolate on the base rope (%.2fx) -- untrained territory"
                        % (n_ctx_seq, trained, n_ctx_seq - trained, n_ctx_seq / float(trained)))
    elif not trained:
        warnings.append("model.context_length is unknown: the rope caveat cannot be checked")
    if s["ctx_size"] != "max" and n_ctx != s["ctx_size"]:
        warnings.append("llama.cpp pads ctx_size %d to %d (n_ctx_seq %d x %d slots)"
                        % (s["ctx_size"], n_ctx, n_ctx_seq, s["parallel"]))
    if c.drafter is not None and c.model_draft:
        if not c.drafter.get("sliding_window"):
            warnings.append("drafter has no sliding window: its draft context is sized from the target's n_ctx "
                            "(common/speculative.cpp), so it caches the whole %d-token window (%s GiB of draft KV)"
                            % (n_ctx_seq, _gib(sum((r.get("draft_detail") or {}).get("kv_bytes", 0) for r in best["devices"]))))
    vision = _mmproj_result(c, best, floor, errors, warnings)
    warnings.extend(_fa_kernel_warnings(c))
    drafter_unused = _drafter_unused(c)
    if drafter_unused:
        warnings.append(drafter_unused)
    cache = _cache_ram(c, n_ctx_seq, host_ram_bytes, errors, warnings,
                       experts_bytes=sum((best.get("host_experts") or {}).get(k) or 0 for k in ("bytes", "mapped_gap_bytes")))
    _moe_checks(c, best, cache, host_ram_bytes, errors, warnings)
    if errors:
        fits = False
    table = _table(c, best, evs, floor)
    ts_out = best["split"]
    if all(float(x).is_integer() for x in ts_out):
        ts_out = [int(x) for x in ts_out]
    devices = best["devices"]
    return {
        "fits": bool(fits),
        "tensor_split": ts_out,
        "ctx_size": n_ctx,
        "ctx_per_slot": n_ctx_seq,
        "parallel": s["parallel"],
        "devices": devices,
        "gap_bytes": best["gap_bytes"],
        "floor_bytes": floor,
        "cache_ram_mib": cache["mib"],
        "cache_ram": cache,
        "warnings": warnings,
        "errors": errors,
        "table": table,
        "candidates": [{"tensor_split": [int(x) if float(x).is_integer() else x for x in e["split"]],
                        "free_bytes": [r["free_bytes"] for r in e["devices"]], "gap_bytes": e["gap_bytes"],
                        "passes_floor": _passes(e, floor)} for e in evs],
        "host_weights_bytes": best["host_weights_bytes"],
        "host": best["host"],
        "n_rs_seq": best["n_rs_seq"],
        "profile": {"backend": s["backend"], "source": c.prof["source"]},
        "layer_devices": best["slots"][:-1],
        "output_device": best["slots"][-1],
        "drafter_unused": drafter_unused,
        "host_experts": best["host_experts"],
        "n_cpu_moe_choice": moe_choice,
        "mmproj": vision,
    }
