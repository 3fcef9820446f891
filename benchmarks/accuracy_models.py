"""GGUF headers for the planner-accuracy matrix, written as sparse files.

llama.cpp sizes every buffer from the GGUF header alone (tensor shapes and
types, hyperparameters); the tensor bytes are never inspected at load. So the
models of the accuracy matrix are written as a real header and tensor table
followed by a *hole*: the file is truncated to its full length, reads back as
zeros, costs no disk and is written in milliseconds. The same writer rebuilds
a fixture's model from the header stored in the fixture, byte for byte, so a
recorded measurement can be re-planned without the original file.

A header is plain data (``{"arch", "kv": [[key, type, value]], "tensors":
[[name, ggml_type, [ne0, ne1, ...]]], "vocab": {...}}``); the token list is not
stored but regenerated from ``vocab`` (it is a synthetic SPM vocabulary).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

T = GGMLQuantizationType

# Element types by name, as the header stores them.
TYPES = {"F32": T.F32, "F16": T.F16, "Q8_0": T.Q8_0, "Q4_0": T.Q4_0, "BF16": T.BF16}


def tensor_nbytes(ggml_type, ne):
    """Bytes of one tensor of element type ggml_type and shape ne (ggml order)."""
    block, size = GGML_QUANT_SIZES[TYPES[ggml_type]]
    n = 1
    for d in ne:
        n *= int(d)
    if ne[0] % block:
        raise ValueError(f"row of {ne[0]} elements is not a multiple of the {ggml_type} block of {block}")
    return n // block * size


# ---------------------------------------------------------------------------
# Model specs of the matrix. Dimensions are chosen so that KV, compute and
# weights each land in the hundreds of MiB at the measured contexts, while a
# load over two local RPC servers stays a few seconds on a shared 2-core box.
# ---------------------------------------------------------------------------

SPECS = {
    # dense llama, Q8_0 matrices, untied output
    "dense": {
        "arch": "llama", "n_vocab": 32000, "n_embd": 1024, "n_ff": 2816, "n_layer": 16,
        "n_head": 16, "n_head_kv": 4, "head_dim": 64, "n_ctx_train": 65536,
        "wtype": "Q8_0", "tied": False,
    },
    # qwen35 hybrid: 3 Gated DeltaNet + 1 gated attention, repeated
    "hybrid": {
        "arch": "qwen35", "n_vocab": 65536, "n_embd": 1024, "n_ff": 3072, "n_layer": 16,
        "n_head": 8, "n_head_kv": 2, "head_dim": 256, "n_ctx_train": 262144,
        "full_attention_interval": 4, "ssm_d_conv": 4, "ssm_d_state": 128,
        "ssm_n_group": 8, "ssm_dt_rank": 16, "wtype": "Q8_0", "tied": False, "nextn": 0,
    },
    # the same with one nextn (MTP) block appended
    "hybrid_mtp": {
        "arch": "qwen35", "n_vocab": 65536, "n_embd": 1024, "n_ff": 3072, "n_layer": 16,
        "n_head": 8, "n_head_kv": 2, "head_dim": 256, "n_ctx_train": 262144,
        "full_attention_interval": 4, "ssm_d_conv": 4, "ssm_d_state": 128,
        "ssm_n_group": 8, "ssm_dt_rank": 16, "wtype": "Q8_0", "tied": False, "nextn": 1,
    },
    # gemma3: 5 sliding-window layers per full-attention layer, tied embeddings
    "swa": {
        "arch": "gemma3", "n_vocab": 65536, "n_embd": 1152, "n_ff": 4608, "n_layer": 12,
        "n_head": 8, "n_head_kv": 4, "head_dim": 256, "n_ctx_train": 131072,
        "sliding_window": 1024, "wtype": "F16", "tied": True,
    },
    # a small dense drafter sharing the dense model's vocabulary (draft-simple)
    "drafter": {
        "arch": "llama", "n_vocab": 32000, "n_embd": 512, "n_ff": 1408, "n_layer": 4,
        "n_head": 8, "n_head_kv": 4, "head_dim": 64, "n_ctx_train": 65536,
        "wtype": "F16", "tied": False,
    },
}


def _kv(arch, spec):
    a = arch
    kv = [
        ["general.architecture", "STRING", arch],
        ["general.name", "STRING", f"dankfleet-accuracy-{arch}"],
        [f"{a}.context_length", "UINT32", spec["n_ctx_train"]],
        [f"{a}.embedding_length", "UINT32", spec["n_embd"]],
        [f"{a}.block_count", "UINT32", spec["n_layer"] + spec.get("nextn", 0)],
        [f"{a}.feed_forward_length", "UINT32", spec["n_ff"]],
        [f"{a}.attention.head_count", "UINT32", spec["n_head"]],
        [f"{a}.attention.head_count_kv", "UINT32", spec["n_head_kv"]],
        [f"{a}.attention.key_length", "UINT32", spec["head_dim"]],
        [f"{a}.attention.value_length", "UINT32", spec["head_dim"]],
        [f"{a}.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6],
        [f"{a}.rope.freq_base", "FLOAT32", 10000.0],
    ]
    if arch == "qwen35":
        kv += [
            [f"{a}.rope.dimension_count", "UINT32", 64],
            [f"{a}.rope.dimension_sections", "ARRAY[INT32]", [11, 11, 10, 0]],
            [f"{a}.ssm.conv_kernel", "UINT32", spec["ssm_d_conv"]],
            [f"{a}.ssm.inner_size", "UINT32", spec["ssm_d_state"] * spec["ssm_dt_rank"]],
            [f"{a}.ssm.state_size", "UINT32", spec["ssm_d_state"]],
            [f"{a}.ssm.time_step_rank", "UINT32", spec["ssm_dt_rank"]],
            [f"{a}.ssm.group_count", "UINT32", spec["ssm_n_group"]],
            [f"{a}.full_attention_interval", "UINT32", spec["full_attention_interval"]],
        ]
        if spec.get("nextn"):
            kv.append([f"{a}.nextn_predict_layers", "UINT32", spec["nextn"]])
    else:
        kv.append([f"{a}.rope.dimension_count", "UINT32", spec["head_dim"]])
    if arch == "gemma3":
        kv.append([f"{a}.attention.sliding_window", "UINT32", spec["sliding_window"]])
    kv += [
        ["tokenizer.ggml.model", "STRING", "llama"],
        ["tokenizer.ggml.bos_token_id", "UINT32", 1],
        ["tokenizer.ggml.eos_token_id", "UINT32", 2],
        ["tokenizer.ggml.unknown_token_id", "UINT32", 0],
        ["tokenizer.ggml.add_bos_token", "BOOL", True],
    ]
    return kv


def _tensors(spec):
    """Tensor table [name, type, ne] in ggml order (ne[0] is the row length)."""
    arch, w = spec["arch"], spec["wtype"]
    e, f, v = spec["n_embd"], spec["n_ff"], spec["n_vocab"]
    hd, nh, nkv = spec["head_dim"], spec["n_head"], spec["n_head_kv"]
    out = [["token_embd.weight", w, [e, v]], ["output_norm.weight", "F32", [e]]]
    if not spec["tied"]:
        out.append(["output.weight", w, [e, v]])

    def ffn(i):
        return [[f"blk.{i}.ffn_gate.weight", w, [e, f]],
                [f"blk.{i}.ffn_up.weight", w, [e, f]],
                [f"blk.{i}.ffn_down.weight", w, [f, e]]]

    def attn(i, q_mult=1):
        return [[f"blk.{i}.attn_q.weight", w, [e, hd * nh * q_mult]],
                [f"blk.{i}.attn_k.weight", w, [e, hd * nkv]],
                [f"blk.{i}.attn_v.weight", w, [e, hd * nkv]],
                [f"blk.{i}.attn_output.weight", w, [hd * nh, e]]]

    for i in range(spec["n_layer"]):
        t = [[f"blk.{i}.attn_norm.weight", "F32", [e]]]
        if arch == "llama":
            t += attn(i) + [[f"blk.{i}.ffn_norm.weight", "F32", [e]]] + ffn(i)
        elif arch == "gemma3":
            t += attn(i) + [
                [f"blk.{i}.attn_q_norm.weight", "F32", [hd]],
                [f"blk.{i}.attn_k_norm.weight", "F32", [hd]],
                [f"blk.{i}.post_attention_norm.weight", "F32", [e]],
                [f"blk.{i}.ffn_norm.weight", "F32", [e]],
                [f"blk.{i}.post_ffw_norm.weight", "F32", [e]],
            ] + ffn(i)
        elif arch == "qwen35":
            t.append([f"blk.{i}.post_attention_norm.weight", "F32", [e]])
            if (i + 1) % spec["full_attention_interval"] == 0:
                t += attn(i, q_mult=2) + [
                    [f"blk.{i}.attn_q_norm.weight", "F32", [hd]],
                    [f"blk.{i}.attn_k_norm.weight", "F32", [hd]],
                ]
            else:
                ds, ng, dtr, dc = spec["ssm_d_state"], spec["ssm_n_group"], spec["ssm_dt_rank"], spec["ssm_d_conv"]
                key_dim, value_dim = ds * ng, ds * dtr
                t += [
                    [f"blk.{i}.attn_qkv.weight", w, [e, key_dim * 2 + value_dim]],
                    [f"blk.{i}.attn_gate.weight", w, [e, value_dim]],
                    [f"blk.{i}.ssm_conv1d.weight", "F32", [dc, key_dim * 2 + value_dim]],
                    [f"blk.{i}.ssm_dt.bias", "F32", [dtr]],
                    [f"blk.{i}.ssm_a", "F32", [dtr]],
                    [f"blk.{i}.ssm_beta.weight", "F16", [e, dtr]],
                    [f"blk.{i}.ssm_alpha.weight", "F16", [e, dtr]],
                    [f"blk.{i}.ssm_norm.weight", "F32", [ds]],
                    [f"blk.{i}.ssm_out.weight", w, [value_dim, e]],
                ]
            t += ffn(i)
        out += t
    if arch == "qwen35":
        for i in range(spec["n_layer"], spec["n_layer"] + spec.get("nextn", 0)):
            out += [[f"blk.{i}.attn_norm.weight", "F32", [e]],
                    [f"blk.{i}.post_attention_norm.weight", "F32", [e]]]
            out += attn(i, q_mult=2) + [
                [f"blk.{i}.attn_q_norm.weight", "F32", [hd]],
                [f"blk.{i}.attn_k_norm.weight", "F32", [hd]],
            ] + ffn(i) + [
                [f"blk.{i}.nextn.eh_proj.weight", w, [2 * e, e]],
                [f"blk.{i}.nextn.enorm.weight", "F32", [e]],
                [f"blk.{i}.nextn.hnorm.weight", "F32", [e]],
                [f"blk.{i}.nextn.shared_head_norm.weight", "F32", [e]],
            ]
    return out


def header_for(kind, **overrides):
    """The header (plain data) of matrix model `kind`, with spec overrides."""
    spec = dict(SPECS[kind])
    spec.update(overrides)
    return {
        "kind": kind,
        "spec": spec,
        "arch": spec["arch"],
        "kv": _kv(spec["arch"], spec),
        "tensors": _tensors(spec),
        "vocab": {"rule": "dankfleet-spm-v1", "n_vocab": spec["n_vocab"]},
    }


def _vocab(n_vocab):
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    toks += [f"\u2581t{i}" for i in range(n_vocab - len(toks))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(n_vocab - 259)]
    return toks, scores, types


_VT = {
    "STRING": GGUFValueType.STRING, "UINT32": GGUFValueType.UINT32, "INT32": GGUFValueType.INT32,
    "FLOAT32": GGUFValueType.FLOAT32, "BOOL": GGUFValueType.BOOL, "UINT64": GGUFValueType.UINT64,
}


def write_sparse_gguf(header, path):
    """Write `header` as a GGUF at `path` whose tensor data is a hole of zeros.

    Returns {"path", "file_size", "header_sha256"}.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    w = GGUFWriter(str(tmp), header["arch"], use_temp_file=False)
    # GGUFWriter adds general.architecture itself; the rest comes from the header
    for key, vtype, value in header["kv"]:
        if key == "general.architecture":
            continue
        if vtype.startswith("ARRAY["):
            sub = _VT[vtype[6:-1]]
            w.add_key_value(key, list(value), GGUFValueType.ARRAY, sub_type=sub)
        else:
            w.add_key_value(key, value, _VT[vtype])
    toks, scores, types = _vocab(header["vocab"]["n_vocab"])
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    for name, ttype, ne in header["tensors"]:
        nbytes = tensor_nbytes(ttype, ne)
        # numpy order is ggml order reversed; the dtype only selects F32/F16 when raw_dtype is None
        w.add_tensor_info(name, list(reversed(ne)), np.dtype(np.float32), nbytes, raw_dtype=TYPES[ttype])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    w.write_padding(fout, fout.tell())
    data_start = fout.tell()
    fout.flush()
    head = Path(tmp).read_bytes()[:data_start]
    total = data_start
    for name, ttype, ne in header["tensors"]:
        total += GGUFWriter.ggml_pad(tensor_nbytes(ttype, ne), w.data_alignment)
    w.close()
    os.truncate(tmp, total)
    os.replace(tmp, path)
    return {"path": str(path), "file_size": total, "header_sha256": hashlib.sha256(head).hexdigest()}


def header_facts(header):
    """Arithmetic facts of a header that the accuracy comparison needs."""
    spec = header["spec"]
    by_layer = {}
    other = {}
    for name, ttype, ne in header["tensors"]:
        nb = tensor_nbytes(ttype, ne)
        if name.startswith("blk."):
            il = int(name.split(".")[1])
            by_layer[il] = by_layer.get(il, 0) + nb
        else:
            other[name] = nb
    return {"spec": spec, "layer_bytes": [by_layer[i] for i in sorted(by_layer)], "other_bytes": other}


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("kinds", nargs="*", default=sorted(SPECS))
    args = p.parse_args()
    for k in args.kinds:
        info = write_sparse_gguf(header_for(k), Path(args.out) / f"{k}.gguf")
        print(json.dumps(info))
