"""gguf_reader against llama.cpp b11434's own GGUF reader, file by file (issue 23 item 4).

The oracle is gguf-check (tests/lab/gguf_check.c, built by tests/lab/build-llama-server.sh beside the test
prefix): libggml's gguf_init_from_file exactly as llama_model_loader calls it, plus the loader's one check on
top (every tensor's data within the file). Every crafted file goes through both:

* llama.cpp refuses -> read_gguf (what gguf_info runs) refuses with the same cause (gguf_reader.CAUSES), the
  message naming the file;
* llama.cpp reads   -> read_gguf reads it too, and version, alignment, data offset, metadata count and the
  whole tensor table (name, type, ne, absolute offset, nbytes) agree.

The files: the tests/fixtures/bad_inputs corpus, the lab models, every class of benchmarks/bad_inputs_values.py
(offsets shuffled/overlapping/misaligned, rows not whole blocks, big-endian, cuts, huge counts and lengths,
removed types ...) over random valid files, and random byte flips in the header of random valid files.
"""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import bad_inputs_values as biv
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import CAUSES, GGUFError, read_gguf

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "bad_inputs"

# llama.cpp's messages -> the cause word; the first line that names a specific problem decides.
LLAMA_CAUSES = [
    (r"failed to read magic|invalid magic characters", "magic"),
    (r"mismatch between the host and model endianness", "endian"),
    (r"bad GGUF version|GGUFv1 is no longer supported|only supports up to version", "version"),
    (r"number of tensors is|number of key value pairs is", "count"),
    (r"string length \d+ exceeds maximum", "string_length"),
    (r"string length \d+ exceeds remaining file size|encountered (length_error|bad_alloc)", "read"),
    (r"key \d+ is empty", "key_empty"),
    (r"duplicate key '", "key_duplicate"),
    (r"has invalid GGUF type", "value_type"),
    (r"key 'general\.alignment' must be of type|alignment \d+ is not a power of 2", "alignment"),
    (r"tensor name \d+ is too long", "tensor_name"),
    (r"duplicate tensor name|invalid model: tensor '.*' is duplicated", "tensor_duplicate"),
    (r"has invalid number of dimensions", "n_dims"),
    (r"has invalid number of elements", "ne_negative"),
    (r"may cause overflow errors", "ne_overflow"),
    (r"has invalid ggml type|not a multiple of block size \(0\)", "tensor_type"),
    (r"not a multiple of block size", "block_multiple"),
    (r"has a size in bytes >|overflows after padding|size overflow, cannot accumulate", "nbytes_overflow"),
    (r"failed to seek to beginning of data section", "data_section"),
    (r"has offset \d+, expected \d+", "offset"),
    (r"data is not within the file bounds", "file_bounds"),
    (r"failed to read (header|key-value pairs|tensor info)", "read"),
]
# gguf.cpp reads a tensor's type and checks the range whether or not the read succeeded: at the end of the file
# it logs the uninitialised value as an invalid type. The cause is the read.
SAME = {("tensor_type", "read")}


def _oracle() -> str:
    cache = Path(os.environ.get("DANKFLEET_CACHE") or Path.home() / ".cache" / "dankfleet")
    path = os.environ.get("DANKFLEET_GGUF_CHECK") or str(cache / "llama-b11434-gguf-check" / "gguf-check")
    if not os.access(path, os.X_OK):
        pytest.fail(f"gguf-check not found at {path}: run `make llama-server` (tests/lab/build-llama-server.sh builds "
                    "it beside the prefix) or point DANKFLEET_GGUF_CHECK at one", pytrace=False)
    return path


ORACLE = None


def llama_reads(path):
    global ORACLE
    ORACLE = ORACLE or _oracle()
    out = subprocess.run([ORACLE, str(path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def llama_cause(message):
    for line in message.splitlines():
        for pattern, cause in LLAMA_CAUSES:
            if re.search(pattern, line):
                return cause
    raise AssertionError("a llama.cpp refusal this test cannot classify: %r" % message)


def check_same(path):
    """Both readers on path; returns the verdict ('ok' or the cause) for the caller's tally."""
    llama = llama_reads(path)
    try:
        ours = read_gguf(str(path))
    except GGUFError as exc:
        assert exc.cause in CAUSES and str(exc).startswith(str(path) + ": "), exc
        assert not llama["ok"], "llama.cpp reads %s, gguf_reader refuses it: %s" % (path, exc)
        want = llama_cause(llama["error"])
        assert exc.cause == want or (want, exc.cause) in SAME, (
            "%s: llama.cpp refuses for %s (%s), gguf_reader for %s (%s)"
            % (path, want, llama["error"].strip(), exc.cause, exc.problem))
        return exc.cause
    assert llama["ok"], "llama.cpp refuses %s (%s), gguf_reader reads it" % (path, llama["error"].strip())
    assert (ours.version, ours.alignment, ours.data_offset, ours.kv_count) == (
        llama["version"], llama["alignment"], llama["data_offset"], llama["n_kv"]), path
    theirs = [(t["name"], t["type"], t["ne"], t["offset"], t["nbytes"]) for t in llama["tensors"]]
    mine = [(t.name, t.type_id, list(t.shape) + [1] * (4 - len(t.shape)), t.offset, t.nbytes) for t in ours.tensors]
    # a name that is not UTF-8 is read with replacement characters here, escaped byte by byte there
    assert [m[1:] for m in mine] == [t[1:] for t in theirs], path
    assert [m[0] for m in mine if m[0].isascii()] == [t[0] for t in theirs if t[0].isascii()], path
    return "ok"


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.iterdir() if not p.name.endswith(".py")))
def test_the_corpus_through_both_readers(name):
    check_same(CORPUS / name)


def test_the_lab_models_through_both_readers(lab_models):
    paths = sorted(set(str(e["path"]) for e in lab_models.values() if str(e.get("path", "")).endswith(".gguf")))
    assert paths
    for path in paths:
        assert check_same(path) == "ok", path


@pytest.mark.parametrize("mutation", sorted(biv.MUTATIONS))
def test_every_class_of_mutation_through_both_readers(mutation, tmp_path):
    """Each class over 25 random valid files; the expected cause, where the class has one, is the one both name."""
    seen = set()
    for seed in range(25):
        raw, cause = biv.mutated(seed, mutation)
        path = tmp_path / ("%s-%d.gguf" % (mutation, seed))
        path.write_bytes(raw)
        verdict = check_same(path)
        seen.add(verdict)
        if cause is not None:
            assert verdict == cause, (mutation, seed, verdict)
    assert seen - {"ok"}, "the class %s never produced a file llama.cpp refuses" % mutation


@settings(max_examples=int(os.environ.get("DANKFLEET_DIFF_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2 ** 32),
       flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=4))
def test_random_header_byte_flips_through_both_readers(seed, flips, tmp_path):
    """Any byte of a valid file's header changed: both read it alike, or both refuse it for the same cause."""
    rng = random.Random(seed)
    raw = bytearray(biv.gguf_bytes(biv.random_spec(rng)))
    header = len(biv.gguf_bytes(biv.random_spec(random.Random(seed)).copy(data_bytes=-1)))
    for where, value in flips:
        raw[min(int(where * header), header - 1)] = value
    path = tmp_path / "flipped.gguf"
    path.write_bytes(bytes(raw))
    check_same(path)
