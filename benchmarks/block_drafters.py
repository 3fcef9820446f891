"""Real-size block drafters for the planner's accuracy runs (issue 24), as header-only GGUFs.

Two drafters at the runbook's sizes beside the 27B qwen35 target (``qwen35_27b``, vocab 248320,
n_embd 5120, the five extract layers 1/16/31/46/61), written the way b11434's
``llama_model_dflash::load_arch_tensors`` (src/models/dflash.cpp) reads them:

* ``dflash2_r`` -- DFlash2-like (tests/fixtures/dflash2.json): 5 sliding-window layers (window 2048),
  block 8, the selector (rank 256, top-k 16) and the four dynamic convolutions per layer. Conv kernel 3,
  not the real 4: b11434 reserves max(1024, 12 x n_tensors) graph nodes for a DFlash2 draft and 5 layers
  at kernel 4 overflow it (the same reason as the medium lab drafter); the kernel moves only the
  conv_proj weights, which the facts read from the header like every other tensor.
* ``dspark_r`` -- DSpark-like (tests/fixtures/dspark.json): 5 full-attention layers (no window: its draft
  KV caches the target's whole context), block 7, the Markov head (rank 256) and a confidence head.

Neither carries token embeddings or an lm_head: both share the target's through ``ctx_other``, as the
real ones do. The tensor data is a hole of zeros (``header_only``): llama.cpp sizes every buffer from
the header, and a zero model decodes (and drafts) like any other.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

import import_paths  # noqa: F401 - tests/lab on sys.path
import gen_models as g
from gguf import GGUFWriter

TARGET_LAYERS = [1, 16, 31, 46, 61]
COMMON = {"n_layer": 5, "n_embd": 5120, "n_head": 32, "n_head_kv": 8, "head_dim": 128, "n_vocab": 248320,
          "ctx_train": 262144, "rope_freq_base": 10000000.0, "rms_eps": 1e-6, "tensor_type": "q8_0",
          "target_layers": TARGET_LAYERS}
MODELS = {
    "dflash2_r": dict(COMMON, kind="dflash2", n_ff=17824, sliding_window=2048, block_size=8, selector_rank=256,
                      selector_top_k=16, conv_kernel_size=3, conv_group_size=64),
    "dspark_r": dict(COMMON, kind="dspark", n_ff=10912, sliding_window=0, block_size=7, markov_rank=256),
}
# the spec type and the largest n_max each one drafts at (DFlash: block - 1; DSpark: n_max as the runbook runs it)
SPEC = {"dflash2_r": ("draft-dflash", 7), "dspark_r": ("draft-dspark", 6)}


def _tensors(p):
    e, hd = p["n_embd"], p["head_dim"]
    mat, norm = g._mat, g._norm
    t = [mat("fc.weight", len(p["target_layers"]) * e, e), norm("enc.output_norm.weight", e),
         norm("output_norm.weight", e)]
    if p["kind"] == "dflash2":
        rank, kernel = p["selector_rank"], p["conv_kernel_size"]
        projected = 2 * kernel * (e // p["conv_group_size"])
        t += [mat("selector_predecessor.weight", rank, p["n_vocab"]), mat("selector_successor.weight", rank, p["n_vocab"]),
              mat("selector_hidden.weight", e, rank)]
    else:
        r = p["markov_rank"]
        t += [mat("markov_w1.weight", r, p["n_vocab"]), mat("markov_w2.weight", r, p["n_vocab"]),
              ("conf_proj.weight", [e + r, 1], "ones"), ("conf_proj.bias", [1], "ones")]
    for i in range(p["n_layer"]):
        b = f"blk.{i}."
        t += [norm(b + "attn_norm.weight", e), mat(b + "attn_q.weight", e, hd * p["n_head"]),
              mat(b + "attn_k.weight", e, hd * p["n_head_kv"]), mat(b + "attn_v.weight", e, hd * p["n_head_kv"]),
              mat(b + "attn_output.weight", hd * p["n_head"], e), norm(b + "attn_q_norm.weight", hd),
              norm(b + "attn_k_norm.weight", hd), norm(b + "ffn_norm.weight", e),
              mat(b + "ffn_gate.weight", e, p["n_ff"]), mat(b + "ffn_down.weight", p["n_ff"], e),
              mat(b + "ffn_up.weight", e, p["n_ff"])]
        if p["kind"] == "dflash2":
            kernel = p["conv_kernel_size"]
            projected = 2 * kernel * (e // p["conv_group_size"])
            t += [(b + "attn_conv_base", [e, kernel, 2], "conv_base"), mat(b + "attn_conv_proj.weight", e, projected),
                  (b + "ffn_conv_base", [e, kernel, 2], "conv_base"), mat(b + "ffn_conv_proj.weight", e, projected)]
    return t


def _metadata(w, name, p, vocab):
    def k(suffix):
        return "dflash." + suffix

    w.add_name(f"dankfleet-lab {name}")
    w.add_file_type(int(g.TENSOR_TYPES[p["tensor_type"]][1]))
    g.add_attention_hparams(w, k, p, p["n_layer"])
    w.add_uint32(k("vocab_size"), p["n_vocab"])
    w.add_array(k("rope.dimension_sections"), [p["head_dim"] // 2, 0, 0, 0])
    w.add_uint32(k("block_size"), p["block_size"])
    w.add_array(k("target_layers"), list(p["target_layers"]))
    w.add_bool(k("attention.causal"), False)
    if p["kind"] == "dflash2":
        for key in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
            w.add_uint32(k(key), p[key])
        w.add_uint32(k("attention.sliding_window"), p["sliding_window"])
        w.add_array(k("attention.sliding_window_pattern"), [True] * p["n_layer"])
    g.add_tokenizer(w, vocab)
    w.add_uint32("tokenizer.ggml.mask_token_id", vocab["special"]["<|mask|>"])


def recipe_hash(name, params, *sources):
    """The manifest's recipe_sha256 of a header-only model: its name, its parameters and the generator's sources."""
    src = b"".join(Path(f).read_bytes() for f in sources)
    return hashlib.sha256(json.dumps({"name": name, "params": params}, sort_keys=True).encode() + src).hexdigest()


def recipe_sha256(name):
    return recipe_hash(name, MODELS[name], __file__, g.__file__)


def write_header_only(path, arch, metadata, tensors, recipe, kind):
    """Write a GGUF of architecture `arch` to path atomically, header only (the data a hole of zeros): metadata(w)
    writes its KV pairs, `tensors` yields (name, shape, nbytes, stored type); its manifest entry."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    try:
        w = GGUFWriter(tmp, arch)
        metadata(w)
        total = 0
        for tname, shape, nbytes, stored in tensors:
            w.add_tensor_info(tname, list(reversed(shape)), np.dtype(np.float32), nbytes, raw_dtype=stored)
            total += GGUFWriter.ggml_pad(nbytes, w.data_alignment)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        fout = w.fout[0]
        w.write_padding(fout, fout.tell())
        end = fout.tell() + total
        w.close()
        os.truncate(tmp, end)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return {"path": str(path), "size": path.stat().st_size, "sha256": None, "header_only": True, "seed": None,
            "recipe_sha256": recipe, "kind": kind}


def ensure_header_only(name, out_dir, write_fn, recipe):
    """`name`.gguf under out_dir, written by write_fn(name, path) unless its manifest names this recipe and size."""
    path = Path(out_dir) / f"{name}.gguf"
    manifest = path.with_suffix(".json")
    if path.exists() and manifest.exists():
        entry = json.loads(manifest.read_text())
        if entry.get("recipe_sha256") == recipe and entry.get("size") == path.stat().st_size:
            return entry
    entry = write_fn(name, path)
    manifest.write_text(json.dumps(entry, indent=1) + "\n")
    return entry


def write(name, path):
    """Write drafter `name` header-only (a hole of zeros for the data) to path; its manifest entry."""
    p = MODELS[name]
    vocab = g.build_vocab(p["n_vocab"])
    qtype = g.TENSOR_TYPES[p["tensor_type"]][0]

    def tensors():
        for tname, shape, role in _tensors(p):
            nbytes, stored = g._stored_nbytes(shape, role, qtype)
            yield tname, shape, nbytes, stored

    return write_header_only(path, "dflash", lambda w: _metadata(w, name, p, vocab), tensors(), recipe_sha256(name),
                             p["kind"])


def ensure(name, out_dir):
    return ensure_header_only(name, out_dir, write, recipe_sha256(name))


if __name__ == "__main__":
    import sys
    for n in sys.argv[2:] or sorted(MODELS):
        print(json.dumps(ensure(n, sys.argv[1])))
