"""gguf_fetch's pure helpers (no network); the role's defaults/argument_specs: tests/unit/roles/test_argument_specs.py."""
import types

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import (
    FetchError, _parse_content_range, redact_url, stamp_matches, validate_declared)

SHA = "ab" * 32


@pytest.mark.parametrize("value,expected", [
    ("bytes 0-9/100", (0, 9, 100)),
    ("bytes 10-99/*", (10, 99, None)),
    ("bytes */100", (None, None, 100)),
    ("  bytes 5-5/6 ", (5, 5, 6)),
    ("items 0-9/100", None),
    ("", None),
    (None, None),
])
def test_parse_content_range(value, expected):
    assert _parse_content_range(value) == expected


def test_validate_declared_normalises():
    assert validate_declared(5, "SHA256:" + SHA.upper()) == (5, SHA)
    assert validate_declared("42", SHA) == (42, SHA)


@pytest.mark.parametrize("size,sha,needle", [
    (0, SHA, "size must be > 0"),
    (-1, SHA, "size must be > 0"),
    (True, SHA, "integer"),
    ("1.5", SHA, "integer"),
    (10, "ab" * 31, "64 hex digits"),
    (10, "zz" * 32, "64 hex digits"),
    (10, None, "64 hex digits"),
])
def test_validate_declared_rejects(size, sha, needle):
    with pytest.raises(FetchError) as e:
        validate_declared(size, sha)
    assert needle in e.value.msg


def test_redact_url_drops_query_and_userinfo():
    assert redact_url("https://u:p@cdn.example:8443/a/b.gguf?X-Amz-Signature=s3cr3t#f") == "https://cdn.example:8443/a/b.gguf"


def _st(size=10, mtime_ns=1, ino=7, ctime_ns=3):
    return types.SimpleNamespace(st_size=size, st_mtime_ns=mtime_ns, st_ino=ino, st_ctime_ns=ctime_ns)


def test_stamp_must_match_inode_size_mtime_ctime_and_declared_hash():
    stamp = {"size": 10, "mtime_ns": 1, "ctime_ns": 3, "inode": 7, "sha256": SHA}
    assert stamp_matches(stamp, _st(), 10, SHA)
    assert not stamp_matches(stamp, _st(ino=8), 10, SHA)        # replaced file
    assert not stamp_matches(stamp, _st(mtime_ns=2), 10, SHA)   # touched / rewritten
    assert not stamp_matches(stamp, _st(ctime_ns=4), 10, SHA)   # rewritten in place, mtime set back
    assert not stamp_matches(stamp, _st(size=11), 11, SHA)      # grew
    assert not stamp_matches(stamp, _st(), 10, "cd" * 32)       # manifest moved on
    assert not stamp_matches(None, _st(), 10, SHA)
    assert not stamp_matches({k: v for k, v in stamp.items() if k != "ctime_ns"}, _st(), 10, SHA)  # an older stamp
    assert not stamp_matches({"size": "x"}, _st(), 10, SHA)
