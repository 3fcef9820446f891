"""gguf_fetch against a real HTTP server on 127.0.0.1 (tests/lab/range_http_server.py).

No mocks: every fault is injected by the server (/_fault/<fault>/<path>) and
every claim is checked on disk, in the module's result, or in the server's
request log. Each fault must end with a verified file or a clear failure,
and never with a promoted wrong file.
"""

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import PART_SUFFIX, STAMP_SUFFIX, FetchError
from ansible_collections.dankfleet.llm.tests.integration.fetch_server import (  # noqa: F401 - served* are fixtures
    SIZE, TOKEN, assert_verified_on_disk, listing, requests_since, run, served, served_token, url)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


# -- clean path, stamp, verify=full --------------------------------------

def test_clean_download_then_stamp_skips_hashing(served, tmp_path):
    dest = tmp_path / "m.gguf"
    log = tmp_path / "progress.log"
    r = run(served, dest, progress_log=str(log))
    assert r["status"] == "downloaded" and r["changed"]
    assert r["bytes_downloaded"] == SIZE
    assert r["bytes_hashed"] == SIZE  # hashed while downloading: one pass, no re-read
    assert r["resumed_from"] == 0 and r["attempts"] == 1
    assert r["rate_bytes_per_s"] > 0
    assert_verified_on_disk(served, dest)
    text = log.read_text()
    assert "start " in text and "progress " in text and "verified and promoted" in text

    mark = len(served["server"].requests)
    again = run(served, dest)
    assert again["status"] == "verified" and not again["changed"]
    assert again["verified_by"] == "stamp"
    assert again["bytes_hashed"] == 0 and again["bytes_downloaded"] == 0
    assert requests_since(served, mark) == []  # no network either


def test_verify_full_rehashes_every_byte(served, tmp_path):
    dest = tmp_path / "m.gguf"
    run(served, dest)
    r = run(served, dest, verify="full")
    assert r["status"] == "verified" and not r["changed"]
    assert r["verified_by"] == "sha256"
    assert r["bytes_hashed"] == SIZE


def test_touched_file_is_rehashed_once_then_stamped_again(served, tmp_path):
    dest = tmp_path / "m.gguf"
    run(served, dest)
    st = os.stat(dest)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the stamp no longer vouches for it
    r = run(served, dest)
    assert r["status"] == "verified" and r["bytes_hashed"] == SIZE and not r["changed"]
    assert run(served, dest)["bytes_hashed"] == 0


# -- drop-after: resume -------------------------------------------------

def test_drop_then_resume_on_next_run(served, tmp_path):
    dest = tmp_path / "m.gguf"
    with pytest.raises(FetchError) as e:
        run(served, dest, url(served, "drop-after-300000"), retries=0)
    assert "re-run to resume" in e.value.msg
    assert not dest.exists()
    assert os.path.getsize(str(dest) + PART_SUFFIX) == 300000

    mark = len(served["server"].requests)
    r = run(served, dest)
    assert r["status"] == "resumed"
    assert r["resumed_from"] == 300000
    assert r["bytes_downloaded"] == SIZE - 300000 < SIZE
    assert r["bytes_hashed"] == SIZE  # the .part prefix once, then the stream
    assert [q["range"] for q in requests_since(served, mark)] == ["bytes=300000-"]
    assert_verified_on_disk(served, dest)


def test_drop_every_response_retries_with_range_until_done(served, tmp_path):
    dest = tmp_path / "m.gguf"
    mark = len(served["server"].requests)
    r = run(served, dest, url(served, "drop-after-400000"), retries=1)
    assert r["status"] == "downloaded"
    assert r["attempts"] == 4 and r["resumes"] == 3
    assert r["bytes_downloaded"] == SIZE
    ranges = [q["range"] for q in requests_since(served, mark)]
    assert ranges == [None, "bytes=400000-", "bytes=800000-", "bytes=1200000-"]
    assert_verified_on_disk(served, dest)


# -- ignore-range: clean restart ------------------------------------------

def test_server_ignoring_range_restarts_cleanly(served, tmp_path):
    dest = tmp_path / "m.gguf"
    # A .part whose bytes are wrong: appending the 200 body to it would corrupt the file.
    (tmp_path / ("m.gguf" + PART_SUFFIX)).write_bytes(b"\0" * 500000)
    r = run(served, dest, url(served, "ignore-range"))
    assert r["status"] == "downloaded"
    assert r["restarts"] == 1 and r["resumed_from"] == 0
    assert r["bytes_downloaded"] == SIZE
    assert r["bytes_hashed"] == 500000 + SIZE  # the discarded prefix was hashed once: counted honestly
    assert_verified_on_disk(served, dest)


# -- wrong-bytes: never promoted ------------------------------------------

def test_wrong_bytes_fail_and_part_goes_to_trash(served, tmp_path):
    dest = tmp_path / "m.gguf"
    trash = tmp_path / "trash"
    with pytest.raises(FetchError) as e:
        run(served, dest, url(served, "wrong-bytes"), trash_dir=str(trash))
    assert "sha256 mismatch after download" in e.value.msg
    assert not dest.exists()
    assert not os.path.exists(str(dest) + PART_SUFFIX)
    assert not os.path.exists(str(dest) + STAMP_SUFFIX)
    (entry,) = e.value.result["trashed"]
    moved = open(entry["path"], "rb").read()
    assert len(moved) == SIZE and moved != served["data"]
    part = str(dest) + PART_SUFFIX
    assert entry["path"] == os.path.join(entry["trash_dir"], part.lstrip("/"))  # trash_files' layout
    assert entry["note"] == entry["manifest"] == os.path.join(entry["trash_dir"], "MANIFEST")
    manifest = open(entry["manifest"]).read()
    assert manifest.startswith("# dankfleet.llm trash MANIFEST v3\n")
    mode = "%04o" % (os.stat(entry["path"]).st_mode & 0o7777)
    assert "\t%s\t%s\t-\t%s\t" % (mode, hashlib.sha256(moved).hexdigest(), part) in manifest  # mode sha256 link given
    assert "\nmoved\t%s\n" % part in manifest                                # the write-ahead log's record
    assert "expected size %d sha256 %s" % (SIZE, served["sha256"]) in manifest


# -- stall: timeout, then retry -------------------------------------------

def test_stall_times_out_and_retry_finishes(served, tmp_path):
    dest = tmp_path / "m.gguf"
    t0 = time.monotonic()
    r = run(served, dest, url(served, "stall-5-once", path="models/payload.gguf?stall=%s" % tmp_path.name),
            timeout=0.5)
    assert time.monotonic() - t0 < 5  # did not sit out the stall
    assert r["attempts"] == 2 and r["resumes"] == 1
    assert r["status"] == "downloaded"
    assert_verified_on_disk(served, dest)


# -- 416 on a complete .part ----------------------------------------------

def test_416_on_complete_part_goes_to_verification(served, tmp_path):
    dest = tmp_path / "m.gguf"
    (tmp_path / ("m.gguf" + PART_SUFFIX)).write_bytes(served["data"])
    mark = len(served["server"].requests)
    r = run(served, dest)
    assert [(q["range"], q["status"]) for q in requests_since(served, mark)] == [("bytes=%d-" % SIZE, 416)]
    assert r["status"] == "resumed" and r["resumed_from"] == SIZE
    assert r["bytes_downloaded"] == 0 and r["bytes_hashed"] == SIZE
    assert_verified_on_disk(served, dest)


def test_416_on_complete_but_wrong_part_is_trashed_not_promoted(served, tmp_path):
    dest = tmp_path / "m.gguf"
    bad = bytearray(served["data"])
    bad[7] ^= 0xFF
    (tmp_path / ("m.gguf" + PART_SUFFIX)).write_bytes(bytes(bad))
    with pytest.raises(FetchError) as e:
        run(served, dest, trash_dir=str(tmp_path / "trash"))
    assert "sha256 mismatch" in e.value.msg
    assert not dest.exists() and not os.path.exists(str(dest) + PART_SUFFIX)
    assert open(e.value.result["trashed"][0]["path"], "rb").read() == bytes(bad)


def test_part_longer_than_declared_is_trashed_and_refetched(served, tmp_path):
    dest = tmp_path / "m.gguf"
    (tmp_path / ("m.gguf" + PART_SUFFIX)).write_bytes(served["data"] + b"extra")
    r = run(served, dest, trash_dir=str(tmp_path / "trash"))
    assert r["status"] == "downloaded" and len(r["trashed"]) == 1
    assert_verified_on_disk(served, dest)


# -- token, HTTP errors ---------------------------------------------------

def test_token_required_and_accepted(served, served_token, tmp_path):
    dest = tmp_path / "m.gguf"
    u = served_token["base"] + "/models/payload.gguf"
    with pytest.raises(FetchError) as e:
        run(served, dest, u)
    assert "401" in e.value.msg and "token" in e.value.msg
    assert e.value.result["attempts"] == 1  # not retried: a retry cannot fix a missing token
    with pytest.raises(FetchError):
        run(served, dest, u, token="wrong")
    assert not dest.exists() and not os.path.exists(str(dest) + PART_SUFFIX)
    r = run(served, dest, u, token=TOKEN)
    assert r["status"] == "downloaded"
    assert_verified_on_disk(served, dest)


def test_token_not_sent_to_a_redirect_on_another_origin(served, served_token, tmp_path):
    # The Hub answers /resolve/ with a redirect to a signed CDN URL: the token stays home.
    dest = tmp_path / "m.gguf"
    other_port = int(served["base"].rsplit(":", 1)[1])
    u = "%s/_fault/redirect-%d/models/payload.gguf" % (served_token["base"], other_port)
    mark = len(served["server"].requests)
    r = run(served, dest, u, token=TOKEN)
    assert r["status"] == "downloaded"
    (hop,) = requests_since(served, mark)
    assert hop["path"] == "/models/payload.gguf" and hop["auth"] is False
    assert_verified_on_disk(served, dest)


def test_token_kept_on_a_same_origin_redirect(served, served_token, tmp_path):
    dest = tmp_path / "m.gguf"
    server = served_token["server"]
    own_port = int(served_token["base"].rsplit(":", 1)[1])
    mark = len(server.requests)
    r = run(served, dest, "%s/_fault/redirect-%d/models/payload.gguf" % (served_token["base"], own_port),
            token=TOKEN)
    assert r["status"] == "downloaded"
    assert [(q["status"], q["auth"]) for q in server.requests[mark:]] == [(302, True), (200, True)]


def test_concurrent_fetch_of_the_same_file_is_refused(served, tmp_path):
    lock = tmp_path / "m.gguf.lock"
    fd = os.open(str(lock), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(FetchError) as e:
            run(served, tmp_path / "m.gguf")
        assert "another gguf_fetch is writing %s" % (tmp_path / "m.gguf") in e.value.msg
    finally:
        os.close(fd)
    assert listing(tmp_path) == ["m.gguf.lock"]   # ours; the refused fetch created nothing


def test_two_files_in_one_directory_fetch_at_once(served, tmp_path):
    """The lock is per destination file: a slow fetch of a.gguf does not block b.gguf beside it."""
    import threading
    out = {}

    def slow():
        out["a"] = run(served, tmp_path / "a.gguf", url(served, "rate-3000000"))

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.2)
    assert (tmp_path / "a.gguf.lock").exists()     # a is mid-download, holding its own lock
    out["b"] = run(served, tmp_path / "b.gguf")
    t.join(30)
    assert out["a"]["status"] == out["b"]["status"] == "downloaded"
    assert listing(tmp_path) == ["a.gguf", "a.gguf.verified.json", "b.gguf", "b.gguf.verified.json"]


def test_404_fails_at_once(served, tmp_path):
    with pytest.raises(FetchError) as e:
        run(served, tmp_path / "m.gguf", url(served, "404"))
    assert "404" in e.value.msg and e.value.result["attempts"] == 1


def test_transient_500_is_retried(served, tmp_path):
    dest = tmp_path / "m.gguf"
    r = run(served, dest, url(served, "500-once", path="models/payload.gguf?t=%s" % tmp_path.name))
    assert r["attempts"] == 2 and r["status"] == "downloaded"
    assert_verified_on_disk(served, dest)


def test_persistent_500_gives_up_after_retries(served, tmp_path):
    with pytest.raises(FetchError) as e:
        run(served, tmp_path / "m.gguf", url(served, "500"), retries=2)
    assert "giving up after 3 attempts" in e.value.msg


def test_server_size_differs_from_declared_fails_before_writing(served, tmp_path):
    # The DSpark bug: a locally observed size became the declared size.
    dest = tmp_path / "m.gguf"
    with pytest.raises(FetchError) as e:
        run(served, dest, size=SIZE - 96)
    assert ("the server has %d bytes" % SIZE) in e.value.msg and ("declares %d" % (SIZE - 96)) in e.value.msg
    assert listing(tmp_path) == []


# -- check mode -----------------------------------------------------------

def test_check_mode_missing_partial_corrupt_verified(served, tmp_path):
    dest = tmp_path / "m.gguf"
    mark = len(served["server"].requests)

    r = run(served, dest, check_mode=True, progress_log=str(tmp_path / "log"))
    assert r["status"] == "would_download" and r["would_download_bytes"] == SIZE and r["changed"]
    assert listing(tmp_path) == []

    (tmp_path / ("m.gguf" + PART_SUFFIX)).write_bytes(served["data"][:700000])
    r = run(served, dest, check_mode=True)
    assert r["status"] == "would_resume" and r["resumed_from"] == 700000
    assert r["would_download_bytes"] == SIZE - 700000
    assert os.path.getsize(str(dest) + PART_SUFFIX) == 700000
    os.unlink(str(dest) + PART_SUFFIX)

    corrupt = bytearray(served["data"])
    corrupt[SIZE // 3] ^= 0x01
    dest.write_bytes(bytes(corrupt))
    before = listing(tmp_path)
    r = run(served, dest, check_mode=True)
    assert r["status"] == "mismatch" and r["changed"]
    assert "sha256 mismatch" in r["mismatch"]["reason"]
    assert r["bytes_hashed"] == SIZE and r["would_download_bytes"] == SIZE
    assert listing(tmp_path) == before and dest.read_bytes() == bytes(corrupt)  # not moved, not stamped

    dest.write_bytes(served["data"])
    r = run(served, dest, check_mode=True)
    assert r["status"] == "verified" and not r["changed"]
    assert not os.path.exists(str(dest) + STAMP_SUFFIX)  # check mode writes no stamp either
    assert requests_since(served, mark) == []  # check mode never touches the network


# -- present but wrong: trash, then re-fetch ------------------------------

def test_corrupt_present_file_is_moved_to_trash_then_refetched(served, tmp_path):
    dest = tmp_path / "m.gguf"
    trash = tmp_path / "trash"
    corrupt = bytearray(served["data"])
    corrupt[12345] ^= 0x55
    dest.write_bytes(bytes(corrupt))
    r = run(served, dest, trash_dir=str(trash))
    assert r["status"] == "downloaded" and r["changed"]
    assert_verified_on_disk(served, dest)
    (entry,) = r["trashed"]
    assert open(entry["path"], "rb").read() == bytes(corrupt)  # moved, never deleted
    manifest = open(entry["manifest"]).read()
    assert "expected size %d sha256 %s" % (SIZE, served["sha256"]) in manifest
    assert "found    size %d sha256 %s" % (SIZE, hashlib.sha256(bytes(corrupt)).hexdigest()) in manifest


def test_short_present_file_is_a_size_mismatch_without_hashing(served, tmp_path):
    dest = tmp_path / "m.gguf"
    dest.write_bytes(served["data"][:SIZE - 96])
    r = run(served, dest, check_mode=True)
    assert r["status"] == "mismatch" and r["bytes_hashed"] == 0
    assert r["mismatch"]["reason"] == "size mismatch: expected %d bytes, found %d" % (SIZE, SIZE - 96)


# -- the DSpark incident: the declared size is the wrong one --------------------------------------

@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("declared", [SIZE - 96, SIZE - 96_091_839 // 1000, SIZE + 1, 1])
def test_a_wrong_declared_size_is_refused_when_the_file_matches_the_server(served, tmp_path, declared, check_mode):
    """000_: the DSpark file's size was recorded at fetch time, 96 MB short of the Hub's, and became the declared
    one, so a byte-correct file failed. A file on disk of exactly the server's size against another declared size
    is refused naming both numbers and the fix - before anything moves (the file stays, nothing in the trash)."""
    dest = tmp_path / "m.gguf"
    dest.write_bytes(served["data"])
    before = listing(tmp_path)
    with pytest.raises(FetchError) as e:
        run(served, dest, size=declared, trash_dir=str(tmp_path / "trash"), check_mode=check_mode)
    msg = e.value.msg
    assert "declares %d bytes" % declared in msg and "server reports %d" % SIZE in msg
    assert "Fix the manifest's size to %d" % SIZE in msg and "Nothing was moved" in msg
    assert listing(tmp_path) == before and dest.read_bytes() == served["data"]


def test_a_short_file_against_the_servers_size_is_still_trashed_and_refetched(served, tmp_path):
    """The refusal is for a declared size that disagrees with the server: a truncated file (disk != server,
    declared == server) goes to the trash and is fetched again, as before."""
    dest = tmp_path / "m.gguf"
    dest.write_bytes(served["data"][:SIZE - 96])
    r = run(served, dest, trash_dir=str(tmp_path / "trash"))
    assert r["status"] == "downloaded" and len(r["trashed"]) == 1
    assert_verified_on_disk(served, dest)


# -- disk preflight on a real small filesystem -----------------------------

@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    rc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                        capture_output=True, text=True)
    if rc.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root): %s" % rc.stderr.strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_disk_preflight_fails_before_downloading_naming_numbers(served, small_fs):
    dest = small_fs / "m.gguf"
    mark = len(served["server"].requests)
    with pytest.raises(FetchError) as e:
        run(served, dest, disk_margin_bytes=1 << 20)  # 1.5 MB + 1 MiB > 2 MiB tmpfs
    msg = e.value.msg
    assert "not enough free disk" in msg and "Nothing was downloaded" in msg
    free = os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize
    assert str(free) in msg and str(SIZE + (1 << 20)) in msg
    assert requests_since(served, mark) == [] and listing(small_fs) == []
    with pytest.raises(FetchError):  # check mode reports the same shortfall
        run(served, dest, disk_margin_bytes=1 << 20, check_mode=True)
    r = run(served, dest, disk_margin_bytes=0)
    assert r["status"] == "downloaded"
    assert_verified_on_disk(served, dest)


# -- bad input -------------------------------------------------------------

@pytest.mark.parametrize("kw,needle", [
    ({"size": 0}, "size must be > 0"),
    ({"size": "12a"}, "size must be an integer"),
    ({"sha256": "abc"}, "64 hex digits"),
    ({"verify": "quick"}, "verify must be"),
    ({"u": "ftp://127.0.0.1/x"}, "http:// or https://"),
])
def test_bad_input_fails_before_anything(served, tmp_path, kw, needle):
    mark = len(served["server"].requests)
    with pytest.raises(FetchError) as e:
        run(served, tmp_path / "m.gguf", **kw)
    assert needle in e.value.msg
    assert requests_since(served, mark) == [] and listing(tmp_path) == []


def test_missing_dest_directory_is_named(served, tmp_path):
    with pytest.raises(FetchError) as e:
        run(served, tmp_path / "nope" / "m.gguf")
    assert "does not exist" in e.value.msg and str(tmp_path / "nope") in e.value.msg


# -- through Ansible itself --------------------------------------------------

def _ansible(args, check=False):
    env = dict(os.environ,
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"),
               ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    exe = os.path.join(os.path.dirname(sys.executable), "ansible")
    if not os.path.exists(exe):
        exe = shutil.which("ansible")
    # The test's own interpreter: discovery on a pyenv host can pick a shim that is not installed.
    cmd = [exe, "localhost", "-i", "localhost,", "-c", "local", "-o",
           "-e", "ansible_python_interpreter=%s" % sys.executable,
           "-m", "dankfleet.llm.gguf_fetch", "-a", json.dumps(args)]
    if check:
        cmd.append("--check")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    out = p.stdout.strip()
    assert "=>" in out, p.stdout + p.stderr
    head, _, body = out.partition("=>")
    return head.strip(), json.loads(body), p.stdout + p.stderr


def test_through_ansible_module(served_token, served, tmp_path):
    dest = tmp_path / "m.gguf"
    args = {"url": served_token["base"] + "/models/payload.gguf", "dest": str(dest), "size": SIZE,
            "sha256": served["sha256"], "token": TOKEN, "mode": "0640", "retry_delay": 0.05,
            "disk_margin_bytes": 0}
    head, r, raw = _ansible(args, check=True)
    assert "CHANGED" in head and r["status"] == "would_download" and not dest.exists()
    head, r, raw = _ansible(args)
    assert "CHANGED" in head and r["status"] == "downloaded", raw
    assert r["bytes_downloaded"] == SIZE and r["bytes_hashed"] == SIZE
    assert TOKEN not in raw  # no_log
    assert oct(os.stat(dest).st_mode & 0o777) == "0o640"
    assert_verified_on_disk(served, dest)
    head, r, raw = _ansible(args)
    assert "SUCCESS" in head and not r["changed"], raw
    assert r["status"] == "verified" and r["bytes_hashed"] == 0
