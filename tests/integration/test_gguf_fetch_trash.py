"""gguf_fetch's trash is trash_files': what it sets aside restores byte-identical from the MANIFEST.

A real HTTP server on 127.0.0.1 (tests/lab/range_http_server.py) serves the payload; the file gguf_fetch
moves aside is put back by trash_files.restore, the same code dankfleet.llm.trash_files runs.
"""
import hashlib
import os

import pytest

import range_http_server
from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import STAMP_SUFFIX, fetch

PAYLOAD = bytes(range(256)) * 1024 + b"tail"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirror")
    (root / "m.gguf").write_bytes(PAYLOAD)
    server, port = range_http_server.serve(str(root))
    yield "http://127.0.0.1:%d/m.gguf" % port
    server.close()


def _fetch(mirror, dest, **kw):
    return fetch(mirror, str(dest), len(PAYLOAD), hashlib.sha256(PAYLOAD).hexdigest(), retries=1, retry_delay=0.05,
                 timeout=5, disk_margin_bytes=0, progress_interval=0, **kw)


def _snapshot(paths):
    return dict((p, (open(p, "rb").read(), os.stat(p).st_mode)) for p in paths)


def test_a_trashed_file_and_its_stamp_restore_byte_identical_from_the_manifest(mirror, tmp_path):
    dest = tmp_path / "models" / "m.gguf"
    dest.parent.mkdir()
    _fetch(mirror, dest)
    with open(dest, "r+b") as f:          # corrupted in place after it was stamped: same size, stale stamp
        f.seek(4242)
        f.write(b"\x00\x01")
    os.chmod(dest, 0o640)
    before = _snapshot([str(dest), str(dest) + STAMP_SUFFIX])
    r = _fetch(mirror, dest, trash_dir=str(tmp_path / "trash"))
    assert r["status"] == "downloaded" and open(dest, "rb").read() == PAYLOAD
    (entry,) = r["trashed"]
    assert entry["from"] == str(dest) and os.path.dirname(entry["trash_dir"]) == str(tmp_path / "trash")
    files, units = trash_files.parse_manifest(open(entry["manifest"]).read())
    assert units == [] and sorted(row["given"] for row in files) == sorted(before)
    with pytest.raises(trash_files.TrashError, match="exists already"):
        trash_files.restore(entry["trash_dir"])     # the fresh download is in the way: nothing is overwritten
    for path in before:
        os.rename(path, str(tmp_path / os.path.basename(path)))
    restored = trash_files.restore(entry["trash_dir"])
    assert restored["changed"] and len(restored["moves"]) == 2
    assert _snapshot(before) == before


def test_a_part_too_long_goes_to_the_trash_unhashed_and_restores(mirror, tmp_path):
    """No digest was computed for it (size alone rules it out): the MANIFEST row still holds its sha256."""
    dest = tmp_path / "m.gguf"
    part = str(dest) + ".part"
    with open(part, "wb") as f:
        f.write(PAYLOAD + b"more")
    r = _fetch(mirror, dest)
    (entry,) = r["trashed"]
    assert entry["trash_dir"].startswith(str(tmp_path / ".trash") + os.sep)   # the default: .trash beside dest
    manifest = open(entry["manifest"]).read()
    assert "found    size %d sha256 (not hashed)" % (len(PAYLOAD) + 4) in manifest
    (row,), _ = trash_files.parse_manifest(manifest)
    assert row["sha256"] == hashlib.sha256(PAYLOAD + b"more").hexdigest()
    trash_files.restore(entry["trash_dir"])
    assert open(part, "rb").read() == PAYLOAD + b"more"
