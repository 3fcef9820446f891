# -*- coding: utf-8 -*-
"""sha256: the one file-hash helper, exact at every chunk boundary, with a limit and a continued hasher."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.base.sha256 import hash_file, sha256_file

CHUNK = 4096


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17])
def test_whole_file_matches_hashlib(tmp_path, size):
    data = bytes((i * 7 + 3) % 251 for i in range(size))
    path = tmp_path / "f"
    path.write_bytes(data)
    h, n = hash_file(str(path), chunk=CHUNK)
    assert (h.hexdigest(), n) == (hashlib.sha256(data).hexdigest(), size)
    assert sha256_file(str(path)) == hashlib.sha256(data).hexdigest()


def test_limit_and_a_continued_hasher_hash_a_prefix_then_the_rest(tmp_path):
    data = bytes(range(256)) * 50
    path = tmp_path / "f"
    path.write_bytes(data)
    h, n = hash_file(str(path), chunk=CHUNK, limit=CHUNK + 5)
    assert n == CHUNK + 5 and h.hexdigest() == hashlib.sha256(data[:CHUNK + 5]).hexdigest()
    h.update(data[CHUNK + 5:])
    assert h.hexdigest() == hashlib.sha256(data).hexdigest()
    prefix = hashlib.sha256(b"prefix")
    h2, n2 = hash_file(str(path), hasher=prefix)
    assert n2 == len(data) and h2.hexdigest() == hashlib.sha256(b"prefix" + data).hexdigest()


def test_a_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(OSError):
        sha256_file(str(tmp_path / "absent"))
