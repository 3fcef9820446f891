# -*- coding: utf-8 -*-
"""retire(known_sha256=...): a caller that just hashed a multi-GiB file hands the digest over, and the
file in the trash is still checked against it."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf


def _file(tmp_path, data=b"payload"):
    path = tmp_path / "models" / "m.gguf"
    path.parent.mkdir()
    path.write_bytes(data)
    return str(path), hashlib.sha256(data).hexdigest()


def test_a_known_digest_is_recorded_and_the_file_restores(tmp_path):
    path, digest = _file(tmp_path)
    trash = str(tmp_path / "trash" / "event")
    r = tf.retire(trash, [path], known_sha256={path: digest})
    assert r["moves"][0]["sha256"] == digest
    (row,), _ = tf.parse_manifest(open(r["manifest"]).read())
    assert row["sha256"] == digest
    tf.restore(trash)
    assert open(path, "rb").read() == b"payload"


def test_a_wrong_known_digest_is_caught_by_the_check_after_the_move(tmp_path):
    path, _ = _file(tmp_path)
    with pytest.raises(tf.TrashError, match="differs from the original"):
        tf.retire(str(tmp_path / "trash" / "event"), [path], known_sha256={path: "0" * 64})
