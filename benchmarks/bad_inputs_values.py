"""Strict values (issue 23 item 4): class generators for benchmarks/bad_inputs.py and the differential test.

Two parts:

* ``gguf_bytes`` writes a GGUF byte for byte (stdlib only: every offset, count and type is the caller's to
  break), and ``MUTATIONS`` are the classes of header llama.cpp b11434's reader refuses -- offsets shuffled,
  overlapping, misaligned or with a gap, a quantized row that is not whole blocks, a big-endian file, a cut at
  any byte, counts and lengths past the file, removed or unknown types, too many dimensions, overflowing
  shapes, names of 64 bytes, duplicates, bad alignment, a data section padded past the end. Each mutation
  takes a random.Random and a valid spec and returns (bytes, cause): the cause is gguf_reader's word for it
  (gguf_reader.CAUSES), which tests/integration/test_gguf_differential.py checks against llama.cpp's own
  refusal of the same bytes.
* ``cases(tmp, Case)`` turns them, and the values classes (qwen35 headers llama.cpp refuses, a drafter given
  as the target, booleans that are words, NaN and infinities), into Ansible cases for bad_inputs.py.
"""
from __future__ import annotations

import json
import os
import random
import struct

import import_paths  # noqa: F401 - run as a script: the collection on sys.path

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGML_TYPES

UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64 = 4, 5, 6, 7, 8, 9, 10
_FMT = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
REMOVED_TYPES = (4, 5, 31, 32, 33, 36, 37, 38)
BLOCK_TYPES = sorted(t for t, (_n, blck, _s) in GGML_TYPES.items() if blck > 1)


def _pad(n, align):
    return n + (-n % align)


def nbytes(type_id, shape):
    _name, blck, size = GGML_TYPES[type_id]
    ne = list(shape) or [1]
    rows = 1
    for d in ne[1:]:
        rows *= d
    return ne[0] // blck * size * rows


class Spec:
    """What gguf_bytes writes: metadata (key, type, value), tensors (name, shape, type), and every knob."""

    def __init__(self, kvs, tensors, version=3, alignment=32, endian="<", n_kv=None, n_tensors=None,
                 offsets=None, data_bytes=None, alignment_type=UINT32):
        self.kvs = list(kvs)
        self.tensors = list(tensors)
        self.version, self.alignment, self.endian = version, alignment, endian
        self.n_kv, self.n_tensors, self.offsets, self.data_bytes = n_kv, n_tensors, offsets, data_bytes
        self.alignment_type = alignment_type

    def copy(self, **over):
        spec = Spec(self.kvs, self.tensors, self.version, self.alignment, self.endian, self.n_kv, self.n_tensors,
                    self.offsets, self.data_bytes, self.alignment_type)
        spec.__dict__.update(over)
        return spec


def _str(e, text):
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack(e + "Q", len(raw)) + raw


def _value(e, vtype, value):
    if vtype == STRING:
        return _str(e, value)
    if vtype == ARRAY:
        etype, items = value
        out = struct.pack(e + "IQ", etype, len(items))
        return out + b"".join(_value(e, etype, x) for x in items)
    if vtype not in _FMT:
        return b"\0" * 8            # a type GGUF does not have: 8 bytes of whatever follows
    return struct.pack(e + _FMT[vtype], value)


def natural_offsets(spec):
    align = spec.alignment if isinstance(spec.alignment, int) and spec.alignment > 0 else 32
    out, at = [], 0
    for _name, shape, ttype in spec.tensors:
        out.append(at)
        at += _pad(nbytes(ttype, shape), align) if ttype in GGML_TYPES and min(shape or [1]) >= 0 else 0
    return out, at


def gguf_bytes(spec):
    """The GGUF file spec describes; data is zeros (a header reader never looks at it)."""
    e = spec.endian
    kvs = list(spec.kvs)
    if spec.alignment != 32 and not any(k == "general.alignment" for k, _t, _v in kvs):
        kvs.insert(0, ("general.alignment", spec.alignment_type, spec.alignment))
    n_kv = len(kvs) if spec.n_kv is None else spec.n_kv
    n_t = len(spec.tensors) if spec.n_tensors is None else spec.n_tensors
    out = bytearray(b"GGUF" + struct.pack(e + "Iqq", spec.version, n_t, n_kv))
    for key, vtype, value in kvs:
        out += _str(e, key) + struct.pack(e + "I", vtype) + _value(e, vtype, value)
    natural, total = natural_offsets(spec)
    offsets = spec.offsets if spec.offsets is not None else natural
    for (name, shape, ttype), off in zip(spec.tensors, offsets):
        out += _str(e, name) + struct.pack(e + "I", len(shape))
        out += b"".join(struct.pack(e + "q", d) for d in shape)
        out += struct.pack(e + "iQ", ttype, off)
    if spec.data_bytes == -1:
        return bytes(out)            # the file ends with the tensor table: no padding, no data
    align = spec.alignment if isinstance(spec.alignment, int) and spec.alignment > 0 else 32
    out += b"\0" * (_pad(len(out), align) - len(out))
    out += b"\0" * (total if spec.data_bytes is None else spec.data_bytes)
    return bytes(out)


# ---------------------------------------------------------------- a valid random file

def random_spec(rng, n_tensors=None):
    """A valid little-endian GGUF: a tiny llama header and tensors of random known types and whole-block rows."""
    n = rng.randint(1, 6) if n_tensors is None else n_tensors
    types = sorted(GGML_TYPES)
    tensors = []
    for i in range(n):
        ttype = rng.choice(types)
        blck = GGML_TYPES[ttype][1]
        dims = rng.randint(1, 4)
        shape = [blck * rng.randint(1, 3)] + [rng.randint(1, 3) for _ in range(dims - 1)]
        tensors.append(("blk.%d.t%d.weight" % (i % 2, i), shape, ttype))
    kvs = [("general.architecture", STRING, "llama"), ("llama.block_count", UINT32, 2),
           ("llama.context_length", UINT32, 4096), ("llama.embedding_length", UINT32, 64),
           ("llama.attention.head_count", UINT32, 4)]
    return Spec(kvs, tensors, alignment=rng.choice([32, 32, 64, 16, 1]))


# ---------------------------------------------------------------- the classes llama.cpp refuses

def _m_offsets_shuffled(rng, spec):
    if len(spec.tensors) < 2:
        spec = spec.copy(tensors=spec.tensors + [("extra.weight", [32], 0)])
    natural, _ = natural_offsets(spec)
    offs = list(natural)
    while offs == natural:
        rng.shuffle(offs)
    return gguf_bytes(spec.copy(offsets=offs)), "offset"


def _m_offsets_overlap(rng, spec):
    if len(spec.tensors) < 2:
        spec = spec.copy(tensors=spec.tensors + [("extra.weight", [32], 0)])
    natural, _ = natural_offsets(spec)
    i = rng.randrange(1, len(natural))
    offs = list(natural)
    offs[i] = offs[i - 1]
    return gguf_bytes(spec.copy(offsets=offs)), "offset"


def _m_offset_gap_or_misaligned(rng, spec):
    natural, _ = natural_offsets(spec)
    offs = list(natural)
    i = rng.randrange(len(offs))
    offs[i] += rng.choice([1, spec.alignment, 3 * spec.alignment + 1])
    return gguf_bytes(spec.copy(offsets=offs, data_bytes=natural_offsets(spec)[1] + 4 * spec.alignment)), "offset"


def _m_offset_past_end(rng, spec):
    offs = list(natural_offsets(spec)[0])
    offs[-1] = rng.choice([1 << 40, (1 << 64) - spec.alignment])
    return gguf_bytes(spec.copy(offsets=offs)), "offset"


def _m_block_multiple(rng, spec):
    ttype = rng.choice(BLOCK_TYPES)
    blck = GGML_TYPES[ttype][1]
    ne0 = blck * rng.randint(1, 3) + rng.randint(1, blck - 1)
    tensors = list(spec.tensors)
    tensors[rng.randrange(len(tensors))] = ("blk.0.bad.weight", [ne0, 2], ttype)
    return gguf_bytes(spec.copy(tensors=tensors, offsets=[0] * len(tensors), data_bytes=0)), "block_multiple"


def _m_zero_dim_block_type(rng, spec):
    """n_dims 0 is one element: a block type cannot hold it (ne[0] = 1)."""
    tensors = list(spec.tensors) + [("scalar.weight", [], rng.choice(BLOCK_TYPES))]
    return gguf_bytes(spec.copy(tensors=tensors)), "block_multiple"


def _m_big_endian(rng, spec):
    return gguf_bytes(spec.copy(endian=">")), "endian"


def _m_version(rng, spec):
    version = rng.choice([0, 1, 4, 99, 0x10000])
    return gguf_bytes(spec.copy(version=version)), "endian" if version == 0x10000 else "version"


def _m_magic(rng, spec):
    raw = gguf_bytes(spec)
    return rng.choice([b"GGUG", b"gguf", b"\0\0\0\0", b"GGJT"]) + raw[4:], "magic"


def _m_truncated(rng, spec):
    raw = gguf_bytes(spec)
    return raw[:rng.randrange(0, len(raw))], None       # the cause depends on where: magic, read, data, bounds


def _m_negative_count(rng, spec):
    which = rng.choice(["n_kv", "n_tensors"])
    return gguf_bytes(spec.copy(**{which: -rng.randint(1, 1 << 62)})), "count"


def _m_huge_count(rng, spec):
    which = rng.choice(["n_kv", "n_tensors"])
    return gguf_bytes(spec.copy(**{which: rng.choice([len(spec.kvs) + 1, 1 << 20, 1 << 40, (1 << 63) - 1])})), None


def _m_huge_string(rng, spec):
    kvs = list(spec.kvs) + [("general.name", STRING, "x")]
    raw = bytearray(gguf_bytes(spec.copy(kvs=kvs)))
    at = raw.find(b"general.name") + len("general.name") + 4
    struct.pack_into("<Q", raw, at, rng.choice([1 << 20, (1 << 30) + 1, 1 << 60]))
    return bytes(raw), None


def _m_huge_array(rng, spec):
    kvs = list(spec.kvs) + [("x.arr", ARRAY, (rng.choice([UINT32, STRING, UINT64]), []))]
    raw = bytearray(gguf_bytes(spec.copy(kvs=kvs)))
    at = raw.find(b"x.arr") + len("x.arr") + 4 + 4
    struct.pack_into("<Q", raw, at, rng.choice([1 << 20, (1 << 30) + 1, 1 << 62]))
    return bytes(raw), "read"


def _m_value_type(rng, spec):
    if rng.random() < 0.5:
        return gguf_bytes(spec.copy(kvs=list(spec.kvs) + [("x.bad", rng.choice([13, 77, 1 << 31]), 0)])), "value_type"
    return gguf_bytes(spec.copy(kvs=list(spec.kvs) + [("x.nested", ARRAY, (ARRAY, []))])), "value_type"


def _m_key_empty_or_duplicate(rng, spec):
    if rng.random() < 0.5:
        return gguf_bytes(spec.copy(kvs=list(spec.kvs) + [("", UINT32, 1)])), "key_empty"
    return gguf_bytes(spec.copy(kvs=list(spec.kvs) + [spec.kvs[rng.randrange(len(spec.kvs))]])), "key_duplicate"


def _m_alignment(rng, spec):
    if rng.random() < 0.5:
        return gguf_bytes(spec.copy(alignment=rng.choice([0, 3, 48, 100]))), "alignment"
    kvs = [("general.alignment", rng.choice([UINT64, INT32, STRING]), 32)] + list(spec.kvs)
    kvs[0] = (kvs[0][0], kvs[0][1], "32" if kvs[0][1] == STRING else 32)
    return gguf_bytes(spec.copy(kvs=kvs)), "alignment"


def _m_tensor_name(rng, spec):
    tensors = list(spec.tensors)
    i = rng.randrange(len(tensors))
    if rng.random() < 0.5:
        tensors[i] = ("n" * rng.choice([64, 65, 200]),) + tuple(tensors[i][1:])
        return gguf_bytes(spec.copy(tensors=tensors)), "tensor_name"
    tensors.append(tensors[i])
    return gguf_bytes(spec.copy(tensors=tensors)), "tensor_duplicate"


def _m_tensor_shape(rng, spec):
    tensors = list(spec.tensors)
    i = rng.randrange(len(tensors))
    name, shape, ttype = tensors[i]
    kind = rng.choice(["n_dims", "negative", "overflow", "bytes"])
    if kind == "bytes":
        tensors[i] = (name, [1 << 61, 2], 28)          # 2^62 F64 elements: 2^65 bytes
        return gguf_bytes(spec.copy(tensors=tensors, offsets=[0] * len(tensors), data_bytes=0)), "nbytes_overflow"
    if kind == "n_dims":
        tensors[i] = (name, shape + [1] * (5 - len(shape)) + [1] * rng.randint(0, 3), ttype)
        return gguf_bytes(spec.copy(tensors=tensors, offsets=[0] * len(tensors), data_bytes=0)), "n_dims"
    if kind == "negative":
        j = rng.randrange(len(shape))
        shape = list(shape)
        shape[j] = -rng.randint(1, 1 << 40)
        tensors[i] = (name, shape, ttype)
        return gguf_bytes(spec.copy(tensors=tensors, offsets=[0] * len(tensors), data_bytes=0)), "ne_negative"
    tensors[i] = (name, [256 << 20, 1 << 30, 1 << 30, 1 << 10], 0)
    return gguf_bytes(spec.copy(tensors=tensors, offsets=[0] * len(tensors), data_bytes=0)), "ne_overflow"


def _m_tensor_type(rng, spec):
    tensors = list(spec.tensors)
    i = rng.randrange(len(tensors))
    name, shape, _t = tensors[i]
    ttype = rng.choice(list(REMOVED_TYPES) + [43, 77, -1, 1 << 30])
    tensors[i] = (name, [256] + list(shape[1:]), ttype)
    return gguf_bytes(spec.copy(tensors=tensors, offsets=[0] * len(tensors), data_bytes=0)), "tensor_type"


def _m_data_section_short(rng, spec):
    """The tensor table ends off the alignment and the file ends there: no room for the padding."""
    for extra in range(1, 200):
        raw = gguf_bytes(spec.copy(kvs=list(spec.kvs) + [("x.pad", STRING, "p" * extra)], alignment=64,
                                   data_bytes=-1))
        if len(raw) % 64:
            return raw, "data_section"
    raise AssertionError("no unaligned header found")


def _m_data_truncated(rng, spec):
    raw = gguf_bytes(spec)
    total = natural_offsets(spec)[1]
    if total == 0:
        return raw, None
    return raw[:len(raw) - rng.randint(1, max(1, min(total, 4096)))], None


MUTATIONS = {
    "offsets_shuffled": _m_offsets_shuffled,
    "offsets_overlap": _m_offsets_overlap,
    "offset_gap_or_misaligned": _m_offset_gap_or_misaligned,
    "offset_past_end": _m_offset_past_end,
    "block_multiple": _m_block_multiple,
    "zero_dim_block_type": _m_zero_dim_block_type,
    "big_endian": _m_big_endian,
    "version": _m_version,
    "magic": _m_magic,
    "truncated": _m_truncated,
    "data_truncated": _m_data_truncated,
    "negative_count": _m_negative_count,
    "huge_count": _m_huge_count,
    "huge_string": _m_huge_string,
    "huge_array": _m_huge_array,
    "value_type": _m_value_type,
    "key_empty_or_duplicate": _m_key_empty_or_duplicate,
    "alignment": _m_alignment,
    "tensor_name": _m_tensor_name,
    "tensor_shape": _m_tensor_shape,
    "tensor_type": _m_tensor_type,
    "data_section_short": _m_data_section_short,
}


def mutated(seed, name):
    """(bytes, expected cause or None) of one mutation class applied to a random valid file."""
    rng = random.Random("%s/%s" % (name, seed))
    return MUTATIONS[name](rng, random_spec(rng))


# ---------------------------------------------------------------- Ansible cases for bad_inputs.py

REFUSE_BY_CAUSE = {
    "offset": r"has data offset \d+, expected \d+",
    "block_multiple": r"is not a multiple of the \S+ block size",
    "endian": r"a big-endian GGUF, which llama.cpp on a little-endian host refuses",
    "version": r"(unsupported|bad) GGUF version",
    "magic": r"not a GGUF file",
    "count": r"count at offset \d+ is -\d+",
    "read": r"truncated|more than the \d+ bytes left",
    "value_type": r"invalid GGUF value type",
    "key_empty": r"is empty, expected a key name",
    "key_duplicate": r"duplicate metadata key",
    "alignment": r"general\.alignment",
    "tensor_name": r"ggml allows < 64",
    "tensor_duplicate": r"duplicate tensor name",
    "n_dims": r"dimensions, ggml allows at most 4",
    "ne_negative": r"dimension \d+ is -\d+",
    "ne_overflow": r"more than int64",
    "nbytes_overflow": r"more than 2\^64 bytes|overflows the data section",
    "tensor_type": r"which llama.cpp b11434 does not know",
    "data_section": r"the data section starts at byte \d+ .* past the end of the file",
}


def _qwen35_spec(**over):
    kvs = [("general.architecture", STRING, "qwen35"), ("qwen35.block_count", UINT32, 4),
           ("qwen35.context_length", UINT32, 4096), ("qwen35.embedding_length", UINT32, 64),
           ("qwen35.attention.head_count", UINT32, 4), ("qwen35.attention.head_count_kv", UINT32, 2),
           ("qwen35.attention.key_length", UINT32, 16), ("qwen35.attention.value_length", UINT32, 16),
           ("qwen35.ssm.conv_kernel", UINT32, 4), ("qwen35.ssm.inner_size", UINT32, 64),
           ("qwen35.ssm.state_size", UINT32, 16), ("qwen35.ssm.group_count", UINT32, 2),
           ("qwen35.ssm.time_step_rank", UINT32, 4)]
    for key, value in over.items():
        kvs = [kv for kv in kvs if kv[0] != key] + ([(key,) + value] if value is not None else [])
    tensors = [("blk.%d.attn_norm.weight" % il, [64], 0) for il in range(4)] + [("token_embd.weight", [64, 8], 1)]
    return Spec(kvs, tensors)


def cases(tmp, Case):
    """The values classes as Ansible cases (registered by one line in bad_inputs.py)."""
    out = []
    d = os.path.join(tmp, "values")
    os.makedirs(d, exist_ok=True)

    def gguf(name, raw):
        path = os.path.join(d, name)
        with open(path, "wb") as fh:
            fh.write(raw)
        return path

    for name in sorted(MUTATIONS):
        raw, cause = mutated(0, name)
        if cause is None:
            continue
        path = gguf("mut_%s.gguf" % name, raw)
        out.append(Case("gguf_info class %s" % name, "dankfleet.llm.gguf_info", {"path": path},
                        refuse=r"%s: .*%s" % (path.replace(".", r"\."), REFUSE_BY_CAUSE[cause])))
    for name, over, refuse in (
            ("interval 0", {"qwen35.full_attention_interval": (UINT32, 0)},
             r"qwen35\.full_attention_interval is 0"),
            ("head_count_kv 3 for 4 blocks", {"qwen35.attention.head_count_kv": (ARRAY, (UINT32, [2, 2, 2]))},
             r"qwen35\.attention\.head_count_kv has 3 entries but qwen35\.block_count is 4"),
            ("head_count 6 for 4 blocks", {"qwen35.attention.head_count": (ARRAY, (INT32, [4] * 6))},
             r"qwen35\.attention\.head_count has 6 entries .*wrong array length"),
            ("recurrent_layers 2 for 4 blocks", {"qwen35.attention.recurrent_layers": (ARRAY, (BOOL, [True, False]))},
             r"qwen35\.attention\.recurrent_layers has 2 entries"),
            ("head_count of FLOAT32", {"qwen35.attention.head_count": (ARRAY, (FLOAT32, [4.0] * 4))},
             r"qwen35\.attention\.head_count is ARRAY\[FLOAT32\]")):
        path = gguf("qwen35_%s.gguf" % name.replace(" ", "_"), gguf_bytes(_qwen35_spec(**over)))
        out.append(Case("gguf_info qwen35 %s" % name, "dankfleet.llm.gguf_info", {"path": path}, refuse=refuse))

    # a drafter given as the served model; booleans as words; NaN in a plan
    drafter = gguf("dflash_drafter.gguf", gguf_bytes(Spec(
        [("general.architecture", STRING, "dflash"), ("dflash.block_count", UINT32, 2),
         ("dflash.embedding_length", UINT32, 64), ("dflash.attention.head_count", UINT32, 4),
         ("dflash.context_length", UINT32, 4096),
         ("dflash.block_size", UINT32, 16)],
        [("blk.0.attn_norm.weight", [64], 0), ("blk.1.attn_norm.weight", [64], 0)])))
    target = gguf("qwen35_ok.gguf", gguf_bytes(_qwen35_spec()))
    gpus = [{"name": "ROCm0", "vram_total_bytes": 34208743424}]
    expr = "msg={{ g | dankfleet.llm.fit_plan(model=m, serve=s) }}"

    def plan_vars(name, model_path, **serve):
        from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts
        path = os.path.join(d, "plan-%s.json" % name)
        with open(path, "w") as fh:
            json.dump({"g": gpus, "m": gguf_facts(model_path), "s": dict({"backend": "hip", "ctx_size": 4096},
                                                                         **serve)}, fh)
        return "@" + path

    out.append(Case("fit_plan a drafter as the target", "debug", expr, extra_vars=plan_vars("drafter", drafter),
                    refuse=r"model is a drafter GGUF, not a model llama-server can serve .*architecture dflash"))
    out.append(Case("fit_plan kv_unified 'flase'", "debug", expr,
                    extra_vars=plan_vars("flase", target, kv_unified="flase"),
                    refuse=r"serve\.kv_unified is 'flase', not a boolean"))
    out.append(Case("fit_plan flash_attn 'enabled'", "debug", expr,
                    extra_vars=plan_vars("enabled", target, flash_attn="enabled"),
                    refuse=r"serve\.flash_attn 'enabled': use on, off or auto"))

    def planned(r):
        msg = r.get("msg") or {}
        return None if isinstance(msg, dict) and isinstance(msg.get("fits"), bool) else "no plan: %r" % (r,)
    out.append(Case("fit_plan kv_unified 'false' plans", "debug", expr,
                    extra_vars=plan_vars("false", target, kv_unified="false"), check=planned))
    facts = os.path.join(d, "gpu.facts.json")
    with open(facts, "w") as fh:
        fh.write('{"gpus": [{"pci_address": "0000:03:00.0", "vendor": "amd", "vram_total_bytes": 1, '
                 '"runtime_index": "0"}]}')
    out.append(Case("gpu_facts recorded runtime_index as text", "dankfleet.llm.gpu_info", {"facts_file": facts},
                    refuse=r"gpus\[0\]\.runtime_index must be an integer >= 0"))
    nan = os.path.join(d, "gpu-nan.facts.json")
    with open(nan, "w") as fh:
        fh.write('{"gpus": [{"pci_address": "0000:03:00.0", "vendor": "amd", "vram_total_bytes": 1, '
                 '"narrowest_link_gbps": NaN}]}')
    out.append(Case("gpu_facts recorded NaN", "dankfleet.llm.gpu_info", {"facts_file": nan},
                    refuse=r"gpus\[0\]\.narrowest_link_gbps: nan is not a finite number"))
    return out
