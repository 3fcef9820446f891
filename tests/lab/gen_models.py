#!/usr/bin/env python
"""Deterministic GGUF models for the lab: the architectures frank-medium deploys, in miniature.

    gen_models.py --out DIR [--only NAME ...] [--scale small|medium]

writes DIR/<name>.gguf for every model (or the named ones), prints a JSON manifest
{name: {path, size, sha256, architecture, ...}} to stdout and writes it to DIR/MANIFEST.json.
A file whose recipe (generator source + resolved parameters + seed) and sha256 match the
manifest already in DIR is left alone, so a re-run costs a hash per file.

Python API, for bigger variants (planner accuracy runs want buffers of hundreds of MiB):

    from gen_models import write_model
    entry = write_model("qwen35-mtp", "/tmp/q.gguf", scale="medium", n_layer=16, tensor_type="q8_0")

Fixed seed -> fixed bytes -> fixed sha256: every tensor is drawn from its own
numpy RandomState (a frozen bit stream) seeded by sha256(seed, model, tensor name).
``fill="tile"`` (the default of ``scale="real"``, the deployed 27B shape) writes every q8_0 matrix as
one seeded tile of blocks repeated instead, so ~27 GiB take as long as the disk needs:

    entry = write_model("qwen35-mtp", "/tmp/q27.gguf", scale="real")              # ~27 GiB
    entry = write_model("qwen35-mtp", "/tmp/q.gguf", fill="tile", tensor_type="q8_0")  # same path, tiny

The tensor names, shapes and metadata keys follow llama.cpp b11434 (src/llama-arch.cpp,
src/models/{llama,qwen35,gemma3,dflash}.cpp, common/speculative.cpp); each builder names
the loader it mirrors. Every model shares one byte-level BPE vocabulary (gpt2 model, qwen2
pre-tokenizer, ChatML template), so any of them can draft for any other.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.metadata
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType

DEFAULT_SEED = 20260916  # the day frank-medium went live on llama.cpp
GGUF_ALIGNMENT = 32

# ---------------------------------------------------------------------------------------
# The vocabulary: 256 byte tokens (GPT-2 byte-to-unicode alphabet), a few English merges,
# the ChatML control tokens, a DFlash mask token, then unused padding up to n_vocab.
# ---------------------------------------------------------------------------------------

MERGES = [
    "Ġ t", "h e", "i n", "e r", "a n", "o n", "r e", "Ġ a", "Ġ s", "Ġ w",
    "Ġt he", "e n", "a t", "o r", "i s", "Ġ o", "Ġ c", "e s", "Ġ b", "Ġ f",
    "Ġ m", "i t", "a l", "Ġ p", "Ġ d", "a r", "in g", "e d", "Ġ h", "o u",
    "l l", "Ġo f", "Ġa n", "Ġan d", "Ġ i", "Ġt o", "Ġ in", "l e", "Ġ l", "Ġ n",
    "Ġ g", "Ġ e", "o w", "Ġ y", "Ġy ou", "s t", "i c", "Ċ Ċ",
]
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_UNUSED = 1, 3, 5

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what llama.cpp's BPE expects)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def vocab_base_size() -> int:
    return 256 + len(MERGES) + len(SPECIAL_TOKENS)


def build_vocab(n_vocab: int) -> dict:
    """Token texts, types and merges for a vocabulary of exactly n_vocab entries."""
    if n_vocab < vocab_base_size():
        raise ValueError(f"n_vocab={n_vocab} is below the {vocab_base_size()} tokens the shared vocabulary needs "
                         f"(256 bytes + {len(MERGES)} merges + {len(SPECIAL_TOKENS)} control tokens); raise n_vocab")
    byte_map = _bytes_to_unicode()
    tokens = [byte_map[b] for b in range(256)]
    known = set(tokens)
    for merge in MERGES:
        first, second = merge.split(" ")
        if first not in known or second not in known:
            raise AssertionError(f"merge {merge!r} uses a token that no earlier entry creates")
        tokens.append(first + second)
        known.add(first + second)
    types = [TOKEN_NORMAL] * len(tokens)
    special = {}
    for text in SPECIAL_TOKENS:
        special[text] = len(tokens)
        tokens.append(text)
        types.append(TOKEN_CONTROL)
    for i in range(n_vocab - len(tokens)):
        tokens.append(f"<|unused_{i}|>")
        types.append(TOKEN_UNUSED)
    return {"tokens": tokens, "types": types, "merges": list(MERGES), "special": special}


# ---------------------------------------------------------------------------------------
# Recipes: defaults per kind and scale. Every key can be overridden through write_model().
# ---------------------------------------------------------------------------------------

COMMON_KEYS = {"n_layer", "n_embd", "n_ff", "n_head", "n_head_kv", "head_dim", "n_vocab", "ctx_train",
               "tensor_type", "rope_freq_base", "rms_eps", "seed", "fill"}
FILLS = ("random", "tile")
KIND_KEYS = {
    "dense-llama": set(),
    "draft-small": set(),
    "qwen35-hybrid": {"full_attention_interval", "n_rot", "ssm_d_conv", "ssm_d_state", "ssm_n_group", "ssm_dt_rank"},
    "qwen35-mtp": {"full_attention_interval", "n_rot", "ssm_d_conv", "ssm_d_state", "ssm_n_group", "ssm_dt_rank",
                   "nextn_predict_layers"},
    "swa-dense": {"sliding_window", "sliding_window_pattern", "rope_freq_base_swa"},
    "draft-dflash": {"sliding_window", "block_size", "selector_rank", "selector_top_k", "conv_kernel_size",
                     "conv_group_size", "target_layers", "own_embeddings", "causal"},
}
MODEL_NAMES = list(KIND_KEYS)

ARCHITECTURES = {
    "dense-llama": "llama",
    "draft-small": "llama",
    "qwen35-hybrid": "qwen35",
    "qwen35-mtp": "qwen35",
    "swa-dense": "gemma3",
    "draft-dflash": "dflash",
}

ROLES = {
    "dense-llama": {"role": "target", "drafter": "draft-small", "spec_type": "draft-simple"},
    "draft-small": {"role": "drafter", "drafts_for": "dense-llama", "spec_type": "draft-simple"},
    "qwen35-hybrid": {"role": "target", "drafter": "draft-dflash", "spec_type": "draft-dflash"},
    "qwen35-mtp": {"role": "target", "spec_type": "draft-mtp"},
    "swa-dense": {"role": "target"},
    "draft-dflash": {"role": "drafter", "drafts_for": "qwen35-hybrid", "spec_type": "draft-dflash"},
}

_QWEN35_SMALL = {
    "n_layer": 8, "n_embd": 64, "n_ff": 192, "n_head": 4, "n_head_kv": 2, "head_dim": 32,
    "full_attention_interval": 4, "ssm_d_conv": 4, "ssm_d_state": 16, "ssm_n_group": 2, "ssm_dt_rank": 4,
    "rope_freq_base": 10000000.0, "rms_eps": 1e-6,
}
_QWEN35_MEDIUM = {
    "n_layer": 16, "n_embd": 1024, "n_ff": 3072, "n_head": 8, "n_head_kv": 4, "head_dim": 256,
    "full_attention_interval": 4, "ssm_d_conv": 4, "ssm_d_state": 128, "ssm_n_group": 4, "ssm_dt_rank": 8,
    "rope_freq_base": 10000000.0, "rms_eps": 1e-6,
}

RECIPES = {
    "small": {
        "dense-llama": {"n_layer": 4, "n_embd": 64, "n_ff": 192, "n_head": 4, "n_head_kv": 2, "head_dim": 16,
                        "rope_freq_base": 500000.0, "rms_eps": 1e-5},
        "draft-small": {"n_layer": 2, "n_embd": 32, "n_ff": 64, "n_head": 2, "n_head_kv": 1, "head_dim": 16,
                        "rope_freq_base": 500000.0, "rms_eps": 1e-5},
        "qwen35-hybrid": dict(_QWEN35_SMALL),
        "qwen35-mtp": dict(_QWEN35_SMALL, nextn_predict_layers=1),
        "swa-dense": {"n_layer": 6, "n_embd": 64, "n_ff": 192, "n_head": 4, "n_head_kv": 2, "head_dim": 16,
                      "sliding_window": 128, "sliding_window_pattern": 3,
                      "rope_freq_base": 1000000.0, "rope_freq_base_swa": 10000.0, "rms_eps": 1e-6},
        "draft-dflash": {"n_layer": 2, "n_embd": 64, "n_ff": 128, "n_head": 4, "n_head_kv": 2, "head_dim": 16,
                         "sliding_window": 2048, "block_size": 8, "selector_rank": 16, "selector_top_k": 4,
                         "conv_kernel_size": 4, "conv_group_size": 16, "target_layers": [1, 4, 7],
                         "own_embeddings": False, "causal": False,
                         "rope_freq_base": 10000000.0, "rms_eps": 1e-6},
    },
    "medium": {
        "dense-llama": {"n_layer": 16, "n_embd": 1024, "n_ff": 2816, "n_head": 16, "n_head_kv": 4, "head_dim": 64,
                        "rope_freq_base": 500000.0, "rms_eps": 1e-5},
        "draft-small": {"n_layer": 4, "n_embd": 256, "n_ff": 768, "n_head": 4, "n_head_kv": 2, "head_dim": 64,
                        "rope_freq_base": 500000.0, "rms_eps": 1e-5},
        "qwen35-hybrid": dict(_QWEN35_MEDIUM),
        "qwen35-mtp": dict(_QWEN35_MEDIUM, nextn_predict_layers=1),
        "swa-dense": {"n_layer": 12, "n_embd": 1024, "n_ff": 3072, "n_head": 8, "n_head_kv": 4, "head_dim": 128,
                      "sliding_window": 1024, "sliding_window_pattern": 6,
                      "rope_freq_base": 1000000.0, "rope_freq_base_swa": 10000.0, "rms_eps": 1e-6},
        # 5 layers like DFlash2/DSpark; kernel 3 because b11434 reserves max(1024, 12*n_tensors) graph nodes
        # for a DFlash2 draft and 5 layers x kernel 4 overflow that (GGML_ASSERT in ggml_backend_sched_reserve)
        "draft-dflash": {"n_layer": 5, "n_embd": 1024, "n_ff": 3072, "n_head": 8, "n_head_kv": 4, "head_dim": 128,
                         "sliding_window": 2048, "block_size": 8, "selector_rank": 256, "selector_top_k": 16,
                         "conv_kernel_size": 3, "conv_group_size": 64, "target_layers": [1, 4, 8, 11, 15],
                         "own_embeddings": False, "causal": False,
                         "rope_freq_base": 10000000.0, "rms_eps": 1e-6},
    },
}
# "real": the deployed model's shape (the runbook's Qwen3.8-27B, tests/fixtures/frank_medium.json): 64 layers,
# full attention every 4th, n_embd 5120, 24/4 heads x 256, FFN 17408, vocab 248320, Gated DeltaNet with
# 16 key / 48 value heads of 128, one MTP block -- ~27 GiB at q8_0, so written with fill="tile" (issue 19)
_QWEN35_REAL = {
    "n_layer": 64, "n_embd": 5120, "n_ff": 17408, "n_head": 24, "n_head_kv": 4, "head_dim": 256,
    "full_attention_interval": 4, "ssm_d_conv": 4, "ssm_d_state": 128, "ssm_n_group": 16, "ssm_dt_rank": 48,
    "rope_freq_base": 10000000.0, "rms_eps": 1e-6,
}
RECIPES["real"] = {
    "qwen35-hybrid": dict(_QWEN35_REAL),
    "qwen35-mtp": dict(_QWEN35_REAL, nextn_predict_layers=1),
}
SCALE_COMMON = {
    "small": {"n_vocab": 320, "ctx_train": 4096, "tensor_type": "f16"},
    "medium": {"n_vocab": 32768, "ctx_train": 262144, "tensor_type": "f16"},
    "real": {"n_vocab": 248320, "ctx_train": 262144, "tensor_type": "q8_0", "fill": "tile"},
}

TENSOR_TYPES = {
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
}


def resolve_params(kind: str, scale: str = "small", **overrides) -> dict:
    """The full parameter set of one model: scale defaults, kind defaults, then overrides."""
    if kind not in KIND_KEYS:
        raise ValueError(f"unknown model kind {kind!r}; choose one of {', '.join(MODEL_NAMES)}")
    if scale not in RECIPES:
        raise ValueError(f"unknown scale {scale!r}; choose {', '.join(RECIPES)}")
    if kind not in RECIPES[scale]:
        raise ValueError(f"scale {scale!r} has no {kind!r} recipe; it has {', '.join(RECIPES[scale])}")
    allowed = COMMON_KEYS | KIND_KEYS[kind]
    unknown = sorted(set(overrides) - allowed)
    if unknown:
        raise ValueError(f"{kind}: unknown override(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    p = {"seed": DEFAULT_SEED, "fill": "random"}
    p.update(SCALE_COMMON[scale])
    p.update(RECIPES[scale][kind])
    p.update(overrides)
    _validate(kind, p)
    return p


def _validate(kind: str, p: dict) -> None:
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ValueError(f"{kind}: {msg}")

    for key in ("n_layer", "n_embd", "n_ff", "n_head", "n_head_kv", "head_dim", "n_vocab", "ctx_train"):
        need(isinstance(p[key], int) and p[key] > 0, f"{key} must be a positive int, got {p[key]!r}")
    need(p["n_head"] % p["n_head_kv"] == 0, f"n_head ({p['n_head']}) must be a multiple of n_head_kv ({p['n_head_kv']})")
    need(p["tensor_type"] in TENSOR_TYPES, f"tensor_type {p['tensor_type']!r} is not one of {', '.join(TENSOR_TYPES)}")
    need(p["fill"] in FILLS, f"fill {p['fill']!r} is not one of {', '.join(FILLS)}")
    need(p["head_dim"] % 2 == 0, f"head_dim ({p['head_dim']}) must be even (RoPE rotates pairs)")
    build_vocab(p["n_vocab"])  # raises with the minimum size
    if kind.startswith("qwen35"):
        need(p["ssm_dt_rank"] % p["ssm_n_group"] == 0,
             f"ssm_dt_rank ({p['ssm_dt_rank']}) must be a multiple of ssm_n_group ({p['ssm_n_group']}): "
             "value heads are shared out over key heads")
        need(p["full_attention_interval"] >= 1, "full_attention_interval must be >= 1")
        n_rot = p.get("n_rot", p["head_dim"] // 4)
        need(n_rot % 2 == 0 and 4 <= n_rot <= p["head_dim"], f"n_rot ({n_rot}) must be even, >= 4 and <= head_dim")
    if kind == "qwen35-mtp":
        need(p["nextn_predict_layers"] == 1, "b11434's qwen35 MTP graph supports exactly one nextn layer")
    if kind == "swa-dense":
        need(p["sliding_window"] > 0, "sliding_window must be > 0")
        need(p["sliding_window_pattern"] >= 1, "sliding_window_pattern must be >= 1")
    if kind == "draft-dflash":
        top_k = p["selector_top_k"]
        need(p["n_embd"] % p["conv_group_size"] == 0,
             f"n_embd ({p['n_embd']}) must be divisible by conv_group_size ({p['conv_group_size']}) (b11434 DFlash2 loader)")
        need(p["n_embd"] >= top_k * (top_k + 1),
             f"n_embd ({p['n_embd']}) is too small for selector_top_k {top_k}: the selector lattice needs "
             f"top_k*(top_k+1) = {top_k * (top_k + 1)} (b11434 DFlash2 loader)")
        need(p["block_size"] >= 2, "block_size must be >= 2 (one anchor plus at least one draft position)")
        need(all(isinstance(i, int) and i >= 0 for i in p["target_layers"]) and p["target_layers"],
             "target_layers must be a non-empty list of target layer indices")


# ---------------------------------------------------------------------------------------
# Tensors: (name, ggml shape ne[0..], role). role decides the values and the stored type.
# ---------------------------------------------------------------------------------------

def _norm(name, n):
    return (name, [n], "ones")


def _mat(name, n_in, n_out):
    return (name, [n_in, n_out], "matrix")


def _llama_tensors(p: dict) -> list:
    """src/models/llama.cpp: llama_model_llama::load_arch_tensors (untied output)."""
    e, hd = p["n_embd"], p["head_dim"]
    t = [_mat("token_embd.weight", e, p["n_vocab"]), _norm("output_norm.weight", e),
         _mat("output.weight", e, p["n_vocab"])]
    for i in range(p["n_layer"]):
        b = f"blk.{i}."
        t += [_norm(b + "attn_norm.weight", e),
              _mat(b + "attn_q.weight", e, hd * p["n_head"]),
              _mat(b + "attn_k.weight", e, hd * p["n_head_kv"]),
              _mat(b + "attn_v.weight", e, hd * p["n_head_kv"]),
              _mat(b + "attn_output.weight", hd * p["n_head"], e),
              _norm(b + "ffn_norm.weight", e),
              _mat(b + "ffn_gate.weight", e, p["n_ff"]),
              _mat(b + "ffn_down.weight", p["n_ff"], e),
              _mat(b + "ffn_up.weight", e, p["n_ff"])]
    return t


def qwen35_layer_is_recurrent(il: int, n_layer: int, interval: int) -> bool:
    """src/models/qwen35.cpp load_arch_hparams: recurrent unless (il+1) % full_attention_interval == 0."""
    return il < n_layer and (il + 1) % interval != 0


def _qwen35_tensors(p: dict) -> list:
    """src/models/qwen35.cpp: llama_model_qwen35::load_arch_tensors (trunk + MTP blocks)."""
    e, hd, nh, nkv = p["n_embd"], p["head_dim"], p["n_head"], p["n_head_kv"]
    key_dim = p["ssm_d_state"] * p["ssm_n_group"]
    value_dim = p["ssm_d_state"] * p["ssm_dt_rank"]
    conv_dim = 2 * key_dim + value_dim
    t = [_mat("token_embd.weight", e, p["n_vocab"]), _norm("output_norm.weight", e),
         _mat("output.weight", e, p["n_vocab"])]

    def attention(b):
        return [_mat(b + "attn_q.weight", e, hd * nh * 2),  # query + output gate
                _mat(b + "attn_k.weight", e, hd * nkv),
                _mat(b + "attn_v.weight", e, hd * nkv),
                _mat(b + "attn_output.weight", hd * nh, e),
                _norm(b + "attn_q_norm.weight", hd),
                _norm(b + "attn_k_norm.weight", hd)]

    def ffn(b):
        return [_mat(b + "ffn_gate.weight", e, p["n_ff"]),
                _mat(b + "ffn_down.weight", p["n_ff"], e),
                _mat(b + "ffn_up.weight", e, p["n_ff"])]

    for i in range(p["n_layer"]):
        b = f"blk.{i}."
        t += [_norm(b + "attn_norm.weight", e), _norm(b + "post_attention_norm.weight", e)]
        if qwen35_layer_is_recurrent(i, p["n_layer"], p["full_attention_interval"]):
            t += [_mat(b + "attn_qkv.weight", e, conv_dim),
                  _mat(b + "attn_gate.weight", e, value_dim),
                  (b + "ssm_conv1d.weight", [p["ssm_d_conv"], conv_dim], "conv"),
                  (b + "ssm_dt.bias", [p["ssm_dt_rank"]], "ssm_dt"),
                  (b + "ssm_a", [p["ssm_dt_rank"]], "ssm_a"),
                  _mat(b + "ssm_beta.weight", e, p["ssm_dt_rank"]),
                  _mat(b + "ssm_alpha.weight", e, p["ssm_dt_rank"]),
                  _norm(b + "ssm_norm.weight", p["ssm_d_state"]),
                  _mat(b + "ssm_out.weight", value_dim, e)]
        else:
            t += attention(b)
        t += ffn(b)
    for i in range(p["n_layer"], p["n_layer"] + p.get("nextn_predict_layers", 0)):
        b = f"blk.{i}."
        t += [_norm(b + "attn_norm.weight", e), _norm(b + "post_attention_norm.weight", e)]
        t += attention(b) + ffn(b)
        t += [_mat(b + "nextn.eh_proj.weight", 2 * e, e),
              _norm(b + "nextn.enorm.weight", e),
              _norm(b + "nextn.hnorm.weight", e),
              _norm(b + "nextn.shared_head_norm.weight", e)]
    return t


def gemma3_layer_is_swa(il: int, pattern: int) -> bool:
    """llama_hparams::set_swa_pattern(n_pattern, dense_first=false): the last of every n_pattern is dense."""
    return pattern == 0 or (il % pattern) < (pattern - 1)


def _gemma3_tensors(p: dict) -> list:
    """src/models/gemma3.cpp: llama_model_gemma3::load_arch_tensors (tied output, like the real ones)."""
    e, hd = p["n_embd"], p["head_dim"]
    t = [_mat("token_embd.weight", e, p["n_vocab"]), _norm("output_norm.weight", e)]
    for i in range(p["n_layer"]):
        b = f"blk.{i}."
        t += [_norm(b + "attn_norm.weight", e),
              _mat(b + "attn_q.weight", e, hd * p["n_head"]),
              _mat(b + "attn_k.weight", e, hd * p["n_head_kv"]),
              _mat(b + "attn_v.weight", e, hd * p["n_head_kv"]),
              _mat(b + "attn_output.weight", hd * p["n_head"], e),
              _norm(b + "post_attention_norm.weight", e),
              _norm(b + "attn_k_norm.weight", hd),
              _norm(b + "attn_q_norm.weight", hd),
              _norm(b + "ffn_norm.weight", e),
              _mat(b + "ffn_gate.weight", e, p["n_ff"]),
              _mat(b + "ffn_up.weight", e, p["n_ff"]),
              _mat(b + "ffn_down.weight", p["n_ff"], e),
              _norm(b + "post_ffw_norm.weight", e)]
    return t


def _dflash_tensors(p: dict) -> list:
    """src/models/dflash.cpp: llama_model_dflash::load_arch_tensors, DFlash2 (selector) path."""
    e, hd = p["n_embd"], p["head_dim"]
    rank, kernel = p["selector_rank"], p["conv_kernel_size"]
    projected = 2 * kernel * (e // p["conv_group_size"])
    t = []
    if p["own_embeddings"]:
        t += [_mat("token_embd.weight", e, p["n_vocab"])]  # output ties to it
    t += [_mat("selector_predecessor.weight", rank, p["n_vocab"]),
          _mat("selector_successor.weight", rank, p["n_vocab"]),
          _mat("selector_hidden.weight", e, rank),
          _mat("fc.weight", len(p["target_layers"]) * e, e),
          _norm("enc.output_norm.weight", e),
          _norm("output_norm.weight", e)]
    for i in range(p["n_layer"]):
        b = f"blk.{i}."
        t += [_norm(b + "attn_norm.weight", e),
              _mat(b + "attn_q.weight", e, hd * p["n_head"]),
              _mat(b + "attn_k.weight", e, hd * p["n_head_kv"]),
              _mat(b + "attn_v.weight", e, hd * p["n_head_kv"]),
              _mat(b + "attn_output.weight", hd * p["n_head"], e),
              _norm(b + "attn_q_norm.weight", hd),
              _norm(b + "attn_k_norm.weight", hd),
              _norm(b + "ffn_norm.weight", e),
              _mat(b + "ffn_gate.weight", e, p["n_ff"]),
              _mat(b + "ffn_down.weight", p["n_ff"], e),
              _mat(b + "ffn_up.weight", e, p["n_ff"]),
              (b + "attn_conv_base", [e, kernel, 2], "conv_base"),
              _mat(b + "attn_conv_proj.weight", e, projected),
              (b + "ffn_conv_base", [e, kernel, 2], "conv_base"),
              _mat(b + "ffn_conv_proj.weight", e, projected)]
    return t


# ---------------------------------------------------------------------------------------
# Metadata
# ---------------------------------------------------------------------------------------

def _qwen35_rope_sections(n_rot: int) -> list[int]:
    """Interleaved M-RoPE sections summing to n_rot/2, in Qwen3.5's [11, 11, 10] proportion."""
    half = n_rot // 2
    a = round(half * 11 / 32)
    return [a, a, half - 2 * a, 0]


def add_attention_hparams(w: GGUFWriter, k, p: dict, block_count: int) -> None:
    """The attention model's hyperparameters every generated model carries, in this order; k(suffix) is the
    architecture's key (also benchmarks/block_drafters.py and moe_models.py)."""
    w.add_uint32(k("context_length"), p["ctx_train"])
    w.add_uint32(k("embedding_length"), p["n_embd"])
    w.add_uint32(k("block_count"), block_count)
    w.add_uint32(k("feed_forward_length"), p["n_ff"])
    w.add_uint32(k("attention.head_count"), p["n_head"])
    w.add_uint32(k("attention.head_count_kv"), p["n_head_kv"])
    w.add_uint32(k("attention.key_length"), p["head_dim"])
    w.add_uint32(k("attention.value_length"), p["head_dim"])
    w.add_float32(k("attention.layer_norm_rms_epsilon"), p["rms_eps"])
    w.add_float32(k("rope.freq_base"), p["rope_freq_base"])


def add_tokenizer(w: GGUFWriter, vocab: dict) -> None:
    """The lab vocabulary (build_vocab) as llama.cpp's gpt2/qwen2 BPE tokenizer keys: ChatML's end-of-text as
    BOS and padding, <|im_end|> as EOS, no BOS added."""
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", vocab["tokens"])
    w.add_array("tokenizer.ggml.token_type", vocab["types"])
    w.add_array("tokenizer.ggml.merges", vocab["merges"])
    w.add_uint32("tokenizer.ggml.bos_token_id", vocab["special"]["<|endoftext|>"])
    w.add_uint32("tokenizer.ggml.eos_token_id", vocab["special"]["<|im_end|>"])
    w.add_uint32("tokenizer.ggml.padding_token_id", vocab["special"]["<|endoftext|>"])
    w.add_bool("tokenizer.ggml.add_bos_token", False)


def _write_metadata(w: GGUFWriter, kind: str, p: dict, vocab: dict) -> dict:
    """Writes every KV pair; returns the header facts the manifest reports."""
    arch = ARCHITECTURES[kind]
    qtype, ftype = TENSOR_TYPES[p["tensor_type"]]
    n_block = p["n_layer"] + p.get("nextn_predict_layers", 0)

    w.add_name(f"dankfleet-lab {kind}")
    w.add_string("general.description", f"dankfleet lab model '{kind}': random weights, seed {p['seed']}; "
                                        "generated by tests/lab/gen_models.py, not a language model")
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    def k(suffix):
        return f"{arch}.{suffix}"

    add_attention_hparams(w, k, p, n_block)
    w.add_uint32(k("vocab_size"), p["n_vocab"])

    facts = {"block_count": n_block, "n_layer": p["n_layer"]}
    if arch == "llama":
        w.add_uint32(k("rope.dimension_count"), p["head_dim"])
        facts["layer_kinds"] = ["attention"] * p["n_layer"]
    elif arch == "qwen35":
        n_rot = p.get("n_rot", p["head_dim"] // 4)
        w.add_uint32(k("rope.dimension_count"), n_rot)
        w.add_array(k("rope.dimension_sections"), _qwen35_rope_sections(n_rot))
        w.add_uint32(k("ssm.conv_kernel"), p["ssm_d_conv"])
        w.add_uint32(k("ssm.inner_size"), p["ssm_d_state"] * p["ssm_dt_rank"])
        w.add_uint32(k("ssm.state_size"), p["ssm_d_state"])
        w.add_uint32(k("ssm.time_step_rank"), p["ssm_dt_rank"])
        w.add_uint32(k("ssm.group_count"), p["ssm_n_group"])
        w.add_uint32(k("full_attention_interval"), p["full_attention_interval"])
        nextn = p.get("nextn_predict_layers", 0)
        if nextn:
            w.add_uint32(k("nextn_predict_layers"), nextn)
        kinds = ["recurrent" if qwen35_layer_is_recurrent(i, p["n_layer"], p["full_attention_interval"])
                 else "attention" for i in range(p["n_layer"])]
        facts.update(layer_kinds=kinds + ["nextn"] * nextn, nextn_predict_layers=nextn,
                     full_attention_interval=p["full_attention_interval"],
                     ssm={"conv_kernel": p["ssm_d_conv"], "inner_size": p["ssm_d_state"] * p["ssm_dt_rank"],
                          "state_size": p["ssm_d_state"], "time_step_rank": p["ssm_dt_rank"],
                          "group_count": p["ssm_n_group"]})
    elif arch == "gemma3":
        w.add_uint32(k("attention.sliding_window"), p["sliding_window"])
        w.add_uint32(k("attention.sliding_window_pattern"), p["sliding_window_pattern"])
        w.add_float32(k("rope.freq_base_swa"), p["rope_freq_base_swa"])
        facts.update(sliding_window=p["sliding_window"], sliding_window_pattern=p["sliding_window_pattern"],
                     layer_kinds=["swa" if gemma3_layer_is_swa(i, p["sliding_window_pattern"]) else "attention"
                                  for i in range(p["n_layer"])])
    elif arch == "dflash":
        w.add_array(k("rope.dimension_sections"), [p["head_dim"] // 2, 0, 0, 0])  # M-RoPE target, temporal dim only
        w.add_uint32(k("block_size"), p["block_size"])
        w.add_uint32(k("conv_kernel_size"), p["conv_kernel_size"])
        w.add_uint32(k("conv_group_size"), p["conv_group_size"])
        w.add_uint32(k("selector_rank"), p["selector_rank"])
        w.add_uint32(k("selector_top_k"), p["selector_top_k"])
        w.add_array(k("target_layers"), list(p["target_layers"]))
        w.add_uint32(k("attention.sliding_window"), p["sliding_window"])
        w.add_array(k("attention.sliding_window_pattern"), [True] * p["n_layer"])
        w.add_bool(k("attention.causal"), bool(p["causal"]))
        facts.update(sliding_window=p["sliding_window"], block_size=p["block_size"],
                     selector_rank=p["selector_rank"], selector_top_k=p["selector_top_k"],
                     target_layers=list(p["target_layers"]), mask_token_id=vocab["special"]["<|mask|>"],
                     layer_kinds=["swa"] * p["n_layer"])

    add_tokenizer(w, vocab)
    if arch == "dflash":
        w.add_uint32("tokenizer.ggml.mask_token_id", vocab["special"]["<|mask|>"])
    w.add_string("tokenizer.chat_template", CHAT_TEMPLATE)
    return facts


# ---------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------

def _tensor_seed(seed: int, kind: str, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{kind}:{name}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _values(seed: int, kind: str, name: str, shape: list[int], role: str) -> np.ndarray:
    """f32 values in numpy order (reversed ggml shape). Small magnitudes keep greedy decoding stable."""
    np_shape = tuple(reversed(shape))
    if role == "ones":
        return np.ones(np_shape, dtype=np.float32)
    rs = np.random.RandomState(_tensor_seed(seed, kind, name))  # legacy stream: frozen across numpy versions
    u = rs.random_sample(np_shape)  # [0, 1)
    if role == "matrix":
        bound = 0.5 / math.sqrt(shape[0])  # half of a Kaiming-uniform bound over the input width
        return ((2.0 * u - 1.0) * bound).astype(np.float32)
    if role == "ssm_a":  # -exp(A_log): negative decay rates in [-2, -0.5)
        return (-0.5 - 1.5 * u).astype(np.float32)
    if role == "ssm_dt":
        return (-1.0 + u).astype(np.float32)
    if role in ("conv", "conv_base"):
        return ((2.0 * u - 1.0) * 0.1).astype(np.float32)
    raise AssertionError(role)


TILE_BLOCKS = 4099     # prime: no row of any width starts the tile at the same block, so no two rows repeat


def _q8_0_tile(seed: int, kind: str, n_in: int) -> np.ndarray:
    """TILE_BLOCKS Q8_0 blocks (uint8) of the "matrix" law for input width n_in: uniform in
    +-0.5/sqrt(n_in), drawn from the tile's own frozen stream. fill="tile" repeats it through every
    Q8_0 matrix of that width: the bytes are valid Q8_0 and the magnitudes those of fill="random",
    which is all a throughput or memory measurement reads (random weights make no language model)."""
    block = gguf.GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0][0]
    widen = math.sqrt(block * TILE_BLOCKS) / math.sqrt(n_in)        # the bound of width n_in, not the tile's
    vals = _values(seed, kind, f"tile:{n_in}", [block * TILE_BLOCKS], "matrix") * widen
    return gguf.quants.quantize(vals.astype(np.float32), GGMLQuantizationType.Q8_0).reshape(-1)


def _tile_rows(tile: np.ndarray, nbytes: int, shape: list[int], seed: int) -> np.ndarray:
    """The tile repeated to nbytes, each row's block scales multiplied by its own factor in [0.5, 1.5).

    A repeated tile alone gives rows that repeat (a 248320-row output matrix holds each row ~60 times),
    so logits tie exactly and greedy decoding picks among equals by kernel order: spec and no-spec then
    disagree for no reason of their own (measured on the H200, issue 19). The per-row factor keeps every
    row distinct at the cost of one pass over the scales."""
    block_bytes = gguf.GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0][1]
    data = np.resize(tile, nbytes)
    blocks = data.reshape(-1, block_bytes)
    rows = shape[1] if len(shape) > 1 else 1
    d = blocks[:, :2].copy().view(np.float16).reshape(rows, -1)
    factor = (0.5 + np.random.RandomState(seed).random_sample((rows, 1))).astype(np.float32)
    blocks[:, :2] = (d.astype(np.float32) * factor).astype(np.float16).reshape(-1, 1).view(np.uint8)
    return data


def _store(values: np.ndarray, role: str, shape: list[int], qtype: GGMLQuantizationType):
    """(array to write, stored ggml type). Norms, SSM scalars and conv kernels stay f32;
    q8_0 falls back to f16 where the row length is not a multiple of its 32-wide block."""
    if role != "matrix" or qtype == GGMLQuantizationType.F32:
        return values, GGMLQuantizationType.F32
    if qtype == GGMLQuantizationType.Q8_0:
        block = gguf.GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0][0]
        if shape[0] % block == 0:
            return gguf.quants.quantize(values, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0
    return values.astype(np.float16), GGMLQuantizationType.F16


def _stored_nbytes(shape: list[int], role: str, qtype: GGMLQuantizationType) -> tuple[int, GGMLQuantizationType]:
    n = math.prod(shape)
    if role != "matrix" or qtype == GGMLQuantizationType.F32:
        return 4 * n, GGMLQuantizationType.F32
    if qtype == GGMLQuantizationType.Q8_0:
        block, size = gguf.GGML_QUANT_SIZES[GGMLQuantizationType.Q8_0]
        if shape[0] % block == 0:
            return n // block * size, GGMLQuantizationType.Q8_0
    return 2 * n, GGMLQuantizationType.F16


TENSOR_BUILDERS = {"llama": _llama_tensors, "qwen35": _qwen35_tensors, "gemma3": _gemma3_tensors,
                   "dflash": _dflash_tensors}


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------

def _source_sha256() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def recipe_of(kind: str, params: dict) -> dict:
    return {"kind": kind, "params": params, "generator_sha256": _source_sha256(),
            "gguf": importlib.metadata.version("gguf"), "numpy": np.__version__}


def recipe_sha256(kind: str, params: dict) -> str:
    return hashlib.sha256(json.dumps(recipe_of(kind, params), sort_keys=True).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_model(kind: str, path, scale: str = "small", header_only: bool = False, **overrides) -> dict:
    """Write one model to path (atomically) and return its manifest entry.

    header_only: the same header (metadata, tensor table) and file size with a hole of zeros for the
    tensor data -- what a planner reads, in milliseconds and no disk, of a model too big to write here.

    kind: one of MODEL_NAMES. overrides: any key of resolve_params(kind) - n_layer, n_embd, n_ff,
    n_head, n_head_kv, head_dim, n_vocab, ctx_train, tensor_type (f32|f16|q8_0), seed, and the
    kind's own (ssm_*, full_attention_interval, sliding_window, block_size, ...).
    """
    params = resolve_params(kind, scale, **overrides)
    path = Path(path)
    arch = ARCHITECTURES[kind]
    qtype = TENSOR_TYPES[params["tensor_type"]][0]
    vocab = build_vocab(params["n_vocab"])
    tensors = TENSOR_BUILDERS[arch](params)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        w = GGUFWriter(tmp, arch)
        facts = _write_metadata(w, kind, params, vocab)
        tensor_bytes = {}
        stored_types = {}
        for name, shape, role in tensors:
            nbytes, stored = _stored_nbytes(shape, role, qtype)
            # numpy-order element shape; raw_dtype with a non-uint8 dtype keeps it as is
            w.add_tensor_info(name, list(reversed(shape)), np.dtype(np.float32), nbytes, raw_dtype=stored)
            tensor_bytes[name] = nbytes
            stored_types[stored.name] = stored_types.get(stored.name, 0) + 1
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        tiles = {}
        if header_only:
            fout = w.fout[0]
            w.write_padding(fout, fout.tell())
            end = fout.tell() + sum(GGUFWriter.ggml_pad(n, w.data_alignment) for n in tensor_bytes.values())
            w.close()
            os.truncate(tmp, end)
        for name, shape, role in ([] if header_only else tensors):
            nbytes, stored = _stored_nbytes(shape, role, qtype)
            if params["fill"] == "tile" and role == "matrix" and stored == GGMLQuantizationType.Q8_0:
                # fill="tile": one seeded block tile per input width, repeated (GiB-scale models in seconds)
                if shape[0] not in tiles:
                    tiles[shape[0]] = _q8_0_tile(params["seed"], kind, shape[0])
                data = _tile_rows(tiles[shape[0]], nbytes, shape, _tensor_seed(params["seed"], kind, name))
            else:
                data, _ = _store(_values(params["seed"], kind, name, shape, role), role, shape, qtype)
            w.write_tensor_data(data)
        if not header_only:
            w.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise

    entry = {
        "path": str(path),
        "size": path.stat().st_size,
        "sha256": None if header_only else file_sha256(path),
        "header_only": header_only,
        "architecture": arch,
        "kind": kind,
        "scale": scale,
        "seed": params["seed"],
        "tensor_type": params["tensor_type"],
        "stored_types": stored_types,
        "n_tensors": len(tensors),
        "tensor_bytes": sum(tensor_bytes.values()),
        "n_vocab": params["n_vocab"],
        "n_embd": params["n_embd"],
        "n_head": params["n_head"],
        "n_head_kv": params["n_head_kv"],
        "head_dim": params["head_dim"],
        "context_length": params["ctx_train"],
        "special_tokens": vocab["special"],
        "params": params,
        "recipe_sha256": recipe_sha256(kind, params),
    }
    entry.update(facts)
    entry.update(ROLES[kind])
    return entry


# ---------------------------------------------------------------------------------------
# Projectors (mmproj): the vision half of a Qwen-VL model, in miniature, for `--mmproj`.
# ---------------------------------------------------------------------------------------
# b11434's tools/mtmd (clip.cpp load_hparams/load_tensors, models/qwen3vl.cpp, mtmd.cpp) decides
# what loads. The projector type is the deployed one (tests/fixtures/mmproj_bf16.json:
# clip.projector_type qwen3vl_merger): a ViT over 2x2-merged 16-pixel patches, two patch convolutions
# (the temporal pair), learned position embeddings resized to the image, M-RoPE attention, then the
# merger MLP mm.0 -> GELU -> mm.2 whose output width must equal the text model's n_embd (mtmd refuses
# "mismatch between text model (n_embd = ..) and mmproj" otherwise). No deepstack layers: each would
# add a projection_dim slice that a qwen35 text model (n_embd_inp == n_embd) has no room for.

PROJECTOR_TYPE = "qwen3vl_merger"
PROJECTOR_KEYS = {"n_layer", "n_embd", "n_ff", "n_head", "patch_size", "image_size", "spatial_merge_size",
                  "layer_norm_eps", "projection_dim", "seed"}
PROJECTORS = {
    # name: the text model it projects into (its n_embd is the projection_dim)
    "mmproj-qwen35": {"projects_for": "qwen35-mtp"},
}
PROJECTOR_NAMES = list(PROJECTORS)
PROJECTOR_RECIPES = {
    # 2 layers of width 32 (2 heads of 16: M-RoPE needs head_dim % 8 == 0), image_size 128 -> an 8x8
    # position grid; ~60 KB, written in milliseconds
    "small": {"n_layer": 2, "n_embd": 32, "n_ff": 64, "n_head": 2, "patch_size": 16, "image_size": 128,
              "spatial_merge_size": 2, "layer_norm_eps": 1e-6},
    "medium": {"n_layer": 4, "n_embd": 256, "n_ff": 1024, "n_head": 4, "patch_size": 16, "image_size": 384,
               "spatial_merge_size": 2, "layer_norm_eps": 1e-6},
    # the deployed encoder's width and grid (1152 wide, 768 px in 16 px patches); 27 layers x 4304 FFN as in Qwen3-VL
    "real": {"n_layer": 27, "n_embd": 1152, "n_ff": 4304, "n_head": 16, "patch_size": 16, "image_size": 768,
             "spatial_merge_size": 2, "layer_norm_eps": 1e-6},
}
# Ways a projector can be wrong (write_broken_projector): each is refused by b11434 when llama-server
# starts with --mmproj, so the unit never serves. Names are what the molecule case and the tests use.
PROJECTOR_DEFECTS = {
    # mm.0.weight one merge group too narrow: the graph's mul_mat shapes disagree and ggml aborts while
    # the server reserves the vision graph at startup (GGML_ASSERT ggml_can_mul_mat, SIGABRT)
    "tensor_shape": "mm.0.weight takes 2*n_embd inputs instead of the merger's 4*n_embd",
    # a projector for another text model: mtmd refuses with "mismatch between text model (n_embd = ..)"
    "projection_dim": "mm.2 projects to half the text model's n_embd",
    # a truncated conversion: clip refuses with "unable to find tensor mm.2.bias"
    "missing_tensor": "mm.2.bias is not in the file",
}


# Broken projectors generate() writes beside the good one (name: (projector, defect)), so a deploy can
# fetch one from the lab's model mirror with a pinned size and sha256 like any payload file.
BROKEN_PROJECTORS = {"mmproj-qwen35-broken": ("mmproj-qwen35", "tensor_shape")}


def resolve_projector_params(name: str, scale: str = "small", **overrides) -> dict:
    if name not in PROJECTORS:
        raise ValueError(f"unknown projector {name!r}; choose one of {', '.join(PROJECTOR_NAMES)}")
    if scale not in PROJECTOR_RECIPES:
        raise ValueError(f"unknown scale {scale!r} for a projector; choose {', '.join(PROJECTOR_RECIPES)}")
    unknown = sorted(set(overrides) - PROJECTOR_KEYS)
    if unknown:
        raise ValueError(f"{name}: unknown override(s) {', '.join(unknown)}; allowed: {', '.join(sorted(PROJECTOR_KEYS))}")
    target = PROJECTORS[name]["projects_for"]
    p = {"seed": DEFAULT_SEED, "projection_dim": resolve_params(target, scale)["n_embd"]}
    p.update(PROJECTOR_RECIPES[scale])
    p.update(overrides)

    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ValueError(f"{name}: {msg}")

    for key in ("n_layer", "n_embd", "n_ff", "n_head", "patch_size", "image_size", "spatial_merge_size",
                "projection_dim"):
        need(isinstance(p[key], int) and p[key] > 0, f"{key} must be a positive int, got {p[key]!r}")
    need(p["n_embd"] % p["n_head"] == 0, f"n_embd ({p['n_embd']}) must be a multiple of n_head ({p['n_head']})")
    need((p["n_embd"] // p["n_head"]) % 8 == 0,
         f"head_dim n_embd/n_head ({p['n_embd'] // p['n_head']}) must be a multiple of 8: qwen3vl's M-RoPE "
         "rotates half of it in 4 equal sections of pairs")
    need(p["spatial_merge_size"] == 2, "b11434's qwen3vl graph merges 2x2 patches (spatial_merge_size 2)")
    need(p["image_size"] % (p["patch_size"] * p["spatial_merge_size"]) == 0,
         f"image_size ({p['image_size']}) must be a multiple of patch_size*spatial_merge_size "
         f"({p['patch_size'] * p['spatial_merge_size']})")
    return p


def projector_recipe_sha256(name: str, params: dict, defect: str | None = None) -> str:
    return hashlib.sha256(json.dumps(dict(recipe_of(name, params), defect=defect), sort_keys=True).encode()).hexdigest()


def _projector_tensors(p: dict, defect: str | None = None) -> list:
    """clip.cpp load_tensors for PROJECTOR_TYPE_QWEN3VL, prefix "v": (name, ggml shape, role)."""
    e, ff, ps, d = p["n_embd"], p["n_ff"], p["patch_size"], p["projection_dim"]
    merged = e * p["spatial_merge_size"] ** 2
    n_pos = (p["image_size"] // ps) ** 2
    t = [("v.patch_embd.weight", [ps, ps, 3, e], "matrix"),      # conv2d kernel [KW, KH, C_in, C_out]
         ("v.patch_embd.weight.1", [ps, ps, 3, e], "matrix"),    # the temporal pair's second frame
         ("v.patch_embd.bias", [e], "zeros"),
         ("v.position_embd.weight", [e, n_pos], "pos")]
    for i in range(p["n_layer"]):
        b = f"v.blk.{i}."
        t += [(b + "ln1.weight", [e], "ones"), (b + "ln1.bias", [e], "zeros"),
              _mat(b + "attn_qkv.weight", e, 3 * e), (b + "attn_qkv.bias", [3 * e], "zeros"),
              _mat(b + "attn_out.weight", e, e), (b + "attn_out.bias", [e], "zeros"),
              (b + "ln2.weight", [e], "ones"), (b + "ln2.bias", [e], "zeros"),
              _mat(b + "ffn_up.weight", e, ff), (b + "ffn_up.bias", [ff], "zeros"),
              _mat(b + "ffn_down.weight", ff, e), (b + "ffn_down.bias", [e], "zeros")]
    t += [("v.post_ln.weight", [e], "ones"), ("v.post_ln.bias", [e], "zeros"),
          _mat("mm.0.weight", merged // 2 if defect == "tensor_shape" else merged, merged),
          ("mm.0.bias", [merged], "zeros"),
          _mat("mm.2.weight", merged, d // 2 if defect == "projection_dim" else d)]
    if defect != "missing_tensor":
        t += [("mm.2.bias", [d // 2 if defect == "projection_dim" else d], "zeros")]
    return t


def _projector_values(seed: int, name: str, tname: str, shape: list[int], role: str) -> np.ndarray:
    if role == "zeros":
        return np.zeros(tuple(reversed(shape)), dtype=np.float32)
    if role == "pos":  # learned position embeddings: small, seeded
        rs = np.random.RandomState(_tensor_seed(seed, name, tname))
        return ((2.0 * rs.random_sample(tuple(reversed(shape))) - 1.0) * 0.02).astype(np.float32)
    if role == "matrix" and len(shape) == 4:  # conv kernel: fan-in is KW*KH*C_in
        rs = np.random.RandomState(_tensor_seed(seed, name, tname))
        bound = 0.5 / math.sqrt(shape[0] * shape[1] * shape[2])
        return ((2.0 * rs.random_sample(tuple(reversed(shape))) - 1.0) * bound).astype(np.float32)
    return _values(seed, name, tname, shape, role)


def write_projector(name: str, path, scale: str = "small", defect: str | None = None, **overrides) -> dict:
    """Write one mmproj GGUF (atomically) and return its manifest entry.

    Random weights: it encodes an image into projection_dim-wide embeddings that b11434's mtmd feeds
    the text model (so a prompt with an image carries more tokens than without), it describes nothing.
    Matrices and conv kernels are f16 (the deployed file is bf16; b11434's CPU conv path takes f16),
    norms, biases and position embeddings f32. defect: one of PROJECTOR_DEFECTS (write_broken_projector).
    """
    if defect is not None and defect not in PROJECTOR_DEFECTS:
        raise ValueError(f"unknown projector defect {defect!r}; choose one of {', '.join(PROJECTOR_DEFECTS)}")
    params = resolve_projector_params(name, scale, **overrides)
    path = Path(path)
    tensors = _projector_tensors(params, defect)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    stored_types = {}
    try:
        w = GGUFWriter(tmp, "clip")
        w.add_name(f"dankfleet-lab {name}" + (f" (broken: {defect})" if defect else ""))
        w.add_string("general.description",
                     f"dankfleet lab projector '{name}' ({PROJECTOR_TYPE}) for {PROJECTORS[name]['projects_for']}: "
                     f"random weights, seed {params['seed']}; generated by tests/lab/gen_models.py"
                     + (f"; DELIBERATELY BROKEN: {PROJECTOR_DEFECTS[defect]}" if defect else ""))
        w.add_file_type(int(LlamaFileType.MOSTLY_F16))
        w.add_string("clip.projector_type", PROJECTOR_TYPE)
        w.add_bool("clip.has_vision_encoder", True)
        w.add_bool("clip.has_audio_encoder", False)
        w.add_bool("clip.use_gelu", True)
        w.add_uint32("clip.vision.embedding_length", params["n_embd"])
        w.add_uint32("clip.vision.feed_forward_length", params["n_ff"])
        w.add_uint32("clip.vision.block_count", params["n_layer"])
        w.add_uint32("clip.vision.attention.head_count", params["n_head"])
        w.add_float32("clip.vision.attention.layer_norm_epsilon", params["layer_norm_eps"])
        w.add_uint32("clip.vision.projection_dim", params["projection_dim"])
        w.add_uint32("clip.vision.image_size", params["image_size"])
        w.add_uint32("clip.vision.patch_size", params["patch_size"])
        w.add_uint32("clip.vision.spatial_merge_size", params["spatial_merge_size"])
        w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
        w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
        for tname, shape, role in tensors:
            values = _projector_values(params["seed"], name, tname, shape, role)
            data = values.astype(np.float16) if role == "matrix" else values
            stored = "F16" if role == "matrix" else "F32"
            stored_types[stored] = stored_types.get(stored, 0) + 1
            w.add_tensor(tname, data)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return {
        "path": str(path),
        "size": path.stat().st_size,
        "sha256": file_sha256(path),
        "architecture": "clip",
        "kind": name,
        "role": "mmproj",
        "projects_for": PROJECTORS[name]["projects_for"],
        "projector_type": PROJECTOR_TYPE,
        "projection_dim": params["projection_dim"],
        "image_size": params["image_size"],
        "patch_size": params["patch_size"],
        "defect": defect,
        "scale": scale,
        "seed": params["seed"],
        "stored_types": stored_types,
        "n_tensors": len(tensors),
        "params": params,
        "recipe_sha256": projector_recipe_sha256(name, params, defect),
    }


def write_broken_projector(path, defect: str = "tensor_shape", name: str = "mmproj-qwen35",
                           scale: str = "small", **overrides) -> dict:
    """A projector b11434's llama-server refuses at startup with --mmproj (see PROJECTOR_DEFECTS);
    the default, a tensor of the wrong shape, aborts while the vision graph is reserved. Deterministic
    like the rest: same defect, same bytes."""
    if defect not in PROJECTOR_DEFECTS:
        raise ValueError(f"unknown projector defect {defect!r}; choose one of {', '.join(PROJECTOR_DEFECTS)}")
    return write_projector(name, path, scale, defect=defect, **overrides)


@contextlib.contextmanager
def _locked(out: Path):
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def generate(out, names=None, scale: str = "small", log=None) -> dict:
    """Write the named models and projectors (default: every model of the scale, and at the small and
    medium scales every projector and broken projector too) into out; reuse files whose recipe and
    sha256 match out/MANIFEST.json. Returns the manifest of the named entries; MANIFEST.json keeps entries not
    regenerated this time. A projector's entry has role "mmproj" (no vocabulary, architecture clip)."""
    out = Path(out)
    names = list(names or [n for n in MODEL_NAMES if n in RECIPES[scale]]
                 + (PROJECTOR_NAMES + list(BROKEN_PROJECTORS) if scale in ("small", "medium") else []))
    known = MODEL_NAMES + PROJECTOR_NAMES + list(BROKEN_PROJECTORS)
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown model name(s) {', '.join(bad)}; choose from {', '.join(known)}")
    with _locked(out):
        manifest_path = out / "MANIFEST.json"
        try:
            old = json.loads(manifest_path.read_text())
        except (FileNotFoundError, ValueError):
            old = {}
        result = {}
        for name in names:
            path = out / f"{name}.gguf"
            base, defect = BROKEN_PROJECTORS.get(name, (name, None))
            if base in PROJECTORS:
                params = resolve_projector_params(base, scale)
                want = projector_recipe_sha256(base, params, defect)
            else:
                params = resolve_params(name, scale)
                want = recipe_sha256(name, params)
            prev = old.get(name)
            if (prev and prev.get("recipe_sha256") == want and path.is_file()
                    and prev.get("path") == str(path) and file_sha256(path) == prev.get("sha256")):
                result[name] = prev
                if log:
                    log(f"{name}: up to date ({prev['sha256'][:12]})")
                continue
            if base in PROJECTORS:
                result[name] = write_projector(base, path, scale, defect=defect)
            else:
                result[name] = write_model(name, path, scale)
            if log:
                log(f"{name}: wrote {result[name]['size']} B ({result[name]['sha256'][:12]})")
        merged = dict(old)
        merged.update(result)
        tmp = manifest_path.with_suffix(".json.part")
        tmp.write_text(json.dumps(merged, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, manifest_path)
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to write the models and MANIFEST.json into")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=MODEL_NAMES + PROJECTOR_NAMES + list(BROKEN_PROJECTORS),
                    help="generate only these models / projectors")
    ap.add_argument("--scale", choices=sorted(RECIPES), default="small",
                    help="small: 0.1-1.2 MB each, for CI; medium: 40-650 MB each, for planner accuracy runs; "
                         "real: the deployed 27B shape (qwen35 only), ~27 GiB at q8_0 with fill=tile")
    args = ap.parse_args(argv)
    manifest = generate(args.out, args.only, args.scale, log=lambda m: print(f"gen_models: {m}", file=sys.stderr))
    json.dump(manifest, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
