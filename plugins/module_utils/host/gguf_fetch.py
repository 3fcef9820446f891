# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Resumable, byte-verified download of one large file (a GGUF payload).

Plain Python (stdlib only) so tests and benchmarks import it directly; the
module plugins/modules/gguf_fetch.py is a thin AnsibleModule wrapper.

The contract, in the order fetch() applies it:

* The declared size and sha256 come from the caller (the inventory), never
  from the file on disk.
* A present <dest> is verified: by its stamp (<dest>.verified.json: size,
  mtime_ns, ctime_ns, inode, sha256, written only after a full hash matched) when
  verify='stamp', by a full re-hash otherwise. ctime is what makes the stamp
  a guarantee: the file's owner can rewrite bytes in place and set mtime back,
  but only the kernel sets ctime. A stamp without it (an older one), or of
  any other shape, vouches for nothing: the file is hashed once. A mismatch is moved into the
  trash directory, never deleted: a directory of its own per move with
  trash_files' MANIFEST (expected vs found in its comments), so
  dankfleet.llm.trash_files state=restored puts it back byte-identical.
* The payload is downloaded into <dest>.part, resumed with Range from the
  .part's length. sha256 is computed while the bytes arrive (one pass: an
  existing .part prefix is hashed once, then the stream continues).
* A 200 answer to a Range request restarts the .part from zero; 416 on a
  complete .part goes straight to verification; connection loss, stalls
  (timeout) and 5xx are retried with exponential backoff.
* A fetch always ends: an attempt receiving fewer than MIN_PROGRESS_BYTES in
  any `timeout` seconds is cut off and retried (a dribbling server), and
  progress is new bytes beyond the furthest byte any
  earlier attempt reached (at least MIN_PROGRESS_BYTES of them, or the rest
  of the file), so a server that restarts every range from byte 0 or lies
  about lengths uses up the retry budget; the attempts of one run are capped
  at (retries + 1) * ATTEMPTS_PER_TRY whatever happens.
* Every redirect is checked against the policy the url passed (http or
  https, a host, no https -> http downgrade) before it is followed.
* dest must be absolute; one lock per destination file (<dest>.lock, flock),
  so two different files in one directory download at once.
* <dest> appears only by an atomic rename of a .part whose size and sha256
  both match. A complete .part that does not match goes to the trash.
* Before any byte is downloaded, the destination filesystem must have the
  bytes still to download plus a margin free, or it fails naming the numbers.
* Check mode (check_mode=True) reads but never writes: it reports
  verified / would_download / would_resume / mismatch.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import datetime
import errno
import fcntl
import hashlib
import http.client
import json
import os
import queue
import re
import socket
import stat
import threading
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base.http_client import (
    Client, DeadlineExceeded, HttpError, PolicyRefused, check_secret, redact, redirect_problem, url_problem)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import (
    FileRefused, check_name, file_kind, open_dir, open_parent, open_regular)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.sha256 import hash_file
from ansible_collections.dankfleet.llm.plugins.module_utils.host.trash_files import TrashError, retire
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr

STAMP_SUFFIX = ".verified.json"
PART_SUFFIX = ".part"
STAMP_VERSION = 1
# 256 KiB: the buffer a recv fills is still in cache when write() and sha256 read
# it; measured on the 2-core CI box, 4 MiB buffers cost ~2x the system time.
DEFAULT_CHUNK = 256 * 1024
# Statuses a retry may cure; anything else (401, 403, 404, ...) fails at once.
RETRYABLE_HTTP = frozenset((408, 425, 429, 500, 502, 503, 504))
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_CONTENT_LENGTH_RE = re.compile(r"^\s*(\d{1,20})\s*$")
LOCK_SUFFIX = ".lock"
# An attempt counts as progress only with this many new bytes past the furthest byte reached before
# (or the rest of the file): a server dribbling a byte per attempt cannot keep the loop alive.
MIN_PROGRESS_BYTES = 16 * 1024
# Hard cap on the attempts of one run: (retries + 1) times this, progress or not.
ATTEMPTS_PER_TRY = 20
_CONTENT_RANGE_RE = re.compile(r"^\s*bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)\s*$")


class FetchError(Exception):
    """A failure with a message naming the cause and the fix.

    result carries what was measured up to the failure (bytes, trash notes).
    """

    def __init__(self, msg, result=None):
        super(FetchError, self).__init__(msg)
        self.msg = msg
        self.result = result or {}


class _Retryable(Exception):
    """An attempt failed in a way a later attempt may cure."""


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def redact_url(url):
    """scheme://host/path only: signed query strings and userinfo stay out of logs."""
    return redact(url)


def validate_declared(size, sha256):
    """Return (size, sha256) normalised, or raise FetchError naming the bad value."""
    if isinstance(size, bool) or not isinstance(size, int):
        try:
            size = int(str(size).strip())
        except ValueError:
            raise FetchError("size must be an integer byte count from the inventory manifest, got %r" % (size,))
    if size <= 0:
        raise FetchError("size must be > 0 (the declared byte count from the manifest), got %d" % size)
    sha = str(sha256 or "").strip().lower()
    if sha.startswith("sha256:"):
        sha = sha[len("sha256:"):]
    if not _SHA256_RE.match(sha):
        raise FetchError("sha256 must be 64 hex digits (the Hub's LFS oid), got %r" % (sha256,))
    return size, sha


def disk_free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def human(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.2f %s" % (n, unit))
        n /= 1024.0
    return str(n)


class _NotRegular(Exception):
    pass


# What a stamp must hold to vouch for a file; any other shape (an older stamp without ctime_ns, a forged or
# garbled one) is no stamp at all, and the file is hashed once.
STAMP_SHAPE = tr.Obj({
    "version": tr.Int(1, 1 << 16),
    "file": tr.Str(4096, name=True),
    "size": tr.Int(1, tr.INT_LIMIT),
    "mtime_ns": tr.Int(-tr.INT_LIMIT, tr.INT_LIMIT),
    "ctime_ns": tr.Int(-tr.INT_LIMIT, tr.INT_LIMIT),
    "inode": tr.Int(0, tr.INT_LIMIT),
    "sha256": tr.Str(64, name=True, pattern="[0-9a-f]{64}", what="64 lowercase hex digits"),
    "verified_at": tr.Str(64, name=True),
    "source": tr.Str(8192, name=True),
}, required=("size", "mtime_ns", "ctime_ns", "inode", "sha256"))


def read_stamp(dest):
    """The stamp beside dest read through STAMP_SHAPE, or None (absent, a link, not a regular file, not this
    user's own or writable by others, not UTF-8 JSON, or not of the stamp's shape: it vouches for nothing)."""
    try:
        with open_regular(dest + STAMP_SUFFIX, _NotRegular, "stamp", max_bytes=1 << 16, follow=False) as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o022:
                return None  # only a stamp this user wrote vouches: the file's owner may own the directory too
            return tr.load_json(f.read(), "stamp %s" % (dest + STAMP_SUFFIX), STAMP_SHAPE)
    except (OSError, ValueError, _NotRegular):
        return None


def stamp_matches(stamp, st, size, sha256):
    """True when the stamp vouches for this exact file -- same inode, size, mtime and ctime (which only the
    kernel sets: a rewrite in place with mtime set back still moves it) -- and the declared hash."""
    try:
        stamp = tr.read(STAMP_SHAPE, stamp, "stamp")
    except tr.ShapeError:
        return False
    return (stamp["size"] == st.st_size == size
            and stamp["mtime_ns"] == st.st_mtime_ns
            and stamp["ctime_ns"] == st.st_ctime_ns
            and stamp["inode"] == st.st_ino
            and stamp["sha256"] == sha256)


def write_stamp(dest, sha256, url, directory=None, st=None):
    """Write <dest>.verified.json by a new file and a rename in dest's directory (never through a link). st: the
    status of the file as it was hashed (taken before the hash, so a change while it was read moves ctime past
    it); without it, dest's status now."""
    d = directory or open_parent(dest, "stamp", reserve=len(STAMP_SUFFIX))[0]
    name = os.path.basename(dest)
    if st is None:
        st = os.stat(name, dir_fd=d.fd, follow_symlinks=False)
    stamp = {
        "version": STAMP_VERSION,
        "file": os.path.basename(dest),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "inode": st.st_ino,
        "sha256": sha256,
        "verified_at": utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": redact_url(url),
    }
    try:
        d.write_atomic(name + STAMP_SUFFIX, (json.dumps(stamp, indent=1, sort_keys=True) + "\n").encode("utf-8"))
    finally:
        if directory is None:
            d.close()
    return stamp


class ProgressLog:
    """Appends human-readable progress lines to a file the operator can `tail -f`."""

    def __init__(self, path, label, interval):
        self.path = path
        self.label = label
        self.interval = interval
        self._next = 0.0
        self._fh = None
        if path:
            # O_APPEND|O_NOFOLLOW, a regular file with one link: never a FIFO (blocks) or a link (root writes elsewhere)
            try:
                d, name = open_parent(os.path.abspath(path), "progress log", create_mode=0o755)
                with d:
                    fd = d.open_existing_or_new(name, "progress log", append=True)
            except FileRefused as e:
                raise FetchError("progress_log %s. Nothing was downloaded" % e)
            self._fh = os.fdopen(fd, "a", buffering=1)

    def line(self, text):
        if self._fh:
            self._fh.write("%s %s %s\n" % (utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"), self.label, text))

    def progress(self, done, total, rate, force=False):
        if not self._fh:
            return
        now = time.monotonic()
        if not force and now < self._next:
            return
        self._next = now + self.interval
        eta = "?"
        if rate > 0 and total >= done:
            eta = "%ds" % int((total - done) / rate)
        self.line("progress %d/%d bytes (%.1f%%) %s/s eta %s"
                  % (done, total, 100.0 * done / total if total else 100.0, human(rate), eta))

    def close(self):
        if self._fh:
            self._fh.close()
            self._fh = None


class _PipelinedHasher:
    """sha256 on a worker thread so hashing overlaps network reads and disk writes.

    hashlib releases the GIL for large buffers, so on a multi-core host the
    download runs at about max(recv + write, sha256) instead of their sum.
    Buffers come from a fixed pool; the writer gets one, fills it, writes it
    and hands it here; the worker hashes it and returns it to the pool.
    """

    def __init__(self, chunk, depth=16, hasher=None):
        self.chunk = chunk
        self._h = hasher or hashlib.sha256()
        self._pool = queue.Queue()
        self._work = queue.Queue()
        self._buffers = [bytearray(chunk) for _ in range(depth)]
        for b in self._buffers:
            self._pool.put(b)
        self._error = None
        self._t = threading.Thread(target=self._run, name="gguf-fetch-sha256", daemon=True)
        self._t.start()

    def _run(self):
        while True:
            item = self._work.get()
            if item is None:
                self._work.task_done()
                return
            buf, n = item
            try:
                if self._error is None:
                    self._h.update(memoryview(buf)[:n])
            except Exception as e:  # pragma: no cover - hashlib does not fail on bytes
                self._error = e
            finally:
                self._pool.put(buf)
                self._work.task_done()

    def get_buffer(self):
        return self._pool.get()

    def put(self, buf, n):
        if n:
            self._work.put((buf, n))
        else:
            self._pool.put(buf)

    def give_back(self, buf):
        self._pool.put(buf)

    def sync(self):
        self._work.join()
        if self._error is not None:
            raise self._error

    def reset(self):
        self.sync()
        self._h = hashlib.sha256()

    def hexdigest(self):
        self.sync()
        return self._h.hexdigest()

    def close(self):
        self._work.put(None)
        self._t.join(timeout=10)


def url_policy_problem(url, previous=None):
    """Why url may not be fetched (None when it may): the one HTTP client's policy (http or https, a host,
    no credentials in it, no https -> http downgrade; module_utils/base/http_client.py)."""
    problem = url_problem(url)
    if problem is None and previous is not None:
        problem = redirect_problem(None, None, previous, url)
    return problem


def redact_url_safe(url):
    return redact(url)


def _client(token, validate_certs):
    """The fetch's HTTP client: proxies from the environment (http_proxy, https_proxy, no_proxy), the bearer
    token only while the request stays on the url's origin (the Hub redirects to a signed CDN URL)."""
    return Client(token, "token", proxies=True, verify_tls=validate_certs, user_agent="dankfleet.llm.gguf_fetch")


def parse_content_length(value, url):
    """Content-Length as an int, None when absent; a malformed one is a FetchError naming it."""
    if value is None:
        return None
    m = _CONTENT_LENGTH_RE.match(value)
    if not m:
        raise FetchError("the server sent a malformed Content-Length %r for %s (expected a byte count): a broken or "
                         "lying server; fix the mirror or use another url" % (value[:80], redact_url_safe(url)))
    return int(m.group(1))


def _parse_content_range(value):
    """'bytes a-b/n' -> (a, b, n); 'bytes */n' -> (None, None, n); n may be None."""
    m = _CONTENT_RANGE_RE.match(value or "")
    if not m:
        return None
    a, b, n = m.group(1), m.group(2), m.group(3)
    return (None if a is None else int(a), None if b is None else int(b),
            None if n == "*" else int(n))


def _read_some(resp, view):
    """Read at most len(view) bytes with at most one recv; 0 at the end of the body.

    A body of known length is read straight into view (BufferedReader.readinto1, the length kept the way
    HTTPResponse keeps it); a chunked one through read1 and a copy.
    """
    fp = getattr(resp, "fp", None)
    if not getattr(resp, "chunked", True) and getattr(resp, "length", None) is not None and hasattr(fp, "readinto1"):
        if not resp.length:
            return 0
        k = fp.readinto1(view[:resp.length])
        resp.length -= k
        return k
    data = resp.read1(len(view))
    view[:len(data)] = data
    return len(data)


class Fetcher:
    """One fetch of one file. fetch() below is the convenient entry point."""

    def __init__(self, url, dest, size, sha256, token=None, verify="stamp", retries=5,
                 timeout=30.0, retry_delay=2.0, retry_delay_max=60.0, trash_dir=None,
                 progress_log=None, progress_interval=10.0, disk_margin_bytes=1 << 30,
                 validate_certs=True, fsync=True, chunk_size=DEFAULT_CHUNK,
                 check_mode=False, disk_free=None, user_agent="dankfleet.llm.gguf_fetch", attributes=None):
        self.url = url
        self.dest = os.path.normpath(dest) if dest else dest
        self.size, self.sha256 = validate_declared(size, sha256)
        self.token = token or None
        self.verify = verify
        self.retries = int(retries)
        self.timeout = float(timeout)
        self.retry_delay = float(retry_delay)
        self.retry_delay_max = float(retry_delay_max)
        self.trash_dir = trash_dir
        self.progress_log = progress_log
        self.progress_interval = float(progress_interval)
        self.disk_margin_bytes = int(disk_margin_bytes)
        self.validate_certs = validate_certs
        self.fsync = fsync
        self.chunk_size = int(chunk_size)
        self.check_mode = check_mode
        self.disk_free = disk_free or disk_free_bytes
        self.user_agent = user_agent
        self.attributes = attributes  # callable(dest) -> changed: the module's owner/mode, applied before a stamp
        self.part = self.dest + PART_SUFFIX if dest else None
        self.lock = self.dest + LOCK_SUFFIX if dest else None
        self.result = {
            "changed": False,
            "status": None,
            "path": self.dest,
            "declared_size": self.size,
            "declared_sha256": self.sha256,
            "bytes_downloaded": 0,
            "bytes_hashed": 0,
            "resumed_from": 0,
            "rate_bytes_per_s": 0,
            "elapsed_s": 0.0,
            "attempts": 0,
            "resumes": 0,
            "restarts": 0,
            "would_download_bytes": 0,
            "trashed": [],
            "stamp": None,
            "progress_log": progress_log,
        }
        self._log = None
        self._dir = None
        self._transfer_s = 0.0

    # -- validation ------------------------------------------------------
    def check_inputs(self):
        """Refuse bad input before anything on the host changes (dest's directory may still be missing)."""
        self._validate(parent=False)

    def _validate(self, parent=True):
        if self.verify not in ("stamp", "full"):
            raise FetchError("verify must be 'stamp' or 'full', got %r" % (self.verify,))
        if not self.url:
            raise FetchError("url is required")
        problem = url_policy_problem(self.url)
        if problem:
            raise FetchError("url must be http:// or https:// with a host and no credentials: %s. Nothing was "
                             "downloaded" % problem)
        try:
            check_secret(self.token, "token")
        except HttpError as e:
            raise FetchError("%s. Nothing was downloaded" % e)
        if not self.dest or self.dest.endswith(os.sep):
            raise FetchError("dest must be a file path, got %r" % (self.dest,))
        if not os.path.isabs(self.dest):
            raise FetchError("dest must be an absolute path, got %r (relative to what? give /<dir>/<file>.gguf). "
                             "Nothing was downloaded" % (self.dest,))
        if self.retries < 0:
            raise FetchError("retries must be >= 0, got %d" % self.retries)
        if self.timeout <= 0:
            raise FetchError("timeout must be > 0 seconds, got %s" % self.timeout)
        if self.disk_margin_bytes < 0:
            raise FetchError("disk_margin_bytes must be >= 0, got %d" % self.disk_margin_bytes)
        for what, path in (("trash_dir", self.trash_dir), ("progress_log", self.progress_log)):
            if path and not os.path.isabs(path):
                raise FetchError("%s must be an absolute path, got %r. Nothing was downloaded" % (what, path))
        try:  # the stamp's name is the longest beside dest: a name it does not fit is refused before anything changes
            check_name(os.path.basename(self.dest), "dest file name", reserve=len(STAMP_SUFFIX))
        except FileRefused as e:
            raise FetchError("dest %s. Nothing was downloaded" % e)
        if os.path.isdir(self.dest) and not os.path.islink(self.dest):
            raise FetchError("dest %s is a directory; give the file path (<dir>/<file>.gguf)" % self.dest)
        for path in (self.dest, self.part, self.lock, self.dest + STAMP_SUFFIX):
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                raise FetchError("%s exists and is %s, not a regular file: gguf_fetch neither reads, follows nor "
                                 "moves it; move it aside or point dest elsewhere. Nothing was changed"
                                 % (path, file_kind(st.st_mode)))
        for what, path, want_dir in (("trash_dir", self.trash_dir, True), ("progress_log", self.progress_log, False)):
            try:
                st = os.lstat(path) if path else None
            except OSError:
                continue
            if st is not None and not (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)):
                raise FetchError("%s %s is %s, not %s: move it aside or point %s elsewhere. Nothing was changed"
                                 % (what, path, file_kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else "a file",
                                    "a directory" if want_dir else "a regular file", what))
        if parent and not os.path.isdir(os.path.dirname(self.dest)) and not self.check_mode:
            raise FetchError("the directory of dest does not exist: %s (create it first: the directories option, or "
                             "ansible.builtin.file)" % os.path.dirname(self.dest))

    # -- trash -----------------------------------------------------------
    def _trash(self, path, reason, found_size, found_sha256):
        """Move path (and dest's stamp with dest) into a trash directory of its own, trash_files' way.

        ``<trash>/<UTC time>-<name>/`` holds the file at its absolute path below it and a MANIFEST
        (owner, group, mode, sha256) whose comments say what was expected and found; restore with
        dankfleet.llm.trash_files (state=restored, trash_dir=that directory). Never deleted.
        """
        trash = self.trash_dir or os.path.join(os.path.dirname(self.dest), ".trash")
        if not os.path.isdir(trash):
            os.makedirs(trash, 0o700)
        stamp = utcnow().strftime("%Y%m%dT%H%M%S.%fZ")
        event = os.path.join(trash, "%s-%s" % (stamp, os.path.basename(path)))
        paths = [path]
        if path == self.dest and os.path.exists(self.dest + STAMP_SUFFIX):
            paths.append(self.dest + STAMP_SUFFIX)
        comments = [
            "gguf_fetch moved this file here instead of deleting it: %s" % reason,
            "expected size %d sha256 %s" % (self.size, self.sha256),
            "found    size %s sha256 %s" % (found_size, found_sha256 or "(not hashed)"),
            "source %s at %s" % (redact_url(self.url), utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")),
            "restore: dankfleet.llm.trash_files with trash_dir=%s state=restored" % event,
        ]
        try:
            moved = retire(event, paths, comments=[re.sub(r"[\t\r\n]", " ", c) for c in comments],
                           known_sha256={path: found_sha256} if found_sha256 else None)
        except (TrashError, OSError) as e:
            raise FetchError("could not move %s to the trash %s: %s. Nothing was deleted; move it aside by hand "
                             "and re-run" % (path, event, e))
        if not moved["moves"]:
            raise FetchError("%s vanished before it could be moved to the trash %s (another process removed or moved "
                             "it): re-run" % (path, event))
        target = moved["moves"][0]["dest"]
        entry = {"path": target, "note": moved["manifest"], "manifest": moved["manifest"],
                 "trash_dir": moved["trash_dir"], "reason": reason, "from": path}
        self.result["trashed"].append(entry)
        if self._log:
            self._log.line("trashed %s -> %s (%s; MANIFEST %s)" % (path, target, reason, moved["manifest"]))
        return entry

    # -- present file ----------------------------------------------------
    def _check_present(self):
        """Return 'verified', 'absent' or a mismatch dict for the current dest."""
        try:
            st = os.lstat(self.dest)
        except FileNotFoundError:
            return "absent"
        if st.st_size != self.size:
            return {"reason": "size mismatch: expected %d bytes, found %d" % (self.size, st.st_size),
                    "found_size": st.st_size, "found_sha256": None}
        if self.verify == "stamp":
            stamp = read_stamp(self.dest)
            if stamp_matches(stamp, st, self.size, self.sha256):
                self.result["stamp"] = stamp
                self.result["verified_by"] = "stamp"
                return "verified"
        with self._open_ro(os.path.basename(self.dest), "dest") as f:
            st = os.fstat(f.fileno())
            h, n = hash_file(self.dest, fd=f.fileno())
            self.result["bytes_hashed"] += n
            found = h.hexdigest()
            self._refuse_a_change_while_hashed(st, os.fstat(f.fileno()))
            if found != self.sha256:
                return {"reason": "sha256 mismatch: expected %s, found %s" % (self.sha256, found),
                        "found_size": st.st_size, "found_sha256": found}
            self.result["verified_by"] = "sha256"
            if self.check_mode:
                self.result["stamp"] = read_stamp(self.dest)
                return "verified"
            if self._apply_attributes():
                st = self._refuse_a_change_while_hashed(st, os.fstat(f.fileno()), attributes_applied=True)
            self.result["stamp"] = write_stamp(self.dest, self.sha256, self.url, self._dir, st=st)
        return "verified"

    def _refuse_a_change_while_hashed(self, before, after, attributes_applied=False):
        """after, when the file is still the one hashed: same size and mtime, and the same ctime unless this run
        just set its owner or mode (which moves ctime and nothing else). Anything else is a writer at work while
        the bytes were read: no stamp may vouch for them."""
        moved = (after.st_size, after.st_mtime_ns, after.st_ino) != (before.st_size, before.st_mtime_ns, before.st_ino)
        if moved or (after.st_ctime_ns != before.st_ctime_ns and not attributes_applied):
            raise FetchError("%s changed while it was hashed (its size, mtime or ctime moved): another process writes "
                             "it. Nothing was stamped; stop the writer and re-run" % self.dest)
        return after

    def _apply_attributes(self):
        """The caller's owner/mode for dest, applied before the stamp is written (a chown moves ctime: a stamp
        written before it would never match again). True when something changed."""
        if self.attributes is None:
            return False
        changed = bool(self.attributes(self.dest))
        self.result["changed"] = self.result["changed"] or changed
        return changed

    def _refuse_a_wrong_declared_size(self, present):
        """The runbook's DSpark incident: a size recorded from a local file became the declared one, 96 MB short
        of the Hub's, and the byte-correct file failed verification. When the file on disk has the size the
        server reports and the manifest declares another, the manifest is wrong: refuse before anything moves."""
        if present.get("found_size") in (None, self.size):
            return
        server = self._server_size()
        self.result["server_size"] = server
        if server is None or server != present["found_size"]:
            return
        raise FetchError(
            "the manifest declares %d bytes for %s but the server reports %d, and the file on disk is %d bytes - "
            "the server's size: the declared size is wrong (a size recorded from a local file, not the Hub's; "
            "%+d bytes). Fix the manifest's size to %d (the Hub's), keep its sha256 the Hub's LFS oid, and run "
            "again; the file is then verified by its sha256. Nothing was moved or downloaded"
            % (self.size, self.dest, server, present["found_size"], self.size - server, server))

    def _server_size(self):
        """The size the server reports for the url (a GET whose body is not read), or None when it cannot say."""
        try:
            resp = self._request(_client(self.token, self.validate_certs), 0)
        except (FetchError, _Retryable):
            return None
        try:
            return parse_content_length(resp.headers.get("Content-Length"), self.url) if resp.status == 200 else None
        except FetchError:
            return None
        finally:
            resp.close()

    # -- HTTP ------------------------------------------------------------
    def _request(self, client, offset):
        """The answer's status line and headers within `timeout` s (connect, redirects and headers together);
        the body is then policed by _stream (idle timeout and the low-speed limit)."""
        headers = {"Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        try:
            resp = client.open("GET", self.url, headers=headers, timeout=self.timeout, idle_timeout=self.timeout)
        except PolicyRefused as e:
            raise FetchError("%s. Nothing was downloaded from there; fix the url or the mirror" % e)
        except DeadlineExceeded as e:
            raise _Retryable("no answer from %s within %ss: %s" % (redact_url(self.url), self.timeout, e))
        except (HttpError, OSError, http.client.HTTPException) as e:
            raise _Retryable("cannot connect to %s: %s" % (redact_url(self.url), client.scrub(e)))
        resp.release_deadline()
        return resp

    def _open_ro(self, name, what):
        """A file object for name in dest's directory: a regular file, never through a link."""
        if self._dir is None:
            return open_regular(os.path.join(os.path.dirname(self.dest), name), what=what, follow=False)
        return self._dir.open_read(name, what)

    def _open_part(self):
        """fd of <dest>.part, created when absent: O_NOFOLLOW, a regular file with one link, never truncated here."""
        try:
            return self._dir.open_existing_or_new(os.path.basename(self.part), "partial download", readable=True)
        except FileRefused as e:
            raise FetchError("%s. gguf_fetch neither follows nor overwrites it; move it aside and re-run" % e)

    def _attempt(self, client, hasher, state):
        """One HTTP exchange. Returns 'complete' or raises _Retryable / FetchError."""
        offset = state["offset"]
        resp = self._request(client, offset)
        try:
            code = resp.status
            headers = resp.headers
            if 300 <= code < 400:
                raise FetchError("HTTP %d from %s: redirect not followed (no Location header); fix the url or the "
                                 "mirror" % (code, redact_url(resp.url)))
            if code == 416:
                cr = _parse_content_range(headers.get("Content-Range"))
                total = cr[2] if cr else None
                if total is not None and total != self.size:
                    raise FetchError("the server has %d bytes at %s but the manifest declares %d: fix the manifest "
                                     "(size from the Hub, not from a local file) or the URL"
                                     % (total, redact_url(self.url), self.size))
                if offset == self.size:
                    self._log.line("416 on a complete .part (%d bytes): verifying" % offset)
                    return "complete"
                raise FetchError("the server answered 416 (range not satisfiable) for bytes=%d- of %s; "
                                 "total %s, declared %d" % (offset, redact_url(self.url), total, self.size))
            if code in (401, 403):
                raise FetchError("HTTP %d from %s: %s; a gated repo needs a valid bearer token: set gguf_fetch_token "
                                 "(vaulted) in the inventory - the module's token option"
                                 % (code, redact_url(self.url), "no or wrong bearer token" if code == 401 else "forbidden"))
            if code == 404:
                raise FetchError("HTTP 404 from %s: check url, repo, revision and file in the manifest"
                                 % redact_url(self.url))
            if code in RETRYABLE_HTTP:
                raise _Retryable("HTTP %d from %s" % (code, redact_url(self.url)))
            if code not in (200, 206):
                raise FetchError("unexpected HTTP %d from %s" % (code, redact_url(self.url)))

            if code == 206:
                cr = _parse_content_range(headers.get("Content-Range"))
                if not cr or cr[0] is None:
                    raise _Retryable("206 without a usable Content-Range (%r)" % headers.get("Content-Range"))
                start, end, total = cr
                if end < start:
                    raise FetchError("the server sent Content-Range %r for %s: the range ends before it starts"
                                     % (headers.get("Content-Range"), redact_url(self.url)))
                length = parse_content_length(headers.get("Content-Length"), self.url)
                if length is not None and length != end - start + 1:
                    raise _Retryable("206 whose Content-Length %d disagrees with its Content-Range %r"
                                     % (length, headers.get("Content-Range")))
                if total is not None and total != self.size:
                    raise FetchError("the server has %d bytes at %s but the manifest declares %d: fix the manifest "
                                     "(size from the Hub, not from a local file) or the URL"
                                     % (total, redact_url(self.url), self.size))
                if start != offset:
                    # Not what we asked for: start over rather than splice bytes at the wrong place.
                    self._restart(hasher, state, "206 for bytes %d- when bytes=%d- was asked" % (start, offset))
                    raise _Retryable("server sent a range starting at %d instead of %d" % (start, offset))
                expect = end - start + 1
            else:
                length = parse_content_length(headers.get("Content-Length"), self.url)
                if length is not None and length != self.size:
                    raise FetchError("the server has %s bytes at %s but the manifest declares %d: fix the manifest "
                                     "(size from the Hub, not from a local file) or the URL"
                                     % (length, redact_url(self.url), self.size))
                if offset:
                    self._restart(hasher, state, "server ignored Range (200 instead of 206 for bytes=%d-)" % offset)
                    offset = 0
                expect = self.size

            if offset + expect > self.size:
                raise FetchError("the server offers bytes up to %d of %s, beyond the declared size %d"
                                 % (offset + expect, redact_url(self.url), self.size))
            self._stream(resp.raw, hasher, state, expect)
            if state["offset"] < self.size:
                raise _Retryable("the server ended the body at byte %d of %d" % (state["offset"], self.size))
            return "complete"
        finally:
            try:
                resp.close()
            except Exception:
                pass

    def _restart(self, hasher, state, why):
        self._log.line("restart from byte 0: %s" % why)
        self.result["restarts"] += 1
        hasher.reset()
        os.ftruncate(state["fd"], 0)
        os.lseek(state["fd"], 0, os.SEEK_SET)
        state["offset"] = 0
        state["resumed_from"] = 0

    def _stream(self, resp, hasher, state, expect):
        fd = state["fd"]
        got_total = 0
        t0 = time.monotonic()
        # Low-speed limit (curl's --speed-limit/--speed-time): a server dribbling a byte just inside the
        # timeout would otherwise hold one attempt for size x timeout seconds.
        window_t, window_bytes = t0, 0
        try:
            while got_total < expect:
                buf = hasher.get_buffer()
                mv = memoryview(buf)
                want = min(len(buf), expect - got_total)
                n = 0
                failure = None      # why this attempt ends; the bytes already in buf are written first
                try:
                    # read1: at most one recv per call, so the clock is checked while a slow buffer fills
                    # (readinto would block until the whole buffer arrived, however slowly)
                    while n < want:
                        k = _read_some(resp, mv[n:want])
                        if not k:
                            break
                        n += k
                        window_bytes += k
                        now = time.monotonic()
                        if now - window_t >= self.timeout:
                            if window_bytes < MIN_PROGRESS_BYTES:
                                failure = "slower than %d bytes in %ss (%d bytes) at byte %%d" % (
                                    MIN_PROGRESS_BYTES, self.timeout, window_bytes)
                                break
                            window_t, window_bytes = now, 0
                except (socket.timeout, TimeoutError):
                    failure = "no data for %ss (stalled) at byte %%d" % self.timeout
                except (ConnectionError, http.client.HTTPException, HttpError, OSError) as e:
                    failure = "connection lost at byte %%d: %s" % str(e).replace("%", "%%")
                if not n:
                    hasher.give_back(buf)
                    if failure:
                        raise _Retryable(failure % state["offset"])
                    break
                off = 0
                try:
                    while off < n:
                        off += os.write(fd, mv[off:n])
                except OSError as e:
                    hasher.give_back(buf)
                    if e.errno == errno.ENOSPC:
                        raise FetchError("disk full writing %s at byte %d; the .part is kept for a resume once "
                                         "space is freed" % (self.part, state["offset"]))
                    raise
                hasher.put(buf, n)
                got_total += n
                state["offset"] += n
                self.result["bytes_downloaded"] += n
                self.result["bytes_hashed"] += n
                elapsed = self._transfer_s + (time.monotonic() - t0)
                rate = self.result["bytes_downloaded"] / elapsed if elapsed > 0 else 0
                self._log.progress(state["offset"], self.size, rate)
                if failure:
                    # a reset mid-buffer keeps what arrived: a server resetting every 60 KB still progresses
                    raise _Retryable(failure % state["offset"])
        finally:
            self._transfer_s += time.monotonic() - t0

    def _download(self):
        """Download into .part (resuming), verify, promote. Returns the final status."""
        client = _client(self.token, self.validate_certs)
        part_fd = self._open_part()
        offset = os.fstat(part_fd).st_size
        state = {"offset": offset, "resumed_from": offset, "fd": part_fd}
        chunk = self.chunk_size
        prefix_hasher = None
        if offset:
            try:
                prefix_hasher, n = hash_file(self.part, limit=offset, fd=part_fd)
            except BaseException:
                os.close(part_fd)
                raise
            os.lseek(part_fd, offset, os.SEEK_SET)
            self.result["bytes_hashed"] += n
            self._log.line("resume from byte %d (%s of %s already in %s; prefix hashed once)"
                           % (offset, human(offset), human(self.size), self.part))
        else:
            self._log.line("start %s -> %s (%d bytes, sha256 %s)" % (redact_url(self.url), self.dest, self.size, self.sha256))
        hasher = _PipelinedHasher(chunk, hasher=prefix_hasher)
        failures = 0
        furthest = offset          # the furthest byte any attempt of this run reached
        max_attempts = (self.retries + 1) * ATTEMPTS_PER_TRY
        t_start = time.monotonic()
        try:
            while True:
                self.result["attempts"] += 1
                before = state["offset"]
                if self.result["attempts"] > 1 and before:
                    self.result["resumes"] += 1
                try:
                    self._attempt(client, hasher, state)
                    break
                except _Retryable as e:
                    # Progress is new bytes past the furthest point reached before, and enough of them:
                    # a server restarting from 0 or dribbling a byte per answer does not reset the budget.
                    gained = state["offset"] - furthest
                    if gained >= min(MIN_PROGRESS_BYTES, self.size - furthest) and gained > 0:
                        failures = 0
                    furthest = max(furthest, state["offset"])
                    failures += 1
                    if failures > self.retries or self.result["attempts"] >= max_attempts:
                        why = ("%d retries without progress" % self.retries if failures > self.retries
                               else "the cap of %d attempts per run" % max_attempts)
                        raise FetchError("giving up after %d attempts (%s): %s. "
                                         "%s holds %d of %d bytes; re-run to resume"
                                         % (self.result["attempts"], why, e, self.part,
                                            state["offset"], self.size))
                    delay = min(self.retry_delay * (2 ** (failures - 1)), self.retry_delay_max)
                    self._log.line("attempt %d failed: %s; retry in %.1fs" % (self.result["attempts"], e, delay))
                    time.sleep(delay)
            digest = hasher.hexdigest()
            if self.fsync:
                os.fsync(state["fd"])
        finally:
            hasher.close()
            got = os.fstat(state["fd"]).st_size
            os.close(state["fd"])
            if not offset and not state["offset"] and got == 0:
                self._dir.unlink(os.path.basename(self.part))  # the empty .part this run created: nothing worth keeping
            self.result["elapsed_s"] = round(time.monotonic() - t_start, 3)
            if self._transfer_s > 0:
                self.result["rate_bytes_per_s"] = int(self.result["bytes_downloaded"] / self._transfer_s)
            self._log.progress(state["offset"], self.size, self.result["rate_bytes_per_s"], force=True)
        self.result["resumed_from"] = state["resumed_from"]
        if got != self.size or digest != self.sha256:
            reason = ("size mismatch after download: expected %d, got %d" % (self.size, got)
                      if got != self.size else
                      "sha256 mismatch after download: expected %s, got %s" % (self.sha256, digest))
            entry = self._trash(self.part, reason, got, digest)
            raise FetchError("%s from %s; the .part was moved to %s (never promoted). If the manifest is right, the "
                             "source served wrong bytes: re-run to download again" % (reason, redact_url(self.url), entry["path"]))
        self._dir.replace(os.path.basename(self.part), os.path.basename(self.dest), fsync=self.fsync)
        self._apply_attributes()
        self.result["stamp"] = write_stamp(self.dest, self.sha256, self.url, self._dir)
        self._log.line("verified and promoted %s (%d bytes, sha256 %s, %s/s)"
                       % (self.dest, self.size, digest, human(self.result["rate_bytes_per_s"])))
        return "resumed" if state["resumed_from"] else "downloaded"

    def _preflight_disk(self, to_download):
        parent = os.path.dirname(self.dest)
        free = self.disk_free(parent)
        need = to_download + self.disk_margin_bytes
        self.result["disk"] = {"free_bytes": free, "needed_bytes": need, "to_download_bytes": to_download,
                               "margin_bytes": self.disk_margin_bytes, "path": parent}
        if free < need:
            raise FetchError("not enough free disk on %s: %d bytes free (%s), need %d (%s) = %d still to download + "
                             "%d margin; free space or lower disk_margin_bytes. Nothing was downloaded"
                             % (parent, free, human(free), need, human(need), to_download, self.disk_margin_bytes))

    # -- entry -----------------------------------------------------------
    def run(self):
        self._validate()
        try:  # every name below is used relative to this descriptor: a directory swapped for a link changes nothing
            self._dir = open_dir(os.path.dirname(self.dest), "directory of dest", must_exist=not self.check_mode)
        except FileRefused as e:
            raise FetchError("%s. Nothing was changed" % e)
        try:
            return self._run()
        finally:
            if self._dir is not None:
                self._dir.close()

    def _run(self):
        r = self.result
        present = self._check_present()
        if present == "verified":
            r["status"] = "verified"
            r["msg"] = "%s present and verified by %s" % (self.dest, r.get("verified_by"))
            return r
        if isinstance(present, dict):
            r["mismatch"] = present
            self._refuse_a_wrong_declared_size(present)
        part_st = self._dir.lstat(os.path.basename(self.part)) if self._dir is not None else None
        part_len = part_st.st_size if part_st is not None else 0
        part_too_long = part_len > self.size

        if self.check_mode:
            if isinstance(present, dict):
                r["status"] = "mismatch"
                r["would_download_bytes"] = self.size
                r["msg"] = ("%s does not match (%s): would move it to the trash and download %d bytes"
                            % (self.dest, present["reason"], self.size))
            elif part_len and not part_too_long:
                r["status"] = "would_resume"
                r["resumed_from"] = part_len
                r["would_download_bytes"] = self.size - part_len
                r["msg"] = "would resume %s from byte %d (%d bytes to download)" % (self.part, part_len, self.size - part_len)
            else:
                r["status"] = "would_download"
                r["would_download_bytes"] = self.size
                r["msg"] = "would download %d bytes to %s" % (self.size, self.dest)
                if part_too_long:
                    r["msg"] += " (the %d-byte .part is longer than declared: it would go to the trash)" % part_len
            r["changed"] = True
            if os.path.isdir(os.path.dirname(self.dest)):
                self._preflight_disk(r["would_download_bytes"])
            return r

        lock_fd = self._lock()
        try:
            self._log = ProgressLog(self.progress_log, os.path.basename(self.dest), self.progress_interval)
            try:
                if isinstance(present, dict):
                    self._trash(self.dest, present["reason"], present["found_size"], present["found_sha256"])
                    r["changed"] = True
                if part_too_long:
                    self._trash(self.part, "a .part of %d bytes is longer than the declared %d" % (part_len, self.size),
                                part_len, None)
                    part_len = 0
                    r["changed"] = True
                self._preflight_disk(self.size - part_len)
                r["status"] = self._download()
                r["changed"] = True
                r["msg"] = "%s %s: %d bytes downloaded at %s/s" % (
                    r["status"], self.dest, r["bytes_downloaded"], human(r["rate_bytes_per_s"]))
                return r
            except FetchError as e:
                self._log.line("FAILED: %s" % e.msg)
                raise
            finally:
                self._log.close()
        finally:
            self._unlock(lock_fd)

    def _lock(self):
        """flock <dest>.lock (one lock per destination file); refuse at once when another fetch holds it."""
        name = os.path.basename(self.lock)
        while True:
            try:
                fd = self._dir.open_existing_or_new(name, "lock file", mode=0o600)
            except FileRefused as e:
                raise FetchError("%s. Nothing was changed" % e)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise FetchError("another gguf_fetch is writing %s (flock on %s held); wait for it to finish"
                                 % (self.dest, self.lock))
            cur = self._dir.lstat(name)
            same = cur is not None and os.fstat(fd).st_ino == cur.st_ino
            if same:
                return fd
            os.close(fd)  # the holder removed it between our open and our lock: lock the new one

    def _unlock(self, fd):
        try:
            self._dir.unlink(os.path.basename(self.lock))  # while still held: a waiter that opened it re-checks the inode
        except OSError:
            pass
        os.close(fd)


def fetch(url, dest, size, sha256, **kwargs):
    """Fetch url to dest, verified against the declared size and sha256.

    Returns the result dict (see Fetcher.result); raises FetchError with a
    message naming the cause and the fix, and e.result holding what was
    measured (trash entries, bytes) up to the failure.
    """
    f = Fetcher(url, dest, size, sha256, **kwargs)
    try:
        return f.run()
    except FetchError as e:
        merged = dict(f.result)
        merged.update(e.result)
        e.result = merged
        raise
