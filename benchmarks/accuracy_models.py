"""The models of the planner-accuracy matrix, and their headers as plain data.

The models are the lab generator's (tests/lab/gen_models.py ``write_model``) at
``scale="medium"`` with a few overrides, so that KV, compute and weights land in
the hundreds of MiB at the measured contexts. A fixture records, per model, the
generator's recipe (kind, overrides, seed, recipe and file sha256) and the GGUF
header as plain data: metadata (the tokenizer's arrays only by length) and the
tensor table. llama.cpp sizes every buffer from exactly that, never from tensor
bytes, so ``write_sparse_gguf`` can rebuild a file that any header reader (the
planner's gguf_info included) reads like the original: the same metadata, the
same tensor table, and a hole of zeros where the tensor data was. It takes
milliseconds and no disk, which is what lets the accuracy test re-plan every
recorded measurement without the hundreds of MiB of the original files.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

import import_paths  # noqa: F401 - run as a script: tests/lab (gen_models) and the collection on sys.path
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import read_gguf

REPO = Path(__file__).resolve().parents[1]

# matrix name -> (gen_models kind, overrides at scale "medium")
MODELS = {
    "dense": ("dense-llama", {"tensor_type": "q8_0"}),
    "hybrid": ("qwen35-hybrid", {"tensor_type": "q8_0"}),
    "hybrid_mtp": ("qwen35-mtp", {"tensor_type": "q8_0"}),
    "swa": ("swa-dense", {"tensor_type": "f16"}),
    "drafter": ("draft-small", {"tensor_type": "f16"}),
    "dflash": ("draft-dflash", {"tensor_type": "q8_0"}),
    # geometry variants: they separate the compute law's n_embd and n_ff terms
    "dense_ff8k": ("dense-llama", {"tensor_type": "q8_0", "n_ff": 8192}),
    "dense_e2k": ("dense-llama", {"tensor_type": "q8_0", "n_embd": 2048, "n_head": 32}),
    # GiB-scale (issue 9, the CUDA matrix on an H200): buffers of GiBs, weights of a few GiB each
    "dense_g": ("dense-llama", {"tensor_type": "q8_0", "n_layer": 28, "n_embd": 3072, "n_ff": 8192, "n_head": 24,
                                "n_head_kv": 8, "head_dim": 128}),
    "hybrid_mtp_g": ("qwen35-mtp", {"tensor_type": "q8_0", "n_layer": 24, "n_embd": 2560, "n_ff": 9216,
                                    "n_head": 16, "n_head_kv": 4, "head_dim": 256, "ssm_d_state": 128,
                                    "ssm_n_group": 16, "ssm_dt_rank": 32}),
    # real scale (issue 19): the runbook's 27B qwen35 hybrid with its MTP block, q8_0, tiled random weights
    # (gen_models scale "real"). The header declares a 1048576-token training context so that on one
    # 141 GB H200 the planner's `ctx_size: max` is bound by the memory floor, not by the model
    "qwen35_27b": ("qwen35-mtp", {"ctx_train": 1048576}),
    # issue 17: a gemma3-like sliding-window model (a 12B-class layer at half depth: 24 layers, 4 of them
    # full attention, head_dim 256, window 1024), q8_0 and tiled, for CUDA FA over a q8_0 KV at 131072+
    "swa_g": ("swa-dense", {"tensor_type": "q8_0", "fill": "tile", "n_layer": 24, "n_embd": 3840, "n_ff": 15360,
                            "n_head": 16, "n_head_kv": 8, "head_dim": 256, "sliding_window": 1024,
                            "sliding_window_pattern": 6}),
}
# the generator's scale per matrix model (default "medium")
SCALES = {"qwen35_27b": "real"}

# token arrays are recorded by length: they are large and no sizing law reads their contents
BIG_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


def gen_models():
    import gen_models as g
    return g


# ACCURACY_MODELS_SHRINK=1: the GiB-scale models at the generator's small scale, same kind, fill and tensor
# type -- a CPU rehearsal of a device pipeline runs the same code on files of a few hundred KiB
SHRINK_KEYS = ("tensor_type", "fill", "ctx_train")


def shape_of(name):
    """(kind, scale, overrides) of matrix model `name`, shrunk under ACCURACY_MODELS_SHRINK=1."""
    kind, overrides = MODELS[name]
    scale = SCALES.get(name, "medium")
    if os.environ.get("ACCURACY_MODELS_SHRINK") == "1":
        overrides = {k: v for k, v in overrides.items() if k in SHRINK_KEYS}
        scale = "small"
    return kind, scale, overrides


def ensure_model(name, out_dir):
    """Generate matrix model `name` into out_dir (once); return the generator's manifest entry."""
    kind, scale, overrides = shape_of(name)
    g = gen_models()
    params = g.resolve_params(kind, scale, **overrides)
    recipe = g.recipe_sha256(kind, params)
    path = Path(out_dir) / f"{name}.gguf"
    manifest = path.with_suffix(".json")
    if path.exists() and manifest.exists():
        entry = json.loads(manifest.read_text())
        if entry.get("recipe_sha256") == recipe and entry.get("size") == path.stat().st_size:
            return entry
    entry = g.write_model(kind, path, scale=scale, **overrides)
    manifest.write_text(json.dumps(entry, indent=1, default=str) + "\n")
    return entry


def dump_header(path):
    """The header of the GGUF at path as plain data (see the module docstring).

    Read by the collection's own reader (module_utils/plan/gguf_reader, the planner's): a 248320-token vocabulary
    takes it a quarter of a second where gguf-py's GGUFReader takes six. The recorded headers were dumped by
    gguf-py; the tests that rebuild them compare this reader's dump with those recordings.
    """
    r = read_gguf(str(path))
    kv, arrays = [], {}
    for name, value in r.fields.items():
        types = r.field_types[name].replace("]", "").split("[")   # "ARRAY[STRING]" -> ["ARRAY", "STRING"]
        if name in BIG_ARRAYS:
            arrays[name] = {"type": types[-1], "length": len(value)}
            continue
        kv.append([name, types, value])
    tensors = [[t.name, t.type_name, list(t.shape)] for t in r.tensors]
    return {"kv": kv, "arrays": arrays, "tensors": tensors, "alignment": r.alignment,
            "file_size": os.path.getsize(path)}


def tensor_nbytes(type_name, ne):
    block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name]]
    n = 1
    for d in ne:
        n *= int(d)
    return n // block * size


def _dummy_array(spec):
    n, t = spec["length"], spec["type"]
    if t == "STRING":
        return GGUFValueType.STRING, [f"t{i}" for i in range(n)]
    if t == "FLOAT32":
        return GGUFValueType.FLOAT32, [0.0] * n
    return GGUFValueType[t], [1] * n


def write_sparse_gguf(header, path):
    """Rebuild header (from dump_header) at path: real metadata and tensor table, zeros for data.

    The tokenizer's arrays come back with their recorded lengths and placeholder contents.
    Returns the rebuilt file's path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arch = next(v for k, _t, v in header["kv"] if k == "general.architecture")
    w = GGUFWriter(str(path), arch, use_temp_file=False)
    for key, types, value in header["kv"]:
        if key == "general.architecture":
            continue
        if types[0] == "ARRAY":
            w.add_key_value(key, list(value), GGUFValueType.ARRAY, sub_type=GGUFValueType[types[-1]])
        else:
            w.add_key_value(key, value, GGUFValueType[types[0]])
    for key, spec in header["arrays"].items():
        sub, vals = _dummy_array(spec)
        w.add_key_value(key, vals, GGUFValueType.ARRAY, sub_type=sub)
    if header.get("alignment"):
        w.data_alignment = header["alignment"]
    total = 0
    for name, tname, ne in header["tensors"]:
        nb = tensor_nbytes(tname, ne)
        # numpy-order shape; with a non-uint8 dtype and raw_dtype the shape is taken as the element shape
        w.add_tensor_info(name, list(reversed(ne)), np.dtype(np.float32), nb, raw_dtype=GGMLQuantizationType[tname])
        total += GGUFWriter.ggml_pad(nb, w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    w.write_padding(fout, fout.tell())
    data_start = fout.tell()
    w.close()
    os.truncate(path, data_start + total)
    return str(path)


def header_sha256(header):
    return hashlib.sha256(json.dumps({k: header[k] for k in ("kv", "arrays", "tensors")},
                                     sort_keys=True).encode()).hexdigest()


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description="generate the accuracy matrix's models")
    p.add_argument("--out", required=True)
    p.add_argument("names", nargs="*", default=sorted(MODELS))
    args = p.parse_args()
    for n in args.names:
        e = ensure_model(n, args.out)
        print(json.dumps({"name": n, "path": e["path"], "size": e["size"], "sha256": e["sha256"]}))
