"""The crafted corpus of tests/fixtures/bad_inputs/: up to date, and each file refused in-process, fast.

benchmarks/bad_inputs.py runs the same files through Ansible with the exact message each must get.
"""
import os
import subprocess
import sys
import time

import pytest

import planner_testlib as lib
from gguf_facts import facts_from_gguf
from gguf_reader import GGUFError, read_gguf

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
