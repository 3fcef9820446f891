"""gguf_fetch's stamp is a guarantee (issue 33): it vouches for a file only while size, mtime, ctime and inode are
the ones hashed, and only when it has the stamp's shape and this user wrote it. The owner of the model file can
rewrite its bytes in place and set the mtime back; ctime still moves, so the re-run hashes and repairs."""
import hashlib
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.host import gguf_fetch
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import FetchError, fetch, read_stamp, stamp_matches
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile
import range_http_server

DATA = b"GGUF" + bytes(range(256)) * 64
SHA = hashlib.sha256(DATA).hexdigest()
COMPARED = ("size", "mtime_ns", "ctime_ns", "inode", "sha256")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "m.gguf").write_bytes(DATA)
    server, port = range_http_server.serve(str(root))
    yield "http://127.0.0.1:%d/m.gguf" % port
    server.close()


def _fetch(url, dest, **kw):
    return fetch(url, str(dest), len(DATA), SHA, disk_margin_bytes=0, retries=0, retry_delay=0,
                 trash_dir=str(dest.parent / ".trash"), fsync=False, **kw)


def test_rewrite_in_place_with_mtime_set_back_is_rehashed_and_repaired(tmp_path, mirror):
    dest = tmp_path / "m.gguf"
    assert _fetch(mirror, dest)["status"] == "downloaded"
    again = _fetch(mirror, dest)
    assert (again["status"], again["verified_by"], again["bytes_hashed"]) == ("verified", "stamp", 0)
    before = os.stat(dest)
    with open(dest, "r+b") as f:   # the service user's move: same inode, same size, other bytes
        f.write(b"EVIL")
    os.utime(dest, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(dest)
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    r = _fetch(mirror, dest)
    assert r["status"] != "verified" and r.get("verified_by") != "stamp", r
    assert r["mismatch"]["reason"].startswith("sha256 mismatch") and r["bytes_hashed"] >= len(DATA)
    assert [t["reason"] for t in r["trashed"]] == [r["mismatch"]["reason"]]   # moved aside, never deleted
    assert dest.read_bytes() == DATA and r["status"] == "downloaded"


def test_check_mode_reports_the_rewrite_as_a_mismatch(tmp_path, mirror):
    dest = tmp_path / "m.gguf"
    _fetch(mirror, dest)
    before = os.stat(dest)
    with open(dest, "r+b") as f:
        f.write(b"EVIL")
    os.utime(dest, ns=(before.st_atime_ns, before.st_mtime_ns))
    r = _fetch(mirror, dest, check_mode=True)
    assert r["status"] == "mismatch" and r["mismatch"]["found_sha256"] != SHA


def test_a_stamp_without_ctime_is_rehashed_once_never_trusted(tmp_path, mirror):
    dest = tmp_path / "m.gguf"
    _fetch(mirror, dest)
    stamp_path = str(dest) + gguf_fetch.STAMP_SUFFIX
    old = json.loads(open(stamp_path).read())
    del old["ctime_ns"]                 # what an older release wrote
    with open(stamp_path, "w") as f:
        json.dump(old, f)
    r = _fetch(mirror, dest)
    assert (r["status"], r["verified_by"], r["bytes_hashed"]) == ("verified", "sha256", len(DATA))
    assert "ctime_ns" in read_stamp(str(dest))
    assert _fetch(mirror, dest)["verified_by"] == "stamp"


def test_a_stamp_someone_else_wrote_vouches_for_nothing(tmp_path, mirror):
    dest = tmp_path / "m.gguf"
    _fetch(mirror, dest)
    stamp_path = str(dest) + gguf_fetch.STAMP_SUFFIX
    os.chown(stamp_path, 4242, 4242)    # the service user, owning the directory, wrote it (ctime read by stat)
    assert read_stamp(str(dest)) is None
    os.chown(stamp_path, os.geteuid(), os.getegid())
    os.chmod(stamp_path, 0o666)         # or could have
    assert read_stamp(str(dest)) is None
    os.chmod(stamp_path, 0o644)
    assert read_stamp(str(dest))["sha256"] == SHA


def test_owner_and_mode_are_applied_before_the_stamp_so_the_next_run_trusts_it(tmp_path, mirror):
    dest = tmp_path / "m.gguf"
    calls = []

    def attributes(path):
        calls.append(path)
        before = os.stat(path).st_mode & 0o777
        os.chmod(path, 0o640)          # moves ctime, as the module's chown/chmod does
        return before != 0o640

    r = _fetch(mirror, dest, attributes=attributes)
    assert r["status"] == "downloaded" and calls == [str(dest)]
    assert r["stamp"]["ctime_ns"] == os.stat(dest).st_ctime_ns
    again = _fetch(mirror, dest, attributes=attributes)
    assert (again["verified_by"], again["bytes_hashed"], again["changed"]) == ("stamp", 0, False)
    os.chmod(dest, 0o600)               # someone else's chmod: the stamp no longer vouches; hashed, re-moded
    third = _fetch(mirror, dest, attributes=attributes)
    assert (third["verified_by"], third["changed"]) == ("sha256", True)
    assert third["stamp"]["ctime_ns"] == os.stat(dest).st_ctime_ns
    assert _fetch(mirror, dest, attributes=attributes)["verified_by"] == "stamp"


def test_a_write_while_hashed_is_refused_not_stamped(tmp_path, mirror, monkeypatch):
    dest = tmp_path / "m.gguf"
    _fetch(mirror, dest)
    os.unlink(str(dest) + gguf_fetch.STAMP_SUFFIX)
    real = gguf_fetch.hash_file

    def hash_then_write(path, fd=None):
        out = real(path, fd=fd)
        with open(dest, "r+b") as f:
            f.write(DATA[:4])           # same bytes: only ctime moves
        return out

    monkeypatch.setattr(gguf_fetch, "hash_file", hash_then_write)
    with pytest.raises(FetchError) as e:
        _fetch(mirror, dest)
    assert "changed while it was hashed" in e.value.msg
    assert not os.path.exists(str(dest) + gguf_fetch.STAMP_SUFFIX)


# The stamp's shape as write_stamp writes it: every position of it is a place a forger or a torn write may put
# any JSON value.
STAMP_POSITIONS = hostile.positions({"version": 1, "file": "m.gguf", "size": 1, "mtime_ns": 1, "ctime_ns": 1,
                                     "inode": 1, "sha256": SHA, "verified_at": "t", "source": "s"})


@pytest.fixture(scope="module")
def real_stamp(tmp_path_factory):
    dest = tmp_path_factory.mktemp("stamp") / "m.gguf"
    dest.write_bytes(DATA)
    stamp = gguf_fetch.write_stamp(str(dest), SHA, "http://x/m.gguf")
    return dest, os.lstat(dest), stamp


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(STAMP_POSITIONS), value=hostile.json_values())
def test_hostile_stamps_vouch_only_when_every_compared_field_is_the_real_one(real_stamp, path, value):
    dest, st_now, stamp = real_stamp
    forged = hostile.substitute(stamp, path, value)
    vouched = stamp_matches(forged, st_now, len(DATA), SHA)
    same = isinstance(forged, dict) and all(
        k in forged and type(forged[k]) is type(stamp[k]) and forged[k] == stamp[k] for k in COMPARED)
    if not same:
        assert not vouched, (path, forged)      # a forged or garbled stamp is never "verified"
    if path in [(k,) for k in ("size", "mtime_ns", "ctime_ns", "inode", "sha256")] and not same:
        assert not vouched
    # written to disk and read back through the typed reader: the same verdict, never an exception
    with open(str(dest) + gguf_fetch.STAMP_SUFFIX, "w") as f:
        f.write(hostile.dumps(forged))
    assert stamp_matches(read_stamp(str(dest)), st_now, len(DATA), SHA) == vouched, (path, forged)


def test_the_real_stamp_vouches(real_stamp):
    dest, st_now, stamp = real_stamp
    assert stamp_matches(stamp, st_now, len(DATA), SHA)
    assert not stamp_matches(dict(stamp, ctime_ns=stamp["ctime_ns"] + 1), st_now, len(DATA), SHA)
