# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sizing facts of a GGUF file, derived the way llama.cpp b11434 derives them.

``gguf_facts(path)`` reads the header with gguf_reader (never the tensor data) and
returns a plain dict: architecture, block count, trained context, per-layer kind and
KV geometry, recurrent state dimensions, per-layer tensor bytes, drafter keys, mmproj
detection. This dict is what ``dankfleet.llm.gguf_info`` returns and what
``dankfleet.llm.fit_plan`` consumes.

Layer kinds (``layers[i].kind``), as llama.cpp b11434 decides them:

* ``attention``  full attention, KV for the whole context (src/llama-kv-cache.cpp)
* ``swa``        sliding-window attention, KV capped by the window (llama-kv-cache-iswa.cpp)
* ``recurrent``  DeltaNet / SSM / RWKV layer: constant-size f32 state per sequence
                 (llama-memory-recurrent.cpp), no KV
* ``nextn``      an MTP/NextN block (the last ``nextn_predict_layers`` blocks): not run
                 by the main graph, loaded only for ``--spec-type draft-mtp``
* ``ffn``        a block with neither attention nor state (nemotron-h MLP blocks)
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import errno
import math
import os
import re

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError, read_gguf

KIND_ATTENTION = "attention"
KIND_SWA = "swa"
KIND_RECURRENT = "recurrent"
KIND_NEXTN = "nextn"
KIND_FFN = "ffn"

# Architectures whose every trunk layer is full attention (llama_kv_cache, no SWA in b11434).
DENSE_ARCHS = frozenset([
    "llama", "llama-embed", "qwen", "qwen2", "qwen2moe", "qwen2vl", "qwen3", "qwen3moe", "qwen3vl", "qwen3vlmoe",
    "mistral3", "phi2", "phi3", "phimoe", "starcoder2", "granite", "granitemoe", "gemma", "command-r", "olmo",
    "olmoe", "internlm2", "stablelm", "baichuan", "orion", "minicpm", "minicpm3", "smollm3", "ernie4_5",
    "ernie4_5-moe", "hunyuan-dense", "glm4", "glm4moe", "seed_oss", "apertus", "arcee", "bailingmoe",
    "grok", "dbrx", "starcoder", "refact", "bloom", "falcon", "gpt2", "gptj", "gptneox", "mpt", "deci",
])
# Archs that call load_swa_pattern(ml, n) (src/models/*.cpp): default pattern n, and whether
# SWA is on without a sliding_window key (None = only when sliding_window > 0).
SWA_PATTERN_ARCHS = {
    "gemma2": (2, 4096),       # n_swa default 4096
    "gemma3": (6, None),
    "cohere2": (4, 0),         # sliding_window required
    "openai-moe": (2, 0),      # gpt-oss, sliding_window required
    "olmo2": (4, None),
    "mellum": (4, None),
    "plamo3": (8, None),
    "afmoe": (4, None),
}
# Archs that take the SWA layer list from <arch>.attention.sliding_window_pattern (array, required).
SWA_ARRAY_ARCHS = frozenset(["gemma4", "gemma4-assistant", "granite-swa", "maple", "mimo2", "dots3note"])
# Hybrid archs: recurrent unless (il + 1) % full_attention_interval == 0 (qwen35.cpp and friends).
INTERVAL_HYBRID_ARCHS = frozenset(["qwen35", "qwen35moe", "qwen3next", "minimax-01", "qwen4exp"])
# Hybrid archs: a layer is recurrent iff its head_count_kv is 0.
KV0_HYBRID_ARCHS = frozenset(["jamba", "granite-hybrid", "plamo2", "kimi-linear", "lfm2", "lfm2moe",
                              "bailingmoe3", "glm5-next", "kimi-k3"])
# llm_arch_is_recurrent(): every layer recurrent.
RECURRENT_ARCHS = frozenset(["mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"])
# archs that support recurrent partial rollback (llm_arch_supports_rs_rollback, llama-arch.cpp)
RS_ROLLBACK_ARCHS = frozenset(["kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h",
                               "nemotron_h_moe", "lfm2", "lfm2moe", "bailingmoe3"])
DRAFTER_ARCHS = frozenset(["dflash"])
# Archs that are only ever a drafter (llama-context.cpp: eagle3/dflash need the target's context, ctx_other;
# gemma4-assistant likewise): a file of one of them is never the served model.
DRAFTER_ONLY_ARCHS = frozenset(["dflash", "eagle3", "gemma4-assistant"])
# full_attention_interval when the key is absent (src/models/<arch>.cpp load_arch_hparams)
DEFAULT_FULL_ATTENTION_INTERVAL = {"qwen35": 4, "qwen35moe": 4, "qwen3next": 4, "qwen4exp": 4, "minimax-01": 8}
# Per-layer keys llama.cpp reads with get_key_or_arr(key, arr, n_layer_all): an array must have exactly
# block_count entries (llama-model-loader.cpp: "key %s has wrong array length; expected %u, got %u"), of
# UINT32, INT32 or BOOL elements (get_arr: "%s has wrong array element type %s").
PER_LAYER_ARRAY_KEYS = ("attention.head_count", "attention.head_count_kv", "feed_forward_length",
                        "attention.recurrent_layers", "expert_feed_forward_length")
# get_key_or_arr(rope.dimension_sections, rope_sections, 4): an array must have exactly 4 entries
ROPE_SECTIONS_ARCHS = frozenset(["qwen35", "qwen35moe", "qwen4exp", "qwen3vl", "qwen3vlmoe", "qwen2vl", "glm4",
                                 "ernie4_5", "deepseek32", "bailingmoe3", "dflash"])
PER_LAYER_ELEMENT_TYPES = ("ARRAY[UINT32]", "ARRAY[INT32]", "ARRAY[BOOL]")
# get_arr into std::array<..., LLAMA_MAX_LAYERS> (no length rule: a short one leaves the rest 0)
SWA_PATTERN_ELEMENT_TYPES = PER_LAYER_ELEMENT_TYPES
MMPROJ_ARCHS = frozenset(["clip"])

# The keys llama.cpp b11434 reads with get_key and no `false` (required: "key not found in model") for every
# architecture but clip, before any arch's own: src/llama-model.cpp llama_model::load_hparams.
REQUIRED_ARCH_KEYS = ("context_length", "embedding_length", "block_count")
# Read there as optional (0 heads: recurrent models have none); a file whose layers attend cannot be sized
# without it -- its KV cache would be planned as 0 bytes.
HEAD_COUNT_KEY = "attention.head_count"
# The architectures _layer_kinds derives (architecture_supported); an unknown one is flagged, not sized.
SUPPORTED_ARCHS = (DENSE_ARCHS | frozenset(SWA_PATTERN_ARCHS) | SWA_ARRAY_ARCHS | INTERVAL_HYBRID_ARCHS | KV0_HYBRID_ARCHS
                   | RECURRENT_ARCHS | frozenset(["nemotron_h", "nemotron_h_moe", "llama4", "exaone4", "dflash"]))
ATTENDING_KINDS = frozenset([KIND_ATTENTION, KIND_SWA, KIND_NEXTN])

# llama.cpp b11434 src/llama-hparams.h: #define LLAMA_MAX_LAYERS 512 (per-layer arrays are sized by it).
LLAMA_MAX_LAYERS = 512
# The sizing keys are u32 in every real file; a value beyond is corruption, not a model.
MAX_UINT = (1 << 32) - 1

# What each key the facts are derived from must hold (arch-relative unless it contains a dot
# prefix of its own): a wrong-typed, negative or non-finite value is refused naming the key.
UINT, PER_LAYER, LAYER_FLAGS, FLOAT, STRING, BOOL, UINT_ARRAY, STRING_ARRAY = (
    "an unsigned integer", "an unsigned integer or an array of them (one per layer)",
    "an unsigned integer or an array of 0/1 or booleans (one per layer)", "a finite number >= 0", "a string",
    "a boolean", "an array of unsigned integers", "an array of strings")
ARCH_KEYS = {
    "block_count": UINT, "nextn_predict_layers": UINT, "context_length": UINT, "embedding_length": UINT,
    "attention.key_length": UINT, "attention.value_length": UINT, "attention.key_length_swa": UINT,
    "attention.value_length_swa": UINT, "attention.sliding_window": UINT, "full_attention_interval": UINT,
    "vocab_size": UINT, "ssm.conv_kernel": UINT, "ssm.inner_size": UINT, "ssm.state_size": UINT,
    "ssm.group_count": UINT, "ssm.time_step_rank": UINT, "wkv.head_size": UINT, "token_shift_count": UINT,
    "rope.dimension_count": UINT, "rope.scaling.original_context_length": UINT, "block_size": UINT,
    "selector_rank": UINT, "selector_top_k": UINT, "conv_kernel_size": UINT, "conv_group_size": UINT,
    "hyper_connection.count": UINT,
    "expert_count": UINT, "expert_used_count": UINT, "expert_shared_count": UINT,
    "expert_shared_feed_forward_length": UINT, "leading_dense_block_count": UINT,
    "expert_feed_forward_length": PER_LAYER,
    "attention.head_count": PER_LAYER, "attention.head_count_kv": PER_LAYER, "feed_forward_length": PER_LAYER,
    "attention.sliding_window_pattern": LAYER_FLAGS, "attention.recurrent_layers": LAYER_FLAGS,
    "rope.freq_base": FLOAT, "rope.scaling.factor": FLOAT, "rope.scaling.type": STRING,
    "rope.dimension_sections": UINT_ARRAY, "target_layers": UINT_ARRAY, "attention.causal": BOOL,
}
GLOBAL_KEYS = {
    "general.architecture": STRING, "general.name": STRING, "general.file_type": UINT,
    "tokenizer.ggml.tokens": STRING_ARRAY, "tokenizer.ggml.mask_token_id": UINT,
    "dflash.sample_from_anchor": BOOL,
    "clip.projector_type": STRING, "clip.has_vision_encoder": BOOL, "clip.has_audio_encoder": BOOL,
    "clip.vision.image_size": UINT, "clip.vision.embedding_length": UINT, "clip.vision.projection_dim": UINT,
}


def _is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_UINT


def _value_ok(value, kind):
    if kind == UINT:
        return _is_uint(value)
    if kind == PER_LAYER:
        return _is_uint(value) or (isinstance(value, list) and all(_is_uint(x) for x in value))
    if kind == LAYER_FLAGS:
        return _is_uint(value) or (isinstance(value, list) and all(isinstance(x, bool) or x in (0, 1) for x in value))
    if kind == FLOAT:
        return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0)
    if kind == STRING:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool) or value in (0, 1)
    if kind == UINT_ARRAY:
        return isinstance(value, list) and all(_is_uint(x) for x in value)
    if kind == STRING_ARRAY:
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    return True


def _short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_fields(g, arch):
    """Refuse, naming the key, a sizing key whose value is wrong-typed, negative, non-finite or out of range."""
    wanted = dict(GLOBAL_KEYS)
    if arch:
        wanted.update(("%s.%s" % (arch, k), v) for k, v in ARCH_KEYS.items())
    for key, kind in sorted(wanted.items()):
        if key not in g.fields:
            continue
        value = g.fields[key]
        if not _value_ok(value, kind):
            raise GGUFError(g.path, "metadata %s is %s %s, expected %s"
                            % (key, g.field_types.get(key, type(value).__name__), _short(value), kind))


def check_layer_arrays(g, arch, n_layer_all):
    """Refuse what llama.cpp b11434's loader refuses of the per-layer arrays, naming the key and the rule."""
    a = "%s." % arch
    for suffix in PER_LAYER_ARRAY_KEYS:
        key = a + suffix
        value = g.fields.get(key)
        if not isinstance(value, list):
            continue
        ftype = g.field_types.get(key)
        if ftype not in PER_LAYER_ELEMENT_TYPES:
            raise GGUFError(g.path, "metadata %s is %s, expected an array of UINT32, INT32 or BOOL (llama.cpp: wrong "
                            "array element type)" % (key, ftype))
        if len(value) != n_layer_all:
            raise GGUFError(g.path, "metadata %s has %d entries but %sblock_count is %d: llama.cpp b11434 refuses the "
                            "model (key %s has wrong array length; expected %d, got %d); give one entry per block or "
                            "a single value" % (key, len(value), a, n_layer_all, key, n_layer_all, len(value)))
    key = a + "rope.dimension_sections"
    value = g.fields.get(key)
    if arch in ROPE_SECTIONS_ARCHS and isinstance(value, list) and len(value) != 4:
        raise GGUFError(g.path, "metadata %s has %d entries: llama.cpp b11434 refuses the model (key %s has wrong "
                        "array length; expected 4, got %d)" % (key, len(value), key, len(value)))
    key = a + "attention.sliding_window_pattern"
    value = g.fields.get(key)
    if isinstance(value, list):
        if g.field_types.get(key) not in SWA_PATTERN_ELEMENT_TYPES:
            raise GGUFError(g.path, "metadata %s is %s, expected an array of UINT32, INT32 or BOOL (llama.cpp: wrong "
                            "array element type)" % (key, g.field_types.get(key)))
        if len(value) > LLAMA_MAX_LAYERS:
            raise GGUFError(g.path, "metadata %s has %d entries, more than LLAMA_MAX_LAYERS (%d): llama.cpp refuses "
                            "it (array length exceeds max)" % (key, len(value), LLAMA_MAX_LAYERS))
    if arch in DEFAULT_FULL_ATTENTION_INTERVAL and (a + "attention.recurrent_layers") not in g.fields:
        interval = g.fields.get(a + "full_attention_interval")
        if interval is not None and interval == 0:
            raise GGUFError(g.path, "metadata %sfull_attention_interval is 0: every layer's kind is (il + 1) %% interval, "
                            "so llama.cpp b11434 cannot load it (qwen4exp: must be greater than zero; qwen35, "
                            "qwen3next, minimax-01: a division by zero); fix the header (the default is %d) or give "
                            "%sattention.recurrent_layers" % (a, DEFAULT_FULL_ATTENTION_INTERVAL[arch], a))


def drafter_reason(g, arch, n_layer_all, nextn):
    """Why this file is a drafter and not a servable model (None when it is a model).

    An arch that only drafts (dflash, its dflash2/dspark variants, eagle3, gemma4-assistant), or an MTP head on
    its own: nextn_predict_layers > 0 and no trunk block in the file (llama.cpp's mtp_only: blk.0 absent).
    """
    if arch in DRAFTER_ONLY_ARCHS:
        return "architecture %s is a drafter (it needs the target's context to run)" % arch
    if nextn > 0 and n_layer_all > nextn:
        trunk = any(_BLK.match(t.name) and int(_BLK.match(t.name).group(1)) < n_layer_all - nextn for t in g.tensors)
        if not trunk:
            return ("an MTP head alone: %s.nextn_predict_layers %d and none of the %d trunk blocks' tensors"
                    % (arch, nextn, n_layer_all - nextn))
    return None


# Mixture-of-Experts (src/llama-model.cpp load_hparams / load_tensors, src/llama-graph.cpp build_moe_ffn, b11434).
# The routed experts of a block are the merged 3-D tensors blk.N.ffn_{gate,up,down,gate_up}_{,ch}exps -- exactly
# what --n-cpu-moe / --cpu-moe move to the CPU (common/arg.cpp: "blk\\.%d\\.ffn_(up|down|gate|gate_up)_(ch|)exps");
# the router (ffn_gate_inp) and the shared expert (ffn_*_shexp) stay with the block.
EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch)?exps\.")
SHARED_EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_(up|gate|down)_shexp\.")
# The MoE architectures whose graph fit_plan models: build_moe_ffn over the merged expert tensors (ggml_mul_mat_id),
# an optional shared expert beside it, and an attention / recurrent stack the planner already sizes. Measured:
# qwen3moe (issue 38, H200); the rest share its FFN graph. Any other file with expert_count > 0 (deepseek2's MLA,
# gpt-oss, glm4moe's dense lead blocks, ...) is refused by name for planning, never planned as dense.
DENSE_EXPERT_KEYS = ("expert_bytes", "expert_tensor_bytes_max", "n_ff_exp", "n_ff_shexp")
MOE_PLANNED_ARCHS = frozenset(["qwen3moe", "qwen3vlmoe", "qwen2moe", "llama", "granitemoe", "olmoe", "phimoe",
                               "qwen35moe", "qwen3next"])


def _moe_facts(g, arch, n_layer_all, n_ff):
    """Expert facts: count, used, widths, and per block the bytes of the routed expert tensors.

    The widths are read off the tensors the graph multiplies (ffn_up_exps is [n_embd, n_ff_exp, n_expert]; a merged
    gate_up [n_embd, 2 x n_ff_exp, n_expert]; ffn_down_exps [n_ff_exp, n_embd, n_expert]), so they are what
    build_moe_ffn uses whatever the arch's key is called: expert_feed_forward_length (qwen3moe, qwen2moe, ...) or
    feed_forward_length (mixtral-style llama, granitemoe, olmoe). The key is the fallback for a block without them.
    """
    a = "%s." % arch
    n_expert = int(g.get(a + "expert_count", 0) or 0)
    n_used = int(g.get(a + "expert_used_count", 0) or 0)
    if n_expert and not n_used:
        raise GGUFError(g.path, "metadata %sexpert_count is %d but %sexpert_used_count is 0 or absent: llama.cpp b11434 "
                        "refuses the model (n_expert_used must be > 0 when n_expert > 0)" % (a, n_expert, a))
    if n_used > n_expert:
        raise GGUFError(g.path, "metadata %sexpert_used_count %d exceeds %sexpert_count %d: llama.cpp b11434 refuses the "
                        "model (n_expert_used <= n_expert)" % (a, n_used, a, n_expert))
    key_exp = g.get(a + "expert_feed_forward_length")
    key_exp = _arr_or_scalar(key_exp, n_layer_all, 0) if key_exp is not None else [0] * n_layer_all
    shexp_key = int(g.get(a + "expert_shared_feed_forward_length", 0) or 0)
    expert_bytes = [0] * n_layer_all
    expert_max = [0] * n_layer_all
    span = [None] * n_layer_all
    width = [0] * n_layer_all
    shexp = [0] * n_layer_all
    for t in g.tensors:
        m = EXPERT_TENSOR.match(t.name)
        if m:
            il = int(m.group(1))
            if il >= n_layer_all:
                continue
            expert_bytes[il] += t.nbytes
            expert_max[il] = max(expert_max[il], t.nbytes)
            span[il] = _widen(span[il], t)
            if len(t.shape) >= 2:
                kind = m.group(2)
                w = t.shape[0] if kind == "down" else (t.shape[1] // 2 if kind == "gate_up" else t.shape[1])
                width[il] = width[il] or int(w)
            continue
        m = SHARED_EXPERT_TENSOR.match(t.name)
        if m and int(m.group(1)) < n_layer_all and len(t.shape) >= 2:
            il = int(m.group(1))
            shexp[il] = shexp[il] or int(t.shape[0] if m.group(2) == "down" else t.shape[1])
    moe_layers = [il for il in range(n_layer_all) if expert_bytes[il]]
    for il in moe_layers:
        if not width[il]:
            width[il] = key_exp[il] or n_ff[il]
    if not n_expert and not moe_layers:
        return None
    widths = [width[il] for il in moe_layers] or [w for w in key_exp if w]
    return {
        "expert_count": n_expert,
        "expert_used_count": n_used,
        "expert_shared_count": g.get(a + "expert_shared_count"),
        "expert_feed_forward_length": max(widths) if widths else None,
        "expert_shared_feed_forward_length": (max(shexp) or shexp_key or None) if (any(shexp) or shexp_key) else None,
        "expert_layers": len(moe_layers),
        "expert_bytes_total": sum(expert_bytes),
        "moe_planned": arch in MOE_PLANNED_ARCHS,
        "per_layer": [{"expert_bytes": expert_bytes[il], "expert_tensor_bytes_max": expert_max[il],
                       "n_ff_exp": width[il], "n_ff_shexp": shexp[il], "expert_span": span[il]}
                      for il in range(n_layer_all)],
    }


def _widen(span, t):
    """[first byte, end) in the file of a group of tensors, widened by tensor t: what llama.cpp maps for a CPU
    buffer holding them (llama-model-loader.cpp get_mapping_range: one range per file from the first tensor's
    offset to the last one's end, whatever lies between)."""
    if span is None:
        return [t.offset, t.offset + t.nbytes]
    return [min(span[0], t.offset), max(span[1], t.offset + t.nbytes)]


INPUT_TENSORS = ("token_embd.", "token_types.", "position_embd.", "per_layer_token_embd.")
_BLK = re.compile(r"^blk\.(\d+)\.")
LONG_ARRAY = 64


def _arr_or_scalar(value, n, default=None):
    """get_key_or_arr: a per-layer array of exactly n (check_layer_arrays refused any other length), or one
    scalar repeated -- never padded or cut."""
    if value is None:
        return [default] * n
    if isinstance(value, list):
        if len(value) != n:
            raise ValueError("a per-layer array of %d entries for %d layers reached _arr_or_scalar" % (len(value), n))
        return list(value)
    return [value] * n


def _summarise(value, ftype):
    if isinstance(value, list) and len(value) > LONG_ARRAY:
        return {"type": ftype, "length": len(value)}
    return value


def _layer_kinds(g, arch, n_layer_all, n_layer, head_kv, n_ff, swa_window):
    """Per-layer kinds and whether the arch is one we know how to derive."""
    a = "%s." % arch
    kinds = [KIND_ATTENTION] * n_layer_all
    supported = True
    swa_type = "none"

    def from_pattern(default_n):
        pat = g.get(a + "attention.sliding_window_pattern")
        if isinstance(pat, list):
            # get_arr copies the array as is into a zeroed per-layer array: a short one leaves the rest non-SWA
            return [bool(pat[il]) if il < len(pat) else False for il in range(n_layer_all)]
        n = int(pat) if pat is not None else default_n
        # set_swa_pattern(n, dense_first=false): swa iff il % n < n - 1 (n == 0: all swa)
        return [(n == 0 or (il % n) < (n - 1)) if il < n_layer else False for il in range(n_layer_all)]

    if arch in INTERVAL_HYBRID_ARCHS:
        rec = g.get(a + "attention.recurrent_layers")
        if rec is not None:
            flags = [bool(x) for x in _arr_or_scalar(rec, n_layer_all, 0)]
        else:
            interval = g.get(a + "full_attention_interval")
            if interval is None:
                interval = DEFAULT_FULL_ATTENTION_INTERVAL.get(arch, 4)
            flags = [il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all)]
        kinds = [KIND_RECURRENT if f else KIND_ATTENTION for f in flags]
    elif arch in KV0_HYBRID_ARCHS:
        kinds = [KIND_RECURRENT if head_kv[il] == 0 else KIND_ATTENTION for il in range(n_layer_all)]
        if arch in ("lfm2", "lfm2moe") and swa_window:
            kinds = [KIND_SWA if k == KIND_ATTENTION else k for k in kinds]
            swa_type = "standard"
    elif arch in ("nemotron_h", "nemotron_h_moe"):
        out = []
        for il in range(n_layer_all):
            if il < n_layer and head_kv[il] == 0 and n_ff[il] == 0:
                out.append(KIND_RECURRENT)
            elif head_kv[il] > 0 and n_ff[il] == 0:
                out.append(KIND_ATTENTION)
            else:
                out.append(KIND_FFN)
        kinds = out
    elif arch in RECURRENT_ARCHS:
        kinds = [KIND_RECURRENT] * n_layer_all
    elif arch in SWA_PATTERN_ARCHS:
        default_n = SWA_PATTERN_ARCHS[arch][0]
        if swa_window:
            kinds = [KIND_SWA if f else KIND_ATTENTION for f in from_pattern(default_n)]
            swa_type = "standard"
    elif arch in SWA_ARRAY_ARCHS:
        if swa_window:
            kinds = [KIND_SWA if f else KIND_ATTENTION for f in from_pattern(0)]
            swa_type = "standard"
    elif arch == "llama4":
        if swa_window:
            kinds = [KIND_SWA if f else KIND_ATTENTION for f in from_pattern(4)]
            swa_type = "chunked"
    elif arch == "exaone4":
        if n_layer == 64 or g.get(a + "attention.sliding_window_pattern") is not None:
            if swa_window:
                kinds = [KIND_SWA if f else KIND_ATTENTION for f in from_pattern(4)]
                swa_type = "standard"
    elif arch == "dflash":
        if g.get(a + "hyper_connection.count"):      # DSV4 DSpark backbone: every stage windowed
            kinds = [KIND_SWA] * n_layer_all
            swa_type = "standard"
        elif swa_window:
            kinds = [KIND_SWA if f else KIND_ATTENTION for f in from_pattern(0)]
            swa_type = "standard"
    elif arch in DENSE_ARCHS:
        pass
    else:
        supported = False
    # the last nextn_predict_layers blocks are MTP heads (hparams.n_layer() = n_layer_all - nextn)
    for il in range(n_layer, n_layer_all):
        kinds[il] = KIND_NEXTN
    return kinds, supported, swa_type


def facts_from_gguf(g):
    """Facts dict of a parsed GGUFFile."""
    f = g.fields
    arch = f.get("general.architecture")
    check_fields(g, arch if isinstance(arch, str) else None)
    facts = {
        "path": g.path,
        "file_size": g.file_size,
        "gguf_version": g.version,
        "endian": g.endian,
        "alignment": g.alignment,
        "tensor_data_offset": g.data_offset,
        "metadata_count": len(f),
        "tensor_count": len(g.tensors),
        "tensor_bytes_total": g.tensor_bytes,
        "architecture": arch,
        "name": f.get("general.name"),
        "file_type": f.get("general.file_type"),
    }
    types = {}
    for t in g.tensors:
        types[t.type_name] = types.get(t.type_name, 0) + 1
    facts["tensor_types"] = types
    facts["metadata"] = dict((k, _summarise(v, g.field_types[k])) for k, v in f.items())

    is_mmproj = arch in MMPROJ_ARCHS or "clip.has_vision_encoder" in f or "clip.projector_type" in f
    facts["is_mmproj"] = bool(is_mmproj)
    if is_mmproj:
        facts["architecture_supported"] = True
        facts["mmproj"] = {
            "projector_type": f.get("clip.projector_type"),
            "has_vision_encoder": bool(f.get("clip.has_vision_encoder", False)),
            "has_audio_encoder": bool(f.get("clip.has_audio_encoder", False)),
            "bytes": g.tensor_bytes,
            "image_size": f.get("clip.vision.image_size"),
            "embedding_length": f.get("clip.vision.embedding_length"),
            "projection_dim": f.get("clip.vision.projection_dim"),
            # what sizes an image's encode (fit_plan's projector law): patches of patch_size, merged
            # spatial_merge_size x spatial_merge_size into one image token (clip.cpp load_hparams)
            "patch_size": f.get("clip.vision.patch_size"),
            "spatial_merge_size": f.get("clip.vision.spatial_merge_size"),
            "block_count": f.get("clip.vision.block_count"),
            "feed_forward_length": f.get("clip.vision.feed_forward_length"),
            "head_count": f.get("clip.vision.attention.head_count"),
        }
        facts["mmproj_bytes"] = g.tensor_bytes
        facts["layers"] = []
        facts["layer_kinds"] = []
        return facts
    if not arch:
        raise GGUFError(g.path, "no general.architecture key: not a llama.cpp model file")

    a = "%s." % arch
    missing = [a + k for k in REQUIRED_ARCH_KEYS if a + k not in f]
    if missing and arch in SUPPORTED_ARCHS:
        raise GGUFError(g.path, "no %s: llama.cpp b11434 refuses the model (key not found in model: %s), and a plan "
                        "made without it would size the model as 0; fix or re-convert the file"
                        % (" and no ".join(missing), missing[0]))

    def key(suffix, default=None):
        return f.get(a + suffix, default)

    n_layer_all = int(key("block_count", 0) or 0)
    if n_layer_all > LLAMA_MAX_LAYERS:
        raise GGUFError(g.path, "metadata %sblock_count is %d, expected at most %d (LLAMA_MAX_LAYERS of llama.cpp "
                        "b11434): not a model llama.cpp can load" % (a, n_layer_all, LLAMA_MAX_LAYERS))
    nextn = int(key("nextn_predict_layers", 0) or 0)
    if nextn > n_layer_all:
        raise GGUFError(g.path, "corrupt: %snextn_predict_layers %d > block_count %d" % (a, nextn, n_layer_all))
    n_layer = n_layer_all - nextn
    check_layer_arrays(g, arch, n_layer_all)
    n_embd = key("embedding_length")
    head = _arr_or_scalar(key("attention.head_count"), n_layer_all, 0)
    head_kv_raw = key("attention.head_count_kv")
    head_kv = _arr_or_scalar(head_kv_raw, n_layer_all, 0) if head_kv_raw is not None else list(head)
    n_ff = _arr_or_scalar(key("feed_forward_length"), n_layer_all, 0)
    h0 = next((h for h in head if h), 0)
    key_len = key("attention.key_length", (n_embd // h0) if (n_embd and h0) else 0)
    val_len = key("attention.value_length", (n_embd // h0) if (n_embd and h0) else 0)
    key_len_swa = key("attention.key_length_swa", key_len)
    val_len_swa = key("attention.value_length_swa", val_len)
    swa_window = key("attention.sliding_window")
    if arch == "gemma2" and swa_window is None:
        swa_window = 4096
    if arch == "llama4" and swa_window is None:
        swa_window = 8192
    if arch == "exaone4" and swa_window is None and n_layer == 64:
        swa_window = 4096
    kinds, supported, swa_type = _layer_kinds(g, arch, n_layer_all, n_layer, head_kv, n_ff, swa_window)
    if supported and a + HEAD_COUNT_KEY not in f and ATTENDING_KINDS.intersection(kinds):
        raise GGUFError(g.path, "no %s%s, but %d of its %d layers attend: llama.cpp b11434 reads it as 0 heads (the key "
                        "is optional for recurrent models) and a plan would size their KV cache as 0 bytes; fix or "
                        "re-convert the file" % (a, HEAD_COUNT_KEY, sum(1 for k in kinds if k in ATTENDING_KINDS),
                                                 n_layer_all))

    tokens = f.get("tokenizer.ggml.tokens")
    vocab = len(tokens) if isinstance(tokens, list) else key("vocab_size")
    tok = g.tensor("token_embd.weight")
    if vocab is None and tok is not None and len(tok.shape) > 1:
        vocab = tok.shape[1]

    ssm = {
        "conv_kernel": key("ssm.conv_kernel"),
        "inner_size": key("ssm.inner_size"),
        "state_size": key("ssm.state_size"),
        "group_count": key("ssm.group_count"),
        "time_step_rank": key("ssm.time_step_rank"),
    }
    # hparams.n_embd_r() / n_embd_s() for Mamba-style and gated-delta-net layers (llama-hparams.cpp)
    d_conv = ssm["conv_kernel"] or 0
    d_inner = ssm["inner_size"] or 0
    d_state = ssm["state_size"] or 0
    n_group = ssm["group_count"] or 0
    wkv = key("wkv.head_size")
    if wkv:
        n_embd_r = int(key("token_shift_count", 2)) * (n_embd or 0)
        n_embd_s = (n_embd or 0) * wkv
    else:
        n_embd_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
        n_embd_s = d_state * d_inner
    recurrent_state = {
        "r_floats": n_embd_r,
        "s_floats": n_embd_s,
        "bytes_per_layer_per_seq": (n_embd_r + n_embd_s) * 4,   # GGML_TYPE_F32 r and s
    }

    # tensors: per block, input (host), output-device groups
    per_layer = [0] * n_layer_all
    token_embd_bytes = 0
    input_span = None
    output_bytes = 0
    for t in g.tensors:
        m = _BLK.match(t.name)
        if m:
            il = int(m.group(1))
            if il < n_layer_all:
                per_layer[il] += t.nbytes
            else:
                output_bytes += t.nbytes
        elif t.name.startswith(INPUT_TENSORS):
            token_embd_bytes += t.nbytes
            input_span = _widen(input_span, t)
        else:
            output_bytes += t.nbytes
    out_w = g.tensor("output.weight")
    output_tied = out_w is None and tok is not None and arch not in DRAFTER_ARCHS
    if output_tied:
        # llama.cpp creates output from token_embd with TENSOR_DUPLICATED: a copy on the output device
        output_bytes += tok.nbytes

    moe = _moe_facts(g, arch, n_layer_all, n_ff)
    layers = []
    for il in range(n_layer_all):
        kind = kinds[il]
        is_swa = kind == KIND_SWA
        kl = key_len_swa if is_swa else key_len
        vl = val_len_swa if is_swa else val_len
        has_kv = kind in (KIND_ATTENTION, KIND_SWA, KIND_NEXTN) and head_kv[il] > 0
        layers.append({
            "index": il,
            "kind": kind,
            "n_head": head[il],
            "n_head_kv": head_kv[il] if has_kv else 0,
            "key_length": kl if has_kv else 0,
            "value_length": vl if has_kv else 0,
            "n_ff": n_ff[il],
            "kv_bytes_per_token_f16": (head_kv[il] * (kl + vl) * 2) if has_kv else 0,
            "tensor_bytes": per_layer[il],
        })
        # MoE: the routed experts' bytes apart from the rest of the block (what --n-cpu-moe moves), their width
        ex = moe["per_layer"][il] if moe else dict(dict.fromkeys(DENSE_EXPERT_KEYS, 0), expert_span=None)
        layers[-1].update(ex, non_expert_bytes=per_layer[il] - ex["expert_bytes"])
    counts = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1

    rope = {
        "freq_base": key("rope.freq_base"),
        "dimension_count": key("rope.dimension_count"),
        "dimension_sections": key("rope.dimension_sections"),
        "scaling_type": key("rope.scaling.type"),
        "scaling_factor": key("rope.scaling.factor"),
        "scaling_original_context_length": key("rope.scaling.original_context_length"),
    }

    reason = drafter_reason(g, arch, n_layer_all, nextn)
    drafter = None
    if arch in DRAFTER_ARCHS:
        top_k = key("selector_top_k", 0) or 0
        markov = g.tensor("markov_w1.weight") is not None
        drafter = {
            "kind": "dspark" if markov else ("dflash2" if top_k > 0 else "dflash"),
            "block_size": key("block_size"),
            "selector_rank": key("selector_rank"),
            "selector_top_k": top_k,
            "conv_kernel_size": key("conv_kernel_size"),
            "conv_group_size": key("conv_group_size"),
            "mask_token_id": f.get("tokenizer.ggml.mask_token_id"),
            "target_layers": key("target_layers"),
            "sample_from_anchor": f.get("dflash.sample_from_anchor"),
            "causal": key("attention.causal"),
            "markov_head": markov,
            "has_token_embd": tok is not None,
            "has_output": out_w is not None,
        }

    facts.update({
        "architecture_supported": supported,
        "is_drafter": reason is not None,
        "drafter_reason": reason,
        "block_count": n_layer_all,
        "nextn_predict_layers": nextn,
        "n_layer": n_layer,
        "context_length": key("context_length"),
        "embedding_length": n_embd,
        "feed_forward_length": max(n_ff) if n_ff else None,
        "vocab_size": vocab,
        "head_count": h0,
        "head_count_kv": head_kv_raw if head_kv_raw is not None else h0,
        "key_length": key_len,
        "value_length": val_len,
        "key_length_swa": key_len_swa,
        "value_length_swa": val_len_swa,
        "sliding_window": swa_window if (swa_window and KIND_SWA in counts) else (key("attention.sliding_window") or None),
        "swa_type": swa_type,
        "full_attention_interval": key("full_attention_interval"),
        "ssm": ssm,
        "recurrent_state": recurrent_state,
        "rs_rollback": arch in RS_ROLLBACK_ARCHS,
        "rope": rope,
        "layer_kinds": kinds,
        "layer_counts": counts,
        "layers": layers,
        "token_embd_bytes": token_embd_bytes,
        # [first byte, end) of the input tensors in the file: with experts on the host, what the CPU's mapped
        # buffer spans together with their blocks' expert_span (fit_plan books the range, not the sum)
        "input_span": input_span,
        "output_bytes": output_bytes,
        "output_tied": output_tied,
        "drafter": drafter,
        "block_size": drafter["block_size"] if drafter else None,
        "selector_top_k": drafter["selector_top_k"] if drafter else None,
        "mask_token_id": f.get("tokenizer.ggml.mask_token_id"),
        "mmproj": None,
        "mmproj_bytes": 0,
        "is_moe": moe is not None,
        "expert_count": moe["expert_count"] if moe else 0,
        "expert_used_count": moe["expert_used_count"] if moe else 0,
        "expert_shared_count": moe["expert_shared_count"] if moe else None,
        "expert_feed_forward_length": moe["expert_feed_forward_length"] if moe else None,
        "expert_shared_feed_forward_length": moe["expert_shared_feed_forward_length"] if moe else None,
        "expert_layers": moe["expert_layers"] if moe else 0,
        "expert_bytes_total": moe["expert_bytes_total"] if moe else 0,
        # whether fit_plan models this architecture's experts (MOE_PLANNED_ARCHS); null for a dense model
        "moe_planned": moe["moe_planned"] if moe else None,
    })
    return facts


def gguf_facts(path, tensors=False, header_only=False):
    """Read the GGUF at path and return its facts (raises GGUFError naming the file and the problem).

    tensors: also the whole tensor table (name, shape, type, offset, nbytes) -- large for big models.
    header_only: the file may end after its tensor table (read_gguf).
    """
    g = read_gguf(path, header_only=header_only)
    facts = facts_from_gguf(g)
    if tensors:
        facts["tensors"] = [t.as_dict() for t in g.tensors]
    return facts


def _unreadable(path):
    """False when nothing is at path (absent), why it cannot be read when something is (a symbolic link loop is
    there and unreadable, never absent: os.path.exists() says False for both), None when stat reaches a file."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "%s: unreadable: a symbolic link loop (or a chain of more links than the kernel follows)" % path
        return "%s: unreadable: %s" % (path, exc.strerror or exc)
    return None


def gguf_files(paths, tensors=False, header_only=False):
    """name -> path of each GGUF file -> name -> its facts plus ``path`` and ``exists``, in one read.

    What a plan needs of a payload: which files are there, and the headers of those that are. Nothing raises for
    one file: a missing one is ``{path, exists: False}``, one that cannot be read ``{path, exists: True, error}``
    (the message reading it alone fails with); the caller decides what that means.
    """
    files = {}
    for name, path in paths.items():
        path = str(path)
        unreadable = _unreadable(path)
        if unreadable is False:
            files[name] = {"path": path, "exists": False}
            continue
        if unreadable:
            files[name] = {"path": path, "exists": True, "error": unreadable}
            continue
        try:
            facts = gguf_facts(path, tensors, header_only)
        except (GGUFError, OSError) as exc:
            files[name] = {"path": path, "exists": True, "error": str(exc)}
            continue
        files[name] = dict(facts, path=path, exists=True)
    return files
