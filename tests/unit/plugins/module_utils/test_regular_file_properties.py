# -*- coding: utf-8 -*-
"""The file-access layer, property-based: random trees of directories owned by root or by nobody (some
read-only, some world-writable, some sticky), files, links (final and intermediate components, to
victims outside, to devices, dangling, relative with '..'), FIFOs, unix sockets and device nodes.

Whatever the tree and whichever path is asked for, every read, directory open and write:

* ends within a deadline (SIGALRM: a blocking open or read fails the example, never hangs the suite);
* follows no link where it must not: a read with follow=False never reads through a final link; no
  directory is opened through a link that sits in (or below) a directory another user can write;
* writes nothing outside the one name it was asked to write, in the directory the path really names,
  and changes nothing at all when it refuses; the victims outside the tree never change;
* refuses only with FileRefused, whose message starts with the path and says the cause.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import shutil
import signal
import socket
import stat
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.base import regular_file as rf

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the trees chown to nobody: run as root, as the deploy does")

NOBODY = 65534
NAMES = ("a", "b", "c")
MODES = (0o755, 0o555, 0o700, 0o777, 0o1777, 0o775)
KINDS = ("file", "dir", "link", "fifo", "socket", "chr", "binary")
LINK_TARGETS = ("../outside/victim", "OUTSIDE/victim", "OUTSIDE", "/dev/null", "/dev/zero", "nowhere", "..",
                "a", "b", "../a", "../../t")
DEADLINE_S = 5


class Hung(Exception):
    pass


def _alarm(signum, frame):
    raise Hung("blocked for %ds" % DEADLINE_S)


@st.composite
def trees(draw):
    """[(relative path, kind, owner uid, mode, link target)] below 't', parents before children."""
    entries = [("t", "dir", draw(st.sampled_from((0, NOBODY))), draw(st.sampled_from(MODES)), None)]
    dirs = ["t"]
    for _ in range(draw(st.integers(1, 10))):
        parent = draw(st.sampled_from(dirs))
        path = parent + "/" + draw(st.sampled_from(NAMES))
        if any(e[0] == path for e in entries):
            continue
        kind = draw(st.sampled_from(KINDS))
        entries.append((path, kind, draw(st.sampled_from((0, NOBODY))), draw(st.sampled_from(MODES)),
                        draw(st.sampled_from(LINK_TARGETS)) if kind == "link" else None))
        if kind == "dir":
            dirs.append(path)
    return entries


@st.composite
def asks(draw):
    """(operation, path below the tree root as components, follow)."""
    comps = ["t"] + [draw(st.sampled_from(NAMES + ("..", "."))) for _ in range(draw(st.integers(0, 4)))]
    last = draw(st.sampled_from(NAMES + ("new", "x.part")))
    op = draw(st.sampled_from(("read", "read_nofollow", "open_dir", "write", "append")))
    return op, comps + [last]


def _build(base, entries, sockets):
    os.makedirs(os.path.join(base, "outside"))
    with open(os.path.join(base, "outside", "victim"), "wb") as fh:
        fh.write(b"root:secret\n")
    for path, kind, uid, mode, target in entries:
        full = os.path.join(base, path)
        if kind == "dir":
            os.mkdir(full)
        elif kind in ("file", "binary"):
            with open(full, "wb") as fh:
                fh.write(b"text\n" if kind == "file" else b"\xff\xfe\x00x")
        elif kind == "link":
            os.symlink(target.replace("OUTSIDE", os.path.join(base, "outside")), full)
        elif kind == "fifo":
            os.mkfifo(full)
        elif kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            s.bind(full)
            sockets.append(s)
        elif kind == "chr":
            try:
                os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 5))   # /dev/zero's numbers
            except OSError:
                os.symlink("/dev/zero", full)
        os.lchown(full, uid, uid)
        if kind == "dir":
            os.chmod(full, mode)


def _snapshot(base):
    out = {}
    for top, dirs, files in os.walk(base):
        for name in dirs + files:
            p = os.path.join(top, name)
            s = os.lstat(p)
            if stat.S_ISREG(s.st_mode):
                with open(p, "rb") as fh:
                    out[p] = ("file", s.st_ino, fh.read(), stat.S_IMODE(s.st_mode))
            elif stat.S_ISLNK(s.st_mode):
                out[p] = ("link", os.readlink(p))
            else:
                out[p] = (stat.S_IFMT(s.st_mode), s.st_ino)
    return out


def _link_in_untrusted_place(path):
    """Oracle, by path strings: does resolving the directory path cross a link that another user could have
    put there (in a directory not owned by root, writable by others and not sticky, or below such a one)?"""
    euid = os.geteuid()
    todo = [c for c in path.split("/") if c and c != "."]
    done = "/"
    foreign = False
    hops = 0
    while todo:
        comp = todo.pop(0)
        if comp == "..":
            if foreign:
                return True             # refused too: '..' below a foreign directory
            done = os.path.dirname(done.rstrip("/")) or "/"
            continue
        here = os.path.join(done, comp)
        try:
            s = os.lstat(here)
        except OSError:
            return False
        if stat.S_ISLNK(s.st_mode):
            parent = os.lstat(done)
            writable_by_others = parent.st_uid not in (0, euid) or parent.st_mode & 0o022
            sticky_ok = parent.st_mode & stat.S_ISVTX and s.st_uid in (0, euid) and parent.st_uid in (0, euid)
            if foreign or (writable_by_others and not sticky_ok):
                return True
            hops += 1
            if hops > 40:
                return False
            target = os.readlink(here)
            todo = [c for c in target.split("/") if c and c != "."] + todo
            if target.startswith("/"):
                done = "/"
            continue
        if not stat.S_ISDIR(s.st_mode):
            return False
        done = here
        if s.st_uid not in (0, euid) or (s.st_mode & 0o022 and not s.st_mode & stat.S_ISVTX):
            foreign = True
    return False


def _check_refusal(exc):
    assert isinstance(exc, rf.FileRefused), "not a named refusal: %r" % (exc,)
    text = str(exc)
    assert text.startswith("/") or text.startswith("'"), text
    assert exc.cause and ": " in text, text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), st.lists(asks(), min_size=1, max_size=6))
def test_the_layer_never_blocks_follows_or_writes_where_it_must_not(entries, ops):
    base = tempfile.mkdtemp(prefix="rf-", dir="/tmp")
    os.chmod(base, 0o755)
    sockets = []
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        _build(base, entries, sockets)
        for op, comps in ops:
            path = os.path.join(base, *comps)
            if not os.path.normpath(path).startswith(base + "/"):
                continue                # a path that names a place outside the tree: not this test's business
            before = _snapshot(base)
            result, exc = None, None
            signal.alarm(DEADLINE_S)
            try:
                if op in ("read", "read_nofollow"):
                    result = rf.read_text(path, "input", 1 << 16, follow=(op == "read"))
                elif op == "open_dir":
                    with rf.open_dir(path) as d:
                        result = d.path
                elif op == "write":
                    result = rf.write_file_atomic(path, b"new\n", "output", fsync=False)
                else:
                    d, name = rf.open_parent(path, "log")
                    with d:
                        fd = d.open_existing_or_new(name, "log", append=True)
                        os.write(fd, b"+\n")
                        os.close(fd)
                        result = d.join(name)
            except Hung:
                raise AssertionError("%s %s blocked" % (op, path))
            except Exception as e:      # noqa: BLE001 - every exception is checked to be a named refusal
                exc = e
            finally:
                signal.alarm(0)
            after = _snapshot(base)
            if exc is not None:
                _check_refusal(exc)
                assert after == before, "%s %s refused (%s) but changed the tree" % (op, path, exc)
                continue
            if op == "read_nofollow":
                assert not os.path.islink(path), "read through the final link %s" % path
            # open_parent reads a file path as gguf_fetch's dest always was: normpath first ('..' lexically)
            directory = path if op == "open_dir" else os.path.dirname(os.path.normpath(path))
            assert not _link_in_untrusted_place(directory), "%s %s crossed a link another user owns" % (op, path)
            if op in ("write", "append"):
                real = os.path.join(os.path.realpath(directory), os.path.basename(os.path.normpath(path)))
                assert result == real, (result, real)
                changed = set(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                assert changed == set([real]), "%s %s changed %s" % (op, path, sorted(changed))
                assert after[real][0] == "file"
            else:
                assert after == before
            with open(os.path.join(base, "outside", "victim"), "rb") as fh:
                assert fh.read() == b"root:secret\n"
    finally:
        signal.signal(signal.SIGALRM, old)
        for s in sockets:
            s.close()
        shutil.rmtree(base, ignore_errors=True)
