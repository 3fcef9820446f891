"""Shared helpers for the planner's unit tests (gguf_reader, gguf_facts, gguf_info, fit_plan)."""
import json
import math
import os

import numpy as np

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import read_gguf

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

GIB = 1024 ** 3
MIB = 1024 ** 2
R9700 = 34208743424


def fixture(name):
    with open(os.path.join(FIXTURES, name + ".json")) as fh:
        return json.load(fh)


def r9700s():
    return [{"name": "ROCm0", "vram_total_bytes": R9700, "vram_reserved_bytes": 0},
            {"name": "ROCm1", "vram_total_bytes": R9700, "vram_reserved_bytes": 0}]


def write_gguf(path, arch, kv=None, tensors=None, endian=None, alignment=None):
    """A small GGUF through the gguf package's GGUFWriter.

    kv: {key: value} (ints -> UINT32, floats -> FLOAT32, str, bool, lists); a key given as
    (value, GGUFValueType) picks the type. tensors: {name: (shape_ggml_order, type_name)}; data is
    random bytes of the right size for any ggml type (content does not matter to a header reader).
    """
    import gguf
    from gguf import GGMLQuantizationType, GGUFValueType
    kwargs = {}
    if endian == "big":
        kwargs["endianess"] = gguf.GGUFEndian.BIG
    w = gguf.GGUFWriter(str(path), arch, **kwargs)
    if alignment:
        w.add_uint32("general.alignment", alignment)
        w.data_alignment = alignment
    for key, value in (kv or {}).items():
        if isinstance(value, tuple):
            value, vtype = value
            if vtype == GGUFValueType.ARRAY:
                w.add_array(key, value)
            else:
                w.add_key_value(key, value, vtype)
        elif isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, list):
            w.add_array(key, value)
        else:
            raise TypeError(key)
    rng = np.random.RandomState(7)
    for name, (shape, tname) in (tensors or {}).items():
        qtype = GGMLQuantizationType[tname]
        blck, size = gguf.GGML_QUANT_SIZES[qtype]
        n_rows = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        nbytes = shape[0] // blck * size * n_rows
        raw = rng.randint(0, 255, size=nbytes, dtype=np.uint8)
        # raw_shape is the byte shape in numpy order: outer dims reversed, the row in bytes last
        raw_shape = list(reversed(shape[1:])) + [shape[0] // blck * size]
        w.add_tensor(name, raw.reshape(raw_shape), raw_shape=raw_shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def qwen35_kv(n_layer_all=9, nextn=1, interval=4, n_embd=64, head_kv=2, head_dim=32, ctx=4096):
    return {
        "qwen35.block_count": n_layer_all, "qwen35.nextn_predict_layers": nextn, "qwen35.context_length": ctx,
        "qwen35.embedding_length": n_embd, "qwen35.feed_forward_length": 128, "qwen35.attention.head_count": 4,
        "qwen35.attention.head_count_kv": head_kv, "qwen35.attention.key_length": head_dim,
        "qwen35.attention.value_length": head_dim, "qwen35.full_attention_interval": interval,
        "qwen35.ssm.conv_kernel": 4, "qwen35.ssm.inner_size": 128, "qwen35.ssm.state_size": 16,
        "qwen35.ssm.group_count": 2, "qwen35.ssm.time_step_rank": 8,
        "tokenizer.ggml.tokens": ["t%d" % i for i in range(96)],
    }


def qwen35_tensors(n_layer_all=9, n_embd=64, ttype="Q8_0"):
    t = {"token_embd.weight": ([n_embd, 96], "F16"), "output_norm.weight": ([n_embd], "F32"),
         "output.weight": ([n_embd, 96], ttype)}
    for il in range(n_layer_all):
        t["blk.%d.attn_norm.weight" % il] = ([n_embd], "F32")
        t["blk.%d.ffn_up.weight" % il] = ([n_embd, 128], ttype)
        t["blk.%d.ffn_down.weight" % il] = ([128, n_embd], ttype)
    return t


def assert_same_as_gguf_reader(path):
    """Field by field: our parse of path against gguf.GGUFReader's; returns ours."""
    import gguf
    ours = read_gguf(path)
    ref = gguf.GGUFReader(path)
    assert ours.alignment == ref.alignment
    assert ours.data_offset == ref.data_offset
    ref_fields = dict((k, f) for k, f in ref.fields.items() if not k.startswith("GGUF."))
    assert sorted(ours.fields) == sorted(ref_fields)
    for key, f in ref_fields.items():
        ref_val = f.contents()
        val = ours.fields[key]
        ftype = ours.field_types[key]
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            assert ftype == "ARRAY[%s]" % f.types[1].name, key
        else:
            assert ftype == f.types[0].name, key
        if isinstance(ref_val, float):
            assert math.isclose(val, ref_val, rel_tol=1e-6), key
        elif isinstance(ref_val, list) and ref_val and isinstance(ref_val[0], float):
            assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(val, ref_val)), key
        else:
            assert val == ref_val, key
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for t, rt in zip(ours.tensors, ref.tensors):
        assert list(t.shape) == [int(x) for x in rt.shape], t.name
        assert t.type_id == int(rt.tensor_type), t.name
        assert t.type_name == rt.tensor_type.name, t.name
        assert t.offset == int(rt.data_offset), t.name
        assert t.nbytes == int(rt.n_bytes), t.name
        assert t.n_elements == int(rt.n_elements), t.name
    return ours


# --- the planner against recorded llama.cpp loads (benchmarks/fit_accuracy.py and its fixtures) -------------

def rebuilt_header(header, tmp_path):
    """A recorded GGUF header written again as a sparse file and read back, with the recording's sha256 checked."""
    import accuracy_models
    again = accuracy_models.dump_header(accuracy_models.write_sparse_gguf(header, tmp_path / "m.gguf"))
    assert again["kv"] == header["kv"]
    assert again["tensors"] == header["tensors"]
    assert accuracy_models.header_sha256(again) == accuracy_models.header_sha256(header)
    return again


def parsed_log(fx):
    """The recorded llama-server log parsed again: it must give the recorded per-device numbers."""
    import measure_llamacpp_buffers as measure
    lines = fx["measured"]["raw_lines"]
    endpoints = measure.endpoints_from_log(lines)
    parsed = measure.parse_log(lines, endpoints)
    assert parsed["devices"] == fx["measured"]["devices"]
    return endpoints, parsed


def assert_within_bounds(fx, facts):
    """The planner within the issue's bound on every device and component of a recorded load; returns the rows."""
    import fit_accuracy
    rows = fit_accuracy.compare(fx, facts)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, "\n".join(
        "%s %s: predicted %.2f MiB, measured %.2f MiB, error %+.2f MiB, bound %.2f MiB"
        % (r["device"], r["component"], r["predicted"] / MIB, r["measured"] / MIB, r["error"] / MIB,
           (r["bound"] or 0) / MIB) for r in bad)
    return rows


def assert_within_nvidia_smi(fx, facts):
    """Per process (CUDA0 = llama-server, RPC0 = the rpc-server): the planner's total with its runtime overhead
    within the total bound of what nvidia-smi showed after the first request."""
    import fit_accuracy
    rows = fit_accuracy.smi_rows(fx, facts)
    assert len(rows) == (2 if fx["config"]["devices"] == "cuda+rpc" else 1)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, ["%s: predicted %.1f MiB, nvidia-smi %.1f MiB"
                     % (r["device"], r["predicted"] / MIB, r["smi_request_bytes"] / MIB) for r in bad]
