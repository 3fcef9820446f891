"""Class generators for dankfleet.llm.trash_files (issue 23 item 3), registered by one line in bad_inputs.py.

Each class is a generator over its inputs, not one case per finding:

* names      every byte the MANIFEST's writer, reader and line splitters disagree about (\\x0b, \\x1c-\\x1e,
             U+0085, U+2028, U+2029, \\t, \\r, \\n, a backslash, '-', bytes that are not UTF-8) plus seeded random
             byte names: the retire through the module, then the restore through the module, byte-identical;
* comments   a comment with each of those line breaks: it reads back as written;
* full       a 1 MiB tmpfs trash that fills at the 1st, 2nd or 3rd of four 400 KiB files: a refusal naming the
             full trash, then a restore that leaves nothing lost (root only: skipped elsewhere);
* swapped    the parent, grandparent or great-grandparent of a retired file swapped for a symlink after the
             retire, or replaced by another directory: refused by name, the link's target untouched;
* owner      a MANIFEST owned by nobody, one writable by others, a trash directory owned by nobody, a MANIFEST
             that is a symlink: refused by name (the chown ones as root only);
* cut        a MANIFEST cut at its header and at each file row: refused by name; cut mid-record (a torn last
             line, what a crash leaves): restores everything;
* trash_dir  a trash_dir that is a symlink (to /etc, to a directory, dangling): refused by name.

A class's restore cases follow its retire cases and read what they left: run a class whole (``--only`` with
its prefix, e.g. ``--only "trash_files full"``).
"""
from __future__ import annotations

import atexit
import hashlib
import os
import random
import shutil
import subprocess

import import_paths  # noqa: F401 - run as a script: the collection on sys.path

from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf

MODULE = "dankfleet.llm.trash_files"
NOBODY = 65534
TRICKY = [b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", "\x85".encode(), "\u2028".encode(), "\u2029".encode(),
          b"\t", b"\r", b"\n", b"\\", b"\\x41", b"-", b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x85", b"#"]


def _snapshot(root):
    out = {}
    for base, dirs, files in os.walk(os.fsencode(root)):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            p = os.path.join(base, name)
            if os.path.islink(p):
                out[p] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as fh:
                    out[p] = ("file", os.lstat(p).st_mode, os.lstat(p).st_uid, hashlib.sha256(fh.read()).hexdigest())
    return out


def _same_as(root, before, what="restored"):
    def check(r):
        now = _snapshot(root)
        if now != before:
            lost = sorted(set(before) - set(now))
            return "%s tree differs (lost %d: %r)" % (what, len(lost), lost[:3])
        return None
    return check


def _moved(root, count):
    def check(r):
        if len(r.get("moves", [])) != count or _snapshot(root):
            return "moved %d of %d, %d left" % (len(r.get("moves", [])), count, len(_snapshot(root)))
        return None
    return check


def _names():
    rng = random.Random(23)
    names = [b"n" + t + b"x" for t in TRICKY]
    for _ in range(8):
        raw = bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 12))).replace(b"/", b"_")
        names.append(b"r" + raw)
    return names


def _name_cases(Case, tmp):
    cases = []
    for n, name in enumerate(_names()):
        root = os.path.join(tmp, "trash-names", "%02d" % n)
        os.makedirs(root)
        with open(os.path.join(os.fsencode(root), name), "wb") as fh:
            fh.write(name * 7)
        os.symlink(name, os.path.join(os.fsencode(root), b"l" + name))
        before = _snapshot(root)
        trash = os.path.join(tmp, "trash-names-t", "%02d" % n)
        label = ascii(name)[2:-1][:24]
        cases.append(Case("trash_files names %s retire" % label, MODULE, {"trash_dir": trash, "paths": [root]},
                          check=_moved(root, 2)))
        cases.append(Case("trash_files names %s restore" % label, MODULE, {"trash_dir": trash, "state": "restored"},
                          check=_same_as(root, before)))
    return cases


def _comment_cases(Case, tmp):
    cases = []
    for n, piece in enumerate(TRICKY):
        comment = "before" + piece.decode("utf-8", "surrogateescape") + "after"
        if any(0xdc80 <= ord(c) <= 0xdcff for c in comment):
            continue                                 # JSON args carry text only
        root = os.path.join(tmp, "trash-comments", "%02d" % n)
        os.makedirs(root)
        with open(os.path.join(root, "f"), "w") as fh:
            fh.write("x")
        trash = os.path.join(tmp, "trash-comments-t", "%02d" % n)

        def reads_back(r, trash=trash, comment=comment):
            with open(os.path.join(trash, "MANIFEST"), "rb") as fh:
                got = tf.read_manifest(fh.read())["comments"]
            return None if got == [comment, "second"] else "comments read back as %r" % got
        cases.append(Case("trash_files comments %s" % ascii(piece)[2:-1], MODULE,
                          {"trash_dir": trash, "paths": [root], "comments": [comment, "second"]}, check=reads_back))
    return cases


def _mount_tmpfs(path, size):
    os.makedirs(path)
    if os.geteuid() != 0:
        return False
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", path], capture_output=True).returncode:
        return False
    atexit.register(subprocess.run, ["umount", "-l", path], capture_output=True)
    return True


def _full_cases(Case, tmp):
    cases = []
    for fills_at in (0, 1, 2):
        small = os.path.join(tmp, "trash-full", "mnt%d" % fills_at)
        # 400 KiB files: the trash holds two; a trash shrunk by a filler fills at the first or second
        if not _mount_tmpfs(small, "1m"):
            return []
        if fills_at < 2:
            with open(os.path.join(small, "filler"), "wb") as fh:
                fh.write(b"\0" * ((2 - fills_at) * 400 * 1024))
        root = os.path.join(tmp, "trash-full", "models%d" % fills_at)
        os.makedirs(root)
        for k in range(4):
            with open(os.path.join(root, "m%d.gguf" % k), "wb") as fh:
                fh.write(random.Random(k).randbytes(400 * 1024))
        before = _snapshot(root)
        trash = os.path.join(small, "trash")
        cases.append(Case("trash_files full at file %d retire" % (fills_at + 1), MODULE,
                          {"trash_dir": trash, "paths": [root]},
                          refuse=r"m%d\.gguf could not be moved to the trash \(No space left on device\): it stays "
                                 r"where it was" % fills_at))
        cases.append(Case("trash_files full at file %d restore" % (fills_at + 1), MODULE,
                          {"trash_dir": trash, "state": "restored"}, check=_same_as(root, before)))
    return cases


def _retired_tree(tmp, name, depth=3):
    """<tmp>/<name>/a/b/c/x.service retired into its own trash; a victim directory beside it."""
    base = os.path.join(tmp, name)
    leaf = os.path.join(base, *["abc"[i] for i in range(depth)])
    os.makedirs(leaf)
    with open(os.path.join(leaf, "x.service"), "w") as fh:
        fh.write("[Service]\n")
    victim = os.path.join(base, "victim")
    os.makedirs(os.path.join(victim, "b", "c"))
    trash = os.path.join(base, "trash")
    tf.retire(trash, [os.path.join(leaf, "x.service")])
    return base, leaf, victim, trash


def _swapped_cases(Case, tmp):
    cases = []
    for level, comp in enumerate(("c", "b", "a")):
        base, leaf, victim, trash = _retired_tree(tmp, "trash-swap%d" % level)
        swapped = os.path.join(base, *("abc"[:3 - level]))
        os.rename(swapped, swapped + ".moved")
        os.symlink(victim, swapped)
        cases.append(Case("trash_files swapped %s for a symlink" % "/".join("abc"[:3 - level]), MODULE,
                          {"trash_dir": trash, "state": "restored"}, refuse=r"/%s is a symlink: trash_files never "
                                                                            r"follows a link" % comp))
    base, leaf, victim, trash = _retired_tree(tmp, "trash-replaced")
    os.rename(leaf, leaf + ".old")
    os.mkdir(leaf)
    cases.append(Case("trash_files parent replaced by another directory", MODULE,
                      {"trash_dir": trash, "state": "restored"}, refuse=r"is not the directory it was retired from"))
    return cases


def _owner_cases(Case, tmp):
    cases = []
    setups = [("MANIFEST mode 0666", lambda t: os.chmod(os.path.join(t, "MANIFEST"), 0o666), r"writable by its group"),
              ("MANIFEST a symlink", lambda t: (os.rename(os.path.join(t, "MANIFEST"), t + ".real"),
                                                os.symlink(t + ".real", os.path.join(t, "MANIFEST"))),
               r"MANIFEST is a symlink")]
    if os.geteuid() == 0:
        setups += [("MANIFEST owned by nobody", lambda t: os.chown(os.path.join(t, "MANIFEST"), NOBODY, NOBODY),
                    r"MANIFEST .* is owned by .*neither root nor the user"),
                   ("trash_dir owned by nobody", lambda t: os.chown(t, NOBODY, NOBODY),
                    r"trash_dir .* is owned by .*neither root nor the user")]
    for n, (label, spoil, refuse) in enumerate(setups):
        base, leaf, victim, trash = _retired_tree(tmp, "trash-owner%d" % n)
        spoil(trash)
        cases.append(Case("trash_files restore, %s" % label, MODULE, {"trash_dir": trash, "state": "restored"},
                          refuse=refuse))
    return cases


def _cut_cases(Case, tmp):
    """Each cut of a fresh retire's own MANIFEST: at its header, before each file row, mid-record."""
    cases = []
    specs = [("at its header", "header", 0, r"accounts for 0 file\(s\) .*cut short")]
    specs += [("before file row %d" % (k + 1), "row", k, r"cut short") for k in range(3)]
    specs += [("mid-record (a crash's torn line)", "torn", 0, None)]
    for n, (label, how, k, refuse) in enumerate(specs):
        root = os.path.join(tmp, "trash-cut%d" % n)
        os.makedirs(root)
        for j in range(3):
            with open(os.path.join(root, "f%d" % j), "w") as fh:
                fh.write("content %d" % j)
        before = _snapshot(root)
        trash = os.path.join(tmp, "trash-cut%d-t" % n)
        tf.retire(trash, [root])
        manifest = os.path.join(trash, "MANIFEST")
        with open(manifest, "rb") as fh:
            lines = fh.read().split(b"\n")
        rows = [i for i, line in enumerate(lines) if line.startswith((b"file\t", b"link\t"))]
        if how == "header":
            data = lines[0] + b"\n"
        elif how == "row":
            data = b"\n".join(lines[:rows[k]]) + b"\n"
        else:
            data = b"\n".join(lines)[:len(b"\n".join(lines[:rows[-1] + 1])) + 4]
        with open(manifest, "wb") as fh:
            fh.write(data)
        args = {"trash_dir": trash, "state": "restored"}
        if refuse:
            cases.append(Case("trash_files MANIFEST cut %s" % label, MODULE, args, refuse=refuse))
        else:
            cases.append(Case("trash_files MANIFEST cut %s" % label, MODULE, args, check=_same_as(root, before)))
    return cases


def _trash_dir_cases(Case, tmp):
    cases = []
    f = os.path.join(tmp, "trash-link-f")
    with open(f, "w") as fh:
        fh.write("x")
    real = os.path.join(tmp, "trash-link-real")
    os.makedirs(real)
    for n, target in enumerate(("/etc", real, os.path.join(tmp, "nowhere"))):
        link = os.path.join(tmp, "trash-link%d" % n)
        os.symlink(target, link)
        cases.append(Case("trash_files trash_dir a symlink to %s" % os.path.basename(target), MODULE,
                          {"trash_dir": link, "paths": [f]}, refuse=r"trash_dir .* is a symlink"))
        cases.append(Case("trash_files restore from a symlinked trash_dir %d" % n, MODULE,
                          {"trash_dir": link, "state": "restored"}, refuse=r"trash_dir .* is a symlink"))
    return cases


def cases(tmp, Case):
    """Every trash_files class's cases (Case: bad_inputs.Case)."""
    out = []
    atexit.register(shutil.rmtree, tmp, True)   # after the tmpfs unmounts (atexit runs last-registered first)
    for generate in (_name_cases, _comment_cases, _full_cases, _swapped_cases, _owner_cases, _cut_cases,
                     _trash_dir_cases):
        out += generate(Case, tmp)
    return out
