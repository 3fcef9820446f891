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

from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import open_regular

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
    """A GGUF file that cannot be read; the message names the file and the problem.

    cause: one word for the class of the problem (CAUSES), the same word the differential test gives
    llama.cpp b11434's own refusal of the same file (tests/unit/plugins/module_utils/test_gguf_differential.py).
    """

    def __init__(self, path, problem, cause="facts"):
        self.path = path
        self.problem = problem
        self.cause = cause
        super(GGUFError, self).__init__("%s: %s" % (path, problem))


# The classes of refusal, each as llama.cpp b11434 (ggml/src/gguf.cpp gguf_init_from_reader, then
# src/llama-model-loader.h llama_tensor_weight) refuses a file.
CAUSES = {
    "magic": "not a GGUF file (no 'GGUF' magic)",
    "version": "a GGUF version llama.cpp does not read (0, 1, above 3)",
    "endian": "the byte order of another host (a big-endian file on a little-endian one)",
    "count": "a negative tensor or metadata count",
    "read": "the file ends before what its header claims (a count, a length, an entry)",
    "string_length": "a string longer than llama.cpp reads (1 GiB)",
    "key_empty": "an empty metadata key",
    "key_duplicate": "a metadata key given twice",
    "value_type": "an unknown GGUF value type (or an array of arrays)",
    "alignment": "general.alignment not a UINT32 power of 2",
    "tensor_name": "a tensor name of GGML_MAX_NAME (64) bytes or more",
    "tensor_duplicate": "a tensor name given twice",
    "n_dims": "a tensor of more than GGML_MAX_DIMS (4) dimensions",
    "ne_negative": "a negative tensor dimension",
    "ne_overflow": "a tensor whose element count overflows int64",
    "tensor_type": "a ggml type llama.cpp b11434 does not know (or removed: 4, 5, 31-33, 36-38)",
    "block_multiple": "a quantized tensor whose row is not a whole number of blocks",
    "nbytes_overflow": "a tensor whose byte size overflows size_t",
    "data_section": "the data section's alignment padding past the end of the file",
    "offset": "a tensor data offset other than the running padded sum (out of order, overlapping, a gap)",
    "file_bounds": "a tensor whose data lies past the end of the file",
    "limit": "a count or length beyond this reader's sane maxima (stricter than llama.cpp by design)",
    "facts": "metadata llama.cpp refuses when it loads the model (gguf_facts)",
    "remote": "a url whose server does not answer Range requests truthfully, or that the HTTP client refuses (gguf_remote)",
}
SIZE_MAX = (1 << 64) - 1
GGML_TYPE_COUNT = 43
GGUF_MAX_STRING_LENGTH = 1 << 30     # gguf.cpp b11434
GGUF_MAX_ARRAY_ELEMENTS = 1 << 30
# gguf.cpp: a count above SIZE_MAX / sizeof(gguf_tensor_info) or SIZE_MAX / sizeof(gguf_kv) is refused before
# anything is read (x86_64/aarch64 Linux, libstdc++: sizeof 344 and 88, the bounds its messages print).
GGUF_MAX_TENSOR_COUNT = SIZE_MAX // 344
GGUF_MAX_KV_COUNT = SIZE_MAX // 88


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
    """ggml_nbytes for a contiguous tensor: rows of ne[0] in blocks, times the other dims (0 dims: one element)."""
    name, blck, size = GGML_TYPES[type_id]
    ne = list(shape) or [1]
    n_rows = 1
    for d in ne[1:]:
        n_rows *= d
    return (ne[0] // blck) * size * n_rows


class _Stream(object):
    """Buffered little-endian reader that reports truncation with the offset."""

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
                            "a header (metadata and tensor table) smaller than that" % (what, self.pos, MAX_HEADER_BYTES),
                            "limit")
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
                            "re-fetch the file" % (self.file_size, what, self.pos, n), "read")
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

    def raw_string(self, what, maximum=MAX_STRING_BYTES):
        """The bytes of one length-prefixed string, refused in gguf.cpp's order, then by this reader's maximum."""
        n = self.unpack("Q", what + " (length)")
        if n > GGUF_MAX_STRING_LENGTH:
            raise GGUFError(self.path, "corrupt: %s at offset %d claims %d bytes, more than the %d llama.cpp reads"
                            % (what, self.pos - 8, n, GGUF_MAX_STRING_LENGTH), "string_length")
        if n > self.remaining:
            raise GGUFError(self.path, "corrupt or truncated: %s at offset %d claims %d bytes, more than the %d bytes "
                            "left in the file (%d bytes): expected a string length that fits"
                            % (what, self.pos - 8, n, self.remaining, self.file_size), "read")
        if maximum is not None and n > maximum:
            raise GGUFError(self.path, "corrupt: %s at offset %d is %d bytes long, expected at most %d"
                            % (what, self.pos - 8, n, maximum), "limit")
        return self.read(n, what)

    def string(self, what, maximum=MAX_STRING_BYTES):
        return _decode(self.raw_string(what, maximum))


def _decode(raw):
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
        self.kv_count = 0       # metadata entries in the file (fields holds one per distinct key)
        self.fields = {}        # key -> python value (arrays as lists)
        self.field_types = {}   # key -> "UINT32" or "ARRAY[STRING]" ...
        self.tensors = []       # GGUFTensor, in file order
        self.header_only = False  # read with header_only: tensor data need not be in the file
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
    if entry is None or (type_id == 9 and depth > 0):
        raise GGUFError(st.path, "corrupt: %s has invalid GGUF value type %d at offset %d%s"
                        % (what, type_id, st.pos - 4, " (an array of arrays)" if type_id == 9 else ""), "value_type")
    name, fmt = entry
    if fmt is not None:
        return name, st.unpack(fmt, what)
    if type_id == 8:
        return name, st.string(what)
    # array: element type, count, elements (gguf.cpp reads both before it judges the type)
    elem_type = st.unpack("I", what + " (array type)")
    count = st.unpack("Q", what + " (array length)")
    elem = GGUF_VALUE_TYPES.get(elem_type)
    if elem is None or elem_type == 9:
        raise GGUFError(st.path, "corrupt: %s is an array of invalid GGUF value type %d%s"
                        % (what, elem_type, " (an array of arrays)" if elem_type == 9 else ""), "value_type")
    elem_name, elem_fmt = elem
    min_size = struct.calcsize(st.endian + elem_fmt) if elem_fmt is not None else 8
    if count > GGUF_MAX_ARRAY_ELEMENTS or count * min_size > st.remaining:
        raise GGUFError(st.path, "corrupt or truncated: %s at offset %d claims %d %s elements (>= %d bytes), more "
                        "than the %d bytes left in the file (or the %d llama.cpp reads)"
                        % (what, st.pos - 8, count, elem_name, count * min_size, st.remaining, GGUF_MAX_ARRAY_ELEMENTS),
                        "read")
    if count > MAX_ARRAY:
        raise GGUFError(st.path, "corrupt: %s at offset %d claims %d elements, expected at most %d"
                        % (what, st.pos - 8, count, MAX_ARRAY), "limit")
    st.array_elements += count
    if st.array_elements > MAX_ARRAY_ELEMENTS:
        raise GGUFError(st.path, "corrupt: %s at offset %d brings the header's array elements to %d, expected at most %d"
                        % (what, st.pos - 8, st.array_elements, MAX_ARRAY_ELEMENTS), "limit")
    if elem_fmt is not None:
        raw = st.read(min_size * count, what)
        values = list(struct.unpack("%s%d%s" % (st.endian, count, elem_fmt), raw)) if count else []
    else:
        values = [st.string("%s[%d]" % (what, i)) for i in range(count)]
    return "ARRAY[%s]" % elem_name, values


def _pad(n, align):
    return n + (-n % align)


def read_gguf(path, header_only=False):
    """Parse the header, metadata and tensor table of the GGUF file at path.

    Every check llama.cpp b11434 makes reading a file (ggml/src/gguf.cpp gguf_init_from_reader, in its order, so
    the first problem found is the one llama.cpp names) and the one its model loader adds (tensor data within the
    file), then this reader's own sane maxima (cause ``limit``).

    header_only: the file may end after its tensor table (a header cut from a model, for planning): the checks
    of tensor data within the file are skipped; everything up to the end of the tensor table is still checked.
    """
    path = os.fspath(path) if hasattr(os, "fspath") else path
    fh = open_regular(path, GGUFError, "GGUF file")
    with fh:
        return read_gguf_from(fh, path, os.fstat(fh.fileno()).st_size, header_only)


def read_gguf_from(source, path, file_size, header_only=False):
    """read_gguf over any byte source: ``source.read(n)`` returns the next n bytes (fewer only at the end).

    path: the name every message gives (a file's path, a redacted url); file_size: the bytes the source holds
    (a local file's size, the total a server's Content-Range declared). One parser for a file and a url.
    """
    g = GGUFFile(path)
    g.file_size = file_size
    g.header_only = bool(header_only)
    st = _Stream(source, path, file_size)
    if file_size < 4:
        raise GGUFError(path, "not a GGUF file: %d bytes, too short for the 4-byte magic" % file_size, "magic")
    magic = st.read(4, "magic")
    if magic != GGUF_MAGIC:
        raise GGUFError(path, "not a GGUF file: the magic is %r, expected b'GGUF'" % (magic,), "magic")
    version = st.unpack("I", "version")
    if version == 0:
        raise GGUFError(path, "bad GGUF version 0: llama.cpp b11434 reads versions 2 and 3", "version")
    if version & 0x0000FFFF == 0:
        swapped = struct.unpack(">I", struct.pack("<I", version))[0]
        raise GGUFError(path, "the version field reads 0x%08x (%d byte-swapped): a big-endian GGUF, which llama.cpp "
                        "on a little-endian host refuses (gguf.cpp: host and model endianness mismatch); convert it "
                        "with gguf-py's gguf_convert_endian.py or fetch the little-endian file"
                        % (version, swapped), "endian")
    if version not in GGUF_SUPPORTED_VERSIONS:
        raise GGUFError(path, "unsupported GGUF version %d: this reader (like llama.cpp b11434) supports versions %s"
                        % (version, " and ".join(str(v) for v in GGUF_SUPPORTED_VERSIONS)), "version")
    g.version = version
    n_tensors = st.unpack("q", "tensor count")
    if n_tensors < 0 or n_tensors > GGUF_MAX_TENSOR_COUNT:
        raise GGUFError(path, "corrupt header: the tensor count at offset 8 is %d, expected 0..%d (llama.cpp's "
                        "bound)" % (n_tensors, GGUF_MAX_TENSOR_COUNT), "count")
    n_kv = st.unpack("q", "metadata count")
    if n_kv < 0 or n_kv > GGUF_MAX_KV_COUNT:
        raise GGUFError(path, "corrupt header: the metadata count at offset 16 is %d, expected 0..%d (llama.cpp's "
                        "bound)" % (n_kv, GGUF_MAX_KV_COUNT), "count")
    # Entries are read one by one, as gguf.cpp does (the first bad one is the one named); a count the file
    # cannot hold fails at the entry that runs past its end, a count beyond the maxima at that entry.
    seen_keys = set()
    for i in range(n_kv):
        if i >= MAX_METADATA:
            raise GGUFError(path, "corrupt header: the metadata count at offset 16 is %d, expected at most %d"
                            % (n_kv, MAX_METADATA), "limit")
        raw_key = st.raw_string("metadata key #%d" % i, maximum=MAX_KEY_BYTES)
        if not raw_key:
            raise GGUFError(path, "corrupt: metadata key #%d at offset %d is empty, expected a key name"
                            % (i, st.pos - 8), "key_empty")
        # llama.cpp finds a key by its C string (up to a NUL), after judging duplicates on all its bytes
        key = _decode(raw_key.split(b"\0", 1)[0])
        if raw_key in seen_keys:
            raise GGUFError(path, "corrupt: duplicate metadata key %r (metadata #%d)" % (key, i), "key_duplicate")
        seen_keys.add(raw_key)
        vtype = st.unpack("I", "type of metadata %r" % key)
        tname, value = _read_value(st, vtype, "metadata %r" % key)
        if key not in g.fields:          # gguf_find_key: the first key of that C string
            g.fields[key] = value
            g.field_types[key] = tname
    g.kv_count = n_kv
    align = g.fields.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if "general.alignment" in g.fields and g.field_types["general.alignment"] != "UINT32":
        raise GGUFError(path, "corrupt: general.alignment must be UINT32, is %s" % g.field_types["general.alignment"],
                        "alignment")
    if align <= 0 or align & (align - 1):
        raise GGUFError(path, "corrupt: general.alignment %d is not a power of 2" % align, "alignment")
    g.alignment = align
    raw_tensors = []
    seen_names = set()
    for i in range(n_tensors):
        if i >= MAX_TENSORS:
            raise GGUFError(path, "corrupt header: the tensor count at offset 8 is %d, expected at most %d"
                            % (n_tensors, MAX_TENSORS), "limit")
        raw_name = st.raw_string("name of tensor #%d" % i, maximum=MAX_KEY_BYTES)
        name = _decode(raw_name.split(b"\0", 1)[0])     # ggml_set_name copies the C string, up to a NUL
        if len(raw_name) >= GGML_MAX_NAME:
            raise GGUFError(path, "corrupt: tensor #%d name %r is %d bytes, ggml allows < %d"
                            % (i, name, len(raw_name), GGML_MAX_NAME), "tensor_name")
        if raw_name in seen_names:
            raise GGUFError(path, "corrupt: duplicate tensor name %r (tensor #%d at offset %d)"
                            % (name, i, st.pos - 8 - len(raw_name)), "tensor_duplicate")
        seen_names.add(raw_name)
        n_dims = st.unpack("I", "dimension count of tensor %r" % name)
        if n_dims > GGML_MAX_DIMS:
            raise GGUFError(path, "corrupt: tensor %r has %d dimensions, ggml allows at most %d"
                            % (name, n_dims, GGML_MAX_DIMS), "n_dims")
        shape = []
        for j in range(n_dims):
            d = st.unpack("q", "shape of tensor %r" % name)
            if d < 0:
                raise GGUFError(path, "corrupt: tensor %r dimension %d is %d, expected 0 or more" % (name, j, d),
                                "ne_negative")
            shape.append(d)
        n_el = 1
        for d in shape:
            n_el *= d
        if n_el > INT64_MAX:
            raise GGUFError(path, "corrupt: tensor %r shape %s has %d elements, more than int64 (ggml's limit) can "
                            "count" % (name, shape, n_el), "ne_overflow")
        type_id = st.unpack("i", "type of tensor %r" % name)
        if type_id < 0 or type_id >= GGML_TYPE_COUNT or type_id not in GGML_TYPES:
            raise GGUFError(path, "tensor %r has ggml type %d, which llama.cpp b11434 does not know (known: 0..%d "
                            "but 4, 5, 31-33, 36-38, which it removed)" % (name, type_id, GGML_TYPE_COUNT - 1),
                            "tensor_type")
        tname, blck, tsize = GGML_TYPES[type_id]
        ne0 = shape[0] if shape else 1
        if ne0 % blck:
            raise GGUFError(path, "corrupt: tensor %r row of %d elements is not a multiple of the %s block size %d "
                            "(a quantized row is whole blocks)" % (name, ne0, tname, blck), "block_multiple")
        if n_el // blck > SIZE_MAX // tsize:
            raise GGUFError(path, "corrupt: tensor %r shape %s of %s is more than 2^64 bytes" % (name, shape, tname),
                            "nbytes_overflow")
        rel_offset = st.unpack("Q", "data offset of tensor %r" % name)
        raw_tensors.append((name, shape, type_id, rel_offset))
    g.data_offset = _pad(st.pos, align) if n_tensors > 0 else st.pos
    if g.data_offset > file_size and not header_only:
        raise GGUFError(path, "truncated: the data section starts at byte %d (the tensor table padded to %d), past "
                        "the end of the file at %d; re-fetch the file" % (g.data_offset, align, file_size),
                        "data_section")

    # gguf.cpp: each tensor's data starts where the previous one's (padded to the alignment) ends, in table order
    expected = 0
    for name, shape, type_id, rel_offset in raw_tensors:
        nbytes = tensor_nbytes(type_id, shape)
        if rel_offset != expected:
            raise GGUFError(path, "corrupt: tensor %r has data offset %d, expected %d (each tensor's data follows the "
                            "previous one's, padded to %d: %s)"
                            % (name, rel_offset, expected, align,
                               "overlapping" if rel_offset < expected else "out of order or a gap"), "offset")
        if nbytes > SIZE_MAX - (align - 1) or SIZE_MAX - expected < _pad(nbytes, align):
            raise GGUFError(path, "corrupt: tensor %r of %d bytes overflows the data section's size" % (name, nbytes),
                            "nbytes_overflow")
        expected += _pad(nbytes, align)
    # llama_model_loader: each tensor by its C-string name, once (a name cut at a NUL can repeat one), then its
    # data within the file (llama_tensor_weight)
    for name, shape, type_id, rel_offset in raw_tensors:
        if name in g._by_name:
            raise GGUFError(path, "corrupt: tensor %r is duplicated (its name up to the first NUL byte is another "
                            "tensor's): llama.cpp refuses the model" % name, "tensor_duplicate")
        nbytes = tensor_nbytes(type_id, shape)
        start = g.data_offset + rel_offset
        end = start + nbytes
        if end > file_size and not header_only:
            raise GGUFError(path, "truncated: tensor %r needs bytes %d..%d but the file has only %d bytes "
                            "(%d missing); re-fetch the file" % (name, start, end, file_size, end - file_size),
                            "file_bounds")
        n_el = 1
        for d in shape:
            n_el *= d
        t = GGUFTensor(name, tuple(shape), type_id, start, nbytes, n_el)
        g.tensors.append(t)
        g._by_name[name] = t
    return g
