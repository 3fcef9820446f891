# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stdlib-only GGUF reader: header, key/value metadata and the tensor table.

Tensor data is never read. Byte sizes are computed from the ggml type traits of
llama.cpp b11434 (ggml/include/ggml.h ``enum ggml_type`` and the block structs of
ggml/src/ggml-common.h), so a planner can size a 30 GB file from its first few MB.

Every failure is a ``GGUFError`` whose message names the file and the problem:
not a GGUF file, a version this reader does not support, a file cut short (in the
header, or a tensor whose data would lie past the end of the file), an unknown
ggml type, an inconsistent tensor table.

The file is hostile until proven otherwise: only a regular file is opened (a FIFO or
a device is refused from its fstat, opened O_NONBLOCK so the open itself cannot
block), and every count and length read from it is bounded by the bytes the rest of
the file can hold and by a sane maximum before anything is allocated or looped over.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import struct

from ansible_collections.dankfleet.llm.plugins.module_utils.regular_file import open_regular

GGUF_MAGIC = b"GGUF"
GGUF_SUPPORTED_VERSIONS = (2, 3)   # gguf.cpp b11434: v1 refused, > GGUF_VERSION (3) refused
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64
QK_K = 256
# Sane maxima, far above any real model (the largest have ~2k tensors, ~100 metadata keys,
# ~260k-entry vocab arrays): a count beyond them is corruption, refused before any allocation.
MAX_TENSORS = 1 << 16
MAX_METADATA = 1 << 16
MAX_ARRAY = 1 << 21
MAX_ARRAY_ELEMENTS = 1 << 22       # all arrays together (a vocab, its merges, scores and types: ~1.3M)
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 1 << 24         # one metadata string (chat templates are tens of KiB)
# The header (metadata and tensor table) of the largest real models is tens of MiB: a file that claims more
# is refused there, so a sparse terabyte of zeros cannot keep the reader busy or fill memory.
MAX_HEADER_BYTES = 1 << 28
INT64_MAX = (1 << 63) - 1
# The fewest bytes one entry can take: a metadata entry is a key (8-byte length + >= 1 byte),
# a 4-byte type and a >= 1-byte value; a tensor info a name (8 + >= 1), n_dims (4), type (4), offset (8).
MIN_KV_BYTES = 8 + 1 + 4 + 1
MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 4 + 8

# ggml_type id -> (name, elements per block, bytes per block), from ggml.h / ggml-common.h b11434.
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 2 + 16),
    3: ("Q4_1", 32, 2 + 2 + 16),
    6: ("Q5_0", 32, 2 + 4 + 16),
    7: ("Q5_1", 32, 2 + 2 + 4 + 16),
    8: ("Q8_0", 32, 2 + 32),
    9: ("Q8_1", 32, 2 + 2 + 32),            # static_assert(sizeof(block_q8_1) == 2*sizeof(ggml_half) + QK8_1)
    10: ("Q2_K", QK_K, 2 + 2 + QK_K // 16 + QK_K // 4),
    11: ("Q3_K", QK_K, 2 + QK_K // 4 + QK_K // 8 + 12),
    12: ("Q4_K", QK_K, 2 + 2 + QK_K // 2 + 12),
    13: ("Q5_K", QK_K, 2 + 2 + QK_K // 2 + QK_K // 8 + 12),
    14: ("Q6_K", QK_K, 2 + QK_K // 2 + QK_K // 4 + QK_K // 16),
    15: ("Q8_K", QK_K, 4 + QK_K + QK_K // 8),
    16: ("IQ2_XXS", QK_K, 2 + QK_K // 4),
    17: ("IQ2_XS", QK_K, 2 + QK_K // 4 + QK_K // 32),
    18: ("IQ3_XXS", QK_K, 2 + QK_K // 4 + QK_K // 8),
    19: ("IQ1_S", QK_K, 2 + QK_K // 8 + QK_K // 16),
    20: ("IQ4_NL", 32, 2 + 16),
    21: ("IQ3_S", QK_K, 2 + QK_K // 4 + QK_K // 8 + QK_K // 32 + 4),
    22: ("IQ2_S", QK_K, 2 + QK_K // 4 + QK_K // 16),
    23: ("IQ4_XS", QK_K, 2 + 2 + QK_K // 2 + QK_K // 64),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    29: ("IQ1_M", QK_K, QK_K // 8 + QK_K // 16 + QK_K // 32),
    30: ("BF16", 1, 2),
    34: ("TQ1_0", QK_K, 2 + 4 * 13),
    35: ("TQ2_0", QK_K, 2 + 64),
    39: ("MXFP4", 32, 1 + 16),
    40: ("NVFP4", 64, 4 + 32),
    41: ("Q1_0", 128, 2 + 16),
    42: ("Q2_0", 64, 2 + 16),
}
GGML_TYPE_IDS = dict((v[0], k) for k, v in GGML_TYPES.items())

# gguf_type id -> (name, struct format or None for string/array)
GGUF_VALUE_TYPES = {
    0: ("UINT8", "B"),
    1: ("INT8", "b"),
    2: ("UINT16", "H"),
    3: ("INT16", "h"),
    4: ("UINT32", "I"),
    5: ("INT32", "i"),
    6: ("FLOAT32", "f"),
    7: ("BOOL", "?"),
    8: ("STRING", None),
    9: ("ARRAY", None),
    10: ("UINT64", "Q"),
    11: ("INT64", "q"),
    12: ("FLOAT64", "d"),
}


class GGUFError(Exception):
    """A GGUF file that cannot be read; the message names the file and the problem."""

    def __init__(self, path, problem):
        self.path = path
        self.problem = problem
        super(GGUFError, self).__init__("%s: %s" % (path, problem))


def ggml_type_name(type_id):
    entry = GGML_TYPES.get(type_id)
    return entry[0] if entry else "type%d" % type_id


def ggml_row_bytes(type_name_or_id, n_elements):
    """Bytes of n_elements of one ggml type laid out in blocks (ggml_row_size)."""
    if isinstance(type_name_or_id, int):
        type_id = type_name_or_id
    else:
        type_id = GGML_TYPE_IDS.get(str(type_name_or_id).upper())
        if type_id is None:
            raise ValueError("unknown ggml type %r; known: %s" % (type_name_or_id, ", ".join(sorted(GGML_TYPE_IDS))))
    name, blck, size = GGML_TYPES[type_id]
    if n_elements % blck:
        raise ValueError("%d elements of %s are not a whole number of %d-element blocks" % (n_elements, name, blck))
    return n_elements // blck * size


def tensor_nbytes(type_id, shape):
    """ggml_nbytes for a contiguous tensor: rows of ne[0] in blocks, times the other dims."""
    name, blck, size = GGML_TYPES[type_id]
    n_rows = 1
    for d in shape[1:]:
        n_rows *= d
    return (shape[0] // blck) * size * n_rows if shape else size


class _Stream(object):
    """Buffered little/big-endian reader that reports truncation with the offset."""

    CHUNK = 1 << 20

    def __init__(self, fh, path, file_size):
        self.fh = fh
        self.path = path
        self.file_size = file_size
        self.buf = b""
        self.buf_pos = 0      # file offset of buf[0]
        self.pos = 0          # current file offset
        self.endian = "<"
        self.array_elements = 0   # elements of all arrays so far (MAX_ARRAY_ELEMENTS)

    def _fill(self, n, what):
        if self.pos + n > MAX_HEADER_BYTES:
            raise GGUFError(self.path, "corrupt: reading %s at offset %d would take the header past %d bytes, expected "
                            "a header (metadata and tensor table) smaller than that" % (what, self.pos, MAX_HEADER_BYTES))
        start = self.pos - self.buf_pos
        if start + n <= len(self.buf):
            return start
        rest = self.buf[start:]
        want = max(n - len(rest), self.CHUNK)
        more = self.fh.read(want)
        self.buf = rest + more
        self.buf_pos = self.pos
        if len(self.buf) < n:
            raise GGUFError(self.path, "truncated: the file ends at byte %d while reading %s at offset %d (%d bytes needed); "
                            "re-fetch the file" % (self.file_size, what, self.pos, n))
        return 0

    def read(self, n, what):
        start = self._fill(n, what)
        data = self.buf[start:start + n]
        self.pos += n
        return data

    def unpack(self, fmt, what):
        size = struct.calcsize(self.endian + fmt)
        start = self._fill(size, what)
        value = struct.unpack_from(self.endian + fmt, self.buf, start)[0]
        self.pos += size
        return value

    @property
    def remaining(self):
        return max(self.file_size - self.pos, 0)

    def string(self, what, maximum=MAX_STRING_BYTES):
        n = self.unpack("Q", what + " (length)")
        if n > self.remaining:
            raise GGUFError(self.path, "corrupt or truncated: %s at offset %d claims %d bytes, more than the %d bytes "
                            "left in the file (%d bytes): expected a string length that fits"
                            % (what, self.pos - 8, n, self.remaining, self.file_size))
        if maximum is not None and n > maximum:
            raise GGUFError(self.path, "corrupt: %s at offset %d is %d bytes long, expected at most %d"
                            % (what, self.pos - 8, n, maximum))
        raw = self.read(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("utf-8", "replace")


class GGUFTensor(object):
    __slots__ = ("name", "shape", "type_id", "offset", "nbytes", "n_elements")

    def __init__(self, name, shape, type_id, offset, nbytes, n_elements):
        self.name = name
        self.shape = shape            # ggml order: ne[0] first (row length)
        self.type_id = type_id
        self.offset = offset          # absolute file offset of the tensor's data
        self.nbytes = nbytes
        self.n_elements = n_elements

    @property
    def type_name(self):
        return ggml_type_name(self.type_id)

    def as_dict(self):
        return {"name": self.name, "shape": list(self.shape), "type": self.type_name,
                "offset": self.offset, "nbytes": self.nbytes}


class GGUFFile(object):
    """The parsed header of one GGUF file (read_gguf returns one)."""

    def __init__(self, path):
        self.path = path
        self.file_size = 0
        self.version = 0
        self.endian = "little"
        self.alignment = GGUF_DEFAULT_ALIGNMENT
        self.data_offset = 0
        self.fields = {}        # key -> python value (arrays as lists)
        self.field_types = {}   # key -> "UINT32" or "ARRAY[STRING]" ...
        self.tensors = []       # GGUFTensor, in file order
        self._by_name = {}

    def get(self, key, default=None):
        return self.fields.get(key, default)

    def tensor(self, name):
        return self._by_name.get(name)

    @property
    def tensor_bytes(self):
        return sum(t.nbytes for t in self.tensors)


def _read_value(st, type_id, what, depth=0):
    entry = GGUF_VALUE_TYPES.get(type_id)
    if entry is None:
        raise GGUFError(st.path, "corrupt: %s has unknown GGUF value type %d at offset %d" % (what, type_id, st.pos - 4))
    name, fmt = entry
    if fmt is not None:
        return name, st.unpack(fmt, what)
    if type_id == 8:
        return name, st.string(what)
    # array: element type, count, elements
    if depth > 0:
        raise GGUFError(st.path, "corrupt: %s is a nested array, which GGUF does not allow" % what)
    elem_type = st.unpack("I", what + " (array type)")
    count = st.unpack("Q", what + " (array length)")
    elem = GGUF_VALUE_TYPES.get(elem_type)
    if elem is None or elem_type == 9:
        raise GGUFError(st.path, "corrupt: %s is an array of unknown/invalid GGUF type %d" % (what, elem_type))
    elem_name, elem_fmt = elem
    min_size = struct.calcsize(st.endian + elem_fmt) if elem_fmt is not None else 8
    if count * min_size > st.remaining:
        raise GGUFError(st.path, "corrupt or truncated: %s at offset %d claims %d %s elements (>= %d bytes), more "
                        "than the %d bytes left in the file" % (what, st.pos - 8, count, elem_name, count * min_size, st.remaining))
    if count > MAX_ARRAY:
        raise GGUFError(st.path, "corrupt: %s at offset %d claims %d elements, expected at most %d"
                        % (what, st.pos - 8, count, MAX_ARRAY))
    st.array_elements += count
    if st.array_elements > MAX_ARRAY_ELEMENTS:
        raise GGUFError(st.path, "corrupt: %s at offset %d brings the header's array elements to %d, expected at most %d"
                        % (what, st.pos - 8, st.array_elements, MAX_ARRAY_ELEMENTS))
    if elem_fmt is not None:
        raw = st.read(min_size * count, what)
        values = list(struct.unpack("%s%d%s" % (st.endian, count, elem_fmt), raw)) if count else []
    else:
        values = [st.string("%s[%d]" % (what, i)) for i in range(count)]
    return "ARRAY[%s]" % elem_name, values


def read_gguf(path):
    """Parse the header, metadata and tensor table of the GGUF file at path."""
    path = os.fspath(path) if hasattr(os, "fspath") else path
    fh = open_regular(path, GGUFError, "GGUF file")
    file_size = os.fstat(fh.fileno()).st_size
    g = GGUFFile(path)
    g.file_size = file_size
    with fh:
        st = _Stream(fh, path, file_size)
        if file_size < 4:
            raise GGUFError(path, "not a GGUF file: %d bytes, too short for the 4-byte magic" % file_size)
        magic = st.read(4, "magic")
        if magic != GGUF_MAGIC:
            raise GGUFError(path, "not a GGUF file: the magic is %r, expected b'GGUF'" % (magic,))
        version = st.unpack("I", "version")
        if version & 0x0000FFFF == 0 and version != 0:
            st.endian = ">"
            g.endian = "big"
            version = struct.unpack(">I", struct.pack("<I", version))[0]
        if version not in GGUF_SUPPORTED_VERSIONS:
            raise GGUFError(path, "unsupported GGUF version %d: this reader (like llama.cpp b11434) supports versions %s"
                            % (version, " and ".join(str(v) for v in GGUF_SUPPORTED_VERSIONS)))
        g.version = version
        n_tensors = st.unpack("q", "tensor count")
        n_kv = st.unpack("q", "metadata count")
        for count, what, at, least, most in ((n_tensors, "tensor count", 8, MIN_TENSOR_INFO_BYTES, MAX_TENSORS),
                                             (n_kv, "metadata count", 16, MIN_KV_BYTES, MAX_METADATA)):
            if count < 0 or count > most:
                raise GGUFError(path, "corrupt header: the %s at offset %d is %d, expected 0..%d"
                                % (what, at, count, most))
            if count * least > st.remaining:
                raise GGUFError(path, "truncated: the file ends at byte %d while reading the %d entries of the %s "
                                "at offset %d (>= %d bytes needed, %d left); re-fetch the file (or the count is corrupt)"
                                % (file_size, count, what, at, count * least, st.remaining))
        for i in range(n_kv):
            key = st.string("metadata key #%d" % i, maximum=MAX_KEY_BYTES)
            if not key:
                raise GGUFError(path, "corrupt: metadata key #%d at offset %d is empty, expected a key name"
                                % (i, st.pos - 8))
            vtype = st.unpack("I", "type of metadata %r" % key)
            tname, value = _read_value(st, vtype, "metadata %r" % key)
            if key in g.fields:
                raise GGUFError(path, "corrupt: duplicate metadata key %r" % key)
            g.fields[key] = value
            g.field_types[key] = tname
        align = g.fields.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if "general.alignment" in g.fields and g.field_types["general.alignment"] != "UINT32":
            raise GGUFError(path, "corrupt: general.alignment must be UINT32, is %s" % g.field_types["general.alignment"])
        if align <= 0 or align & (align - 1):
            raise GGUFError(path, "corrupt: general.alignment %d is not a power of 2" % align)
        g.alignment = align
        raw_tensors = []
        seen_names = set()
        for i in range(n_tensors):
            name = st.string("name of tensor #%d" % i, maximum=MAX_KEY_BYTES)
            if not name:
                raise GGUFError(path, "corrupt: the name of tensor #%d at offset %d is empty, expected a tensor name"
                                % (i, st.pos - 8))
            if name in seen_names:
                raise GGUFError(path, "corrupt: duplicate tensor name %r (tensor #%d at offset %d)" % (name, i, st.pos - 8))
            seen_names.add(name)
            if len(name.encode("utf-8")) >= GGML_MAX_NAME:
                raise GGUFError(path, "corrupt: tensor #%d name %r is %d bytes, ggml allows < %d"
                                % (i, name, len(name.encode("utf-8")), GGML_MAX_NAME))
            n_dims = st.unpack("I", "dimension count of tensor %r" % name)
            if n_dims > GGML_MAX_DIMS:
                raise GGUFError(path, "corrupt: tensor %r has %d dimensions, ggml allows at most %d" % (name, n_dims, GGML_MAX_DIMS))
            shape = [st.unpack("q", "shape of tensor %r" % name) for dummy in range(n_dims)]
            if any(d < 0 for d in shape):
                raise GGUFError(path, "corrupt: tensor %r has a negative dimension %s" % (name, shape))
            n_el = 1
            for d in shape:
                n_el *= d
            if n_el > INT64_MAX:
                raise GGUFError(path, "corrupt: tensor %r shape %s has %d elements, more than int64 (ggml's limit) can count"
                                % (name, shape, n_el))
            type_id = st.unpack("I", "type of tensor %r" % name)
            rel_offset = st.unpack("Q", "data offset of tensor %r" % name)
            raw_tensors.append((name, shape, type_id, rel_offset))
        pad = st.pos % align
        g.data_offset = st.pos + (align - pad if pad else 0)

    seen = set()
    for name, shape, type_id, rel_offset in raw_tensors:
        if name in seen:
            raise GGUFError(path, "corrupt: duplicate tensor name %r" % name)
        seen.add(name)
        if type_id not in GGML_TYPES:
            raise GGUFError(path, "tensor %r has ggml type %d, which llama.cpp b11434 does not know" % (name, type_id))
        tname, blck, _size = GGML_TYPES[type_id]
        if shape and shape[0] % blck:
            raise GGUFError(path, "corrupt: tensor %r row of %d elements is not a multiple of the %s block size %d"
                            % (name, shape[0], tname, blck))
        if rel_offset % align:
            raise GGUFError(path, "corrupt: tensor %r data offset %d is not aligned to %d" % (name, rel_offset, align))
        n_el = 1
        for d in shape:
            n_el *= d
        nbytes = tensor_nbytes(type_id, shape)
        start = g.data_offset + rel_offset
        end = start + nbytes
        if end > file_size:
            raise GGUFError(path, "truncated: tensor %r needs bytes %d..%d but the file has only %d bytes "
                            "(%d missing); re-fetch the file" % (name, start, end, file_size, end - file_size))
        t = GGUFTensor(name, tuple(shape), type_id, start, nbytes, n_el)
        g.tensors.append(t)
        g._by_name[name] = t
    return g
