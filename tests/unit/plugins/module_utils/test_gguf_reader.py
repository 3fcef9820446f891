"""gguf_reader against the gguf package: type sizes, a differential parse, and every refusal."""
import struct

import gguf
import pytest

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGML_TYPES, GGUFError, ggml_row_bytes, read_gguf


def test_type_sizes_match_gguf_package():
    sizes = gguf.GGML_QUANT_SIZES
    shared = 0
    for tid, (name, blck, size) in GGML_TYPES.items():
        qt = gguf.GGMLQuantizationType.__members__.get(name)
        if qt is None or qt not in sizes:
            continue        # Q2_0 is newer than gguf 0.19
        if name == "Q8_1":
            # gguf 0.19 still has the old f32 d/s block (40 B); ggml-common.h b11434 asserts
            # sizeof(block_q8_1) == 2*sizeof(ggml_half) + QK8_1 = 36 (Q8_1 never appears in files).
            assert (blck, size) == (32, 36) and sizes[qt] == (32, 40)
            continue
        assert (blck, size) == sizes[qt], name
        shared += 1
    assert shared >= 30


def test_row_bytes():
    assert ggml_row_bytes("f16", 1024) == 2048
    assert ggml_row_bytes("q8_0", 1024) == 1088
    assert ggml_row_bytes("Q4_K", 256) == 144
    with pytest.raises(ValueError, match="not a whole number"):
        ggml_row_bytes("q8_0", 100)
    with pytest.raises(ValueError, match="unknown ggml type"):
        ggml_row_bytes("q9_9", 32)


QUANT_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
               "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
               "I8", "I16", "I32", "I64", "F64", "IQ1_M", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0"]


def test_every_ggml_type_sizes_like_gguf_reader(tmp_path):
    tensors = {}
    for i, t in enumerate(QUANT_TYPES):
        blck = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[t]][0]
        tensors["blk.%d.w" % i] = ([max(blck, 256) * 2, 3], t)
    p = lib.write_gguf(tmp_path / "types.gguf", "llama", {"llama.block_count": len(QUANT_TYPES)}, tensors)
    ours = lib.assert_same_as_gguf_reader(p)
    assert {t.type_name for t in ours.tensors} == set(QUANT_TYPES)


def test_differential_hybrid_with_mtp(tmp_path):
    kv = lib.qwen35_kv()
    kv["general.name"] = "hybrid"
    kv["qwen35.rope.freq_base"] = 1e7
    kv["qwen35.rope.dimension_sections"] = ([11, 11, 10, 0], gguf.GGUFValueType.ARRAY)
    kv["some.signed"] = (-5, gguf.GGUFValueType.INT32)
    kv["some.u64"] = (1 << 40, gguf.GGUFValueType.UINT64)
    kv["some.f64"] = (0.5, gguf.GGUFValueType.FLOAT64)
    kv["some.flag"] = True
    kv["some.floats"] = [0.25, 0.5]
    p = lib.write_gguf(tmp_path / "q35.gguf", "qwen35", kv, lib.qwen35_tensors())
    lib.assert_same_as_gguf_reader(p)


def test_differential_custom_alignment(tmp_path):
    p = lib.write_gguf(tmp_path / "a64.gguf", "llama", {"llama.block_count": 1},
                       {"blk.0.w": ([64, 3], "Q8_0"), "output.weight": ([64, 5], "F16")}, alignment=64)
    g = lib.assert_same_as_gguf_reader(p)
    assert g.alignment == 64 and g.data_offset % 64 == 0


def test_big_endian_file_is_refused_as_llama_cpp_refuses_it(tmp_path):
    """llama.cpp b11434 on a little-endian host refuses a big-endian file (gguf.cpp's version check): so do we."""
    p = lib.write_gguf(tmp_path / "be.gguf", "llama", {"llama.block_count": 2, "llama.context_length": 4096},
                       {"blk.0.w": ([32, 2], "F32")}, endian="big")
    with pytest.raises(GGUFError, match=r"be\.gguf: the version field reads 0x03000000 .* a big-endian GGUF") as exc:
        read_gguf(p)
    assert exc.value.cause == "endian"


# ----------------------------------------------------------------------------- refusals

def _small(tmp_path):
    return lib.write_gguf(tmp_path / "ok.gguf", "qwen35", lib.qwen35_kv(), lib.qwen35_tensors())


def test_truncated_in_tensor_data_names_file_and_tensor(tmp_path):
    p = _small(tmp_path)
    last = read_gguf(p).tensors[-1].name
    data = open(p, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])
    with pytest.raises(GGUFError) as exc:
        read_gguf(str(cut))
    msg = str(exc.value)
    assert str(cut) in msg and "truncated" in msg and repr(last) in msg and "100 missing" in msg


def test_truncated_in_header(tmp_path):
    p = _small(tmp_path)
    data = open(p, "rb").read()
    cut = tmp_path / "hdr.gguf"
    cut.write_bytes(data[:300])
    with pytest.raises(GGUFError, match=r"hdr\.gguf: truncated: the file ends at byte 300 while reading"):
        read_gguf(str(cut))


def test_not_gguf(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}" + b"\x00" * 64)
    with pytest.raises(GGUFError, match=r"model\.safetensors: not a GGUF file: the magic is"):
        read_gguf(str(p))
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError, match="empty.gguf: not a GGUF file: 0 bytes"):
        read_gguf(str(empty))


@pytest.mark.parametrize("version", [1, 4, 99])
def test_unsupported_version(tmp_path, version):
    p = _small(tmp_path)
    data = bytearray(open(p, "rb").read())
    data[4:8] = struct.pack("<I", version)
    bad = tmp_path / ("v%d.gguf" % version)
    bad.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match=r"v%d\.gguf: unsupported GGUF version %d" % (version, version)):
        read_gguf(str(bad))


def test_unknown_tensor_type(tmp_path):
    p = lib.write_gguf(tmp_path / "t.gguf", "llama", {"llama.block_count": 1}, {"blk.0.w": ([32, 2], "F32")})
    data = bytearray(open(p, "rb").read())
    g = read_gguf(p)
    # the tensor info ends with type (u32) + offset (u64) right before the padding to data_offset
    name = b"blk.0.w"
    pos = data.index(name) + len(name) + 4 + 2 * 8
    data[pos:pos + 4] = struct.pack("<I", 77)
    bad = tmp_path / "t77.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="t77.gguf: tensor 'blk.0.w' has ggml type 77"):
        read_gguf(str(bad))
    assert g.tensors[0].type_name == "F32"


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(GGUFError, match="nope.gguf: cannot open"):
        read_gguf(str(tmp_path / "nope.gguf"))
    with pytest.raises(GGUFError, match="directory|cannot open"):
        read_gguf(str(tmp_path))
