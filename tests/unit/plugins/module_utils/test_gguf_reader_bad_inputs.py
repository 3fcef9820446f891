"""The crafted corpus of tests/fixtures/bad_inputs/: up to date, and each file refused in-process, fast.

benchmarks/bad_inputs.py runs the same files through Ansible with the exact message each must get.
"""
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import facts_from_gguf
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError, read_gguf

CORPUS = os.path.join(lib.FIXTURES, "bad_inputs")
FILES = sorted(f for f in os.listdir(CORPUS) if not f.endswith(".py"))


def test_the_corpus_is_what_build_corpus_writes():
    assert subprocess.run([sys.executable, os.path.join(CORPUS, "build_corpus.py"), "--check"]).returncode == 0
    assert len(FILES) >= 40


@pytest.mark.parametrize("name", FILES)
def test_each_crafted_file_is_refused_naming_the_file(name):
    path = os.path.join(CORPUS, name)
    t0 = time.monotonic()
    if name.startswith("good_"):
        assert facts_from_gguf(read_gguf(path))["block_count"] == 2
    else:
        with pytest.raises(GGUFError) as exc:
            facts_from_gguf(read_gguf(path))
        assert str(exc.value).startswith(path + ": ")
    assert time.monotonic() - t0 < 1.0


def _sparse(path, head, size=64 << 30):
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(size)
    return str(path)


def _s(text):
    import struct
    return struct.pack("<Q", len(text)) + text.encode()


def test_sparse_files_cannot_claim_their_holes(tmp_path):
    """A few header bytes and 64 GiB of holes: lengths the file can 'hold' are still bounded, fast, small."""
    import struct
    import tracemalloc
    cases = [
        (b"GGUF" + struct.pack("<Iqq", 3, 0, 1) + _s("general.name") + struct.pack("<IQ", 8, 60 << 30),
         r"claims 64424509440 bytes, more than the 1073741824 llama.cpp reads"),
        (b"GGUF" + struct.pack("<Iqq", 3, 60000, 0), r"duplicate tensor name '' \(tensor #1"),
        (b"GGUF" + struct.pack("<Iqq", 3, 0, 1) + _s("x.big") + struct.pack("<IIQ", 9, 10, (1 << 21) + 1),
         r"claims 2097153 elements, expected at most 2097152"),
        (b"GGUF" + struct.pack("<Iqq", 3, 0, 60000) + b"".join(
            _s("k%d" % j) + struct.pack("<I", 8) + _s("v" * 4000) for j in range(3)),
         r"metadata key #3 at offset \d+ is empty"),
    ]
    for i, (head, match) in enumerate(cases):
        path = _sparse(tmp_path / ("s%d.gguf" % i), head)
        tracemalloc.start()
        t0 = time.monotonic()
        with pytest.raises(GGUFError, match=match):
            read_gguf(path)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert time.monotonic() - t0 < 2 and peak < 64 << 20, (i, peak)


def test_the_header_is_bounded_in_bytes(tmp_path, monkeypatch):
    import struct
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan import gguf_reader
    monkeypatch.setattr(gguf_reader, "MAX_HEADER_BYTES", 4096)
    head = b"GGUF" + struct.pack("<Iqq", 3, 0, 2) + _s("a") + struct.pack("<I", 8) + _s("v" * 5000)
    path = _sparse(tmp_path / "long.gguf", head, size=1 << 20)
    with pytest.raises(GGUFError, match=r"would take the header past 4096 bytes"):
        read_gguf(path)
