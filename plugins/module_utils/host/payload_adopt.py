# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Payload adoption: a manifest entry whose size or sha256 is still a placeholder, and whose file is already on
the host, gets the file's own size and sha256 *proposed* -- never adopted silently.

Plain Python (stdlib only): ``propose`` runs on the host (plugins/modules/payload_adopt_info.py), ``proposal_lines``
and ``unproved`` on the controller (the play's checklist).

The contract:

* Only an entry that needs a value is read: size 0 or a sha256 that is not 64 hex digits. A complete entry is
  the fetch's to verify, and a file not on the host is the fetch's to download; neither is hashed here.
* A present file is hashed once (one pass, the collection's one sha256 helper). A gguf_fetch stamp beside it
  (``<file>.verified.json``) that vouches for this exact file -- same inode, size, mtime and ctime -- is read
  instead of hashing: the fetch hashed these very bytes before.
* Where the inventory already declares one of the two values, the file must agree with it, or nothing is
  proposed: a file shorter than its declared size is the runbook's fetch-script bug (a local size once became
  the declared one), not a value to copy.
* A proposal is what the file IS, not what it should be: the checklist says to confirm it against the Hub (its
  LFS oid and size) before pasting it into the inventory. Until then the deploy still refuses the placeholder.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import re
import stat

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import STAMP_SHAPE, read_stamp
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import FileRefused
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.settle import checklist_lines
from ansible_collections.dankfleet.llm.plugins.module_utils.base.sha256 import hash_file

HEX64 = re.compile(r"(?:sha256:)?[0-9a-fA-F]{64}\Z")

# One manifest entry as the module is handed it (gguf_fetch_manifest's own fields); where the serve role loads
# each role's file (the plan's payload_paths).
ENTRY = tr.Obj({
    "role": tr.Str(64, name=True),
    "file": tr.Str(4096, name=True),
    "url": tr.Str(8192, name=True),
    "size": tr.OneOf(tr.Int(0, tr.INT_LIMIT), tr.Str(256, name=True)),
    "sha256": tr.Str(256, name=True),
}, required=("role", "file", "size", "sha256"))
MANIFEST = tr.List(ENTRY, max_len=64)
PATHS = tr.Map(tr.Str(4096, name=True, pattern="/.*", what="an absolute path"), key=tr.Str(64, name=True), max_len=64)


def declared_size(value):
    """The declared size as an int, 0 when it is not filled in (0, '0', a placeholder)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    return int(text) if text.isdigit() and len(text) <= tr.INT_DIGITS else 0


def declared_sha256(value):
    """The declared sha256 as 64 lowercase hex digits, '' when it is a placeholder."""
    text = str(value).strip()
    if not HEX64.match(text):
        return ""
    return text[-64:].lower()


def needs_values(entry):
    """True when the entry's size or sha256 is still to fill."""
    return declared_size(entry["size"]) == 0 or not declared_sha256(entry["sha256"])


def _stamped(path, st):
    """The sha256 a gguf_fetch stamp vouches for, when it vouches for this exact file (else '')."""
    stamp = read_stamp(path)
    if stamp is None:
        return ""
    try:
        stamp = tr.read(STAMP_SHAPE, stamp, "stamp")
    except tr.ShapeError:
        return ""
    same = (stamp["size"] == st.st_size and stamp["mtime_ns"] == st.st_mtime_ns
            and stamp["ctime_ns"] == st.st_ctime_ns and stamp["inode"] == st.st_ino)
    return stamp["sha256"] if same else ""


def propose_one(entry, hasher=None):
    """One entry's finding: {role, file, path, url, status, ...}. status is one of
    proposed (size, sha256, by: stamp|sha256), absent (the fetch downloads it), complete (nothing to fill),
    mismatch (problem: the file disagrees with a value the inventory declares; nothing is proposed),
    unreadable (problem: not a regular file, or it cannot be read)."""
    hasher = hasher or (lambda p: hash_file(p)[0].hexdigest())
    out = dict((k, entry.get(k, "")) for k in ("role", "file", "path", "url"))
    if not needs_values(entry):
        out["status"] = "complete"
        return out
    size, sha = declared_size(entry["size"]), declared_sha256(entry["sha256"])
    try:
        st = os.stat(entry["path"], follow_symlinks=False)
    except OSError as exc:
        if exc.errno == 2:
            out["status"] = "absent"
            return out
        out.update(status="unreadable", problem="%s cannot be read: %s" % (entry["path"], exc.strerror))
        return out
    if not stat.S_ISREG(st.st_mode):
        out.update(status="unreadable", problem="%s is not a regular file (a link or a directory is not adopted)"
                   % entry["path"])
        return out
    if size and st.st_size != size:
        out.update(status="mismatch",
                   problem="%s is %d bytes, the inventory declares %d: it is not the declared file (a short or "
                           "different copy), nothing is proposed - the fetch moves it to the trash and downloads it"
                           % (entry["path"], st.st_size, size))
        return out
    found, by = _stamped(entry["path"], st), "stamp"
    if not found:
        try:
            found, by = hasher(entry["path"]), "sha256"
        except (OSError, FileRefused) as exc:
            out.update(status="unreadable", problem="%s cannot be hashed: %s" % (entry["path"], exc))
            return out
    if sha and found != sha:
        out.update(status="mismatch",
                   problem="%s has sha256 %s, the inventory declares %s: it is not the declared file, nothing is "
                           "proposed" % (entry["path"], found, sha))
        return out
    out.update(status="proposed", size=st.st_size, sha256=found, by=by)
    return out


def propose(manifest, paths, hasher=None):
    """Every entry's finding (propose_one) at paths[role], in the manifest's order; an entry with no path (a role
    the shape does not load) is left out. Both are read through their shapes first."""
    manifest = tr.read(MANIFEST, manifest, "payload_adopt_info manifest")
    paths = tr.read(PATHS, paths, "payload_adopt_info paths")
    return [propose_one(dict(e, path=paths[e["role"]]), hasher) for e in manifest if e["role"] in paths]


# --- on the controller: the checklist ------------------------------------------------------------------------

STATUSES = ("proposed", "absent", "complete", "mismatch", "unreadable")
FINDING = tr.Obj({
    "role": tr.Str(64, name=True),
    "file": tr.Str(4096, name=True),
    "path": tr.Str(4096, name=True),
    "url": tr.Str(8192, name=True),
    "status": tr.Enum(*STATUSES),
    "size": tr.Int(0, tr.INT_LIMIT),
    "sha256": tr.Str(64, name=True, pattern="[0-9a-f]{64}", what="64 lowercase hex digits"),
    "by": tr.Enum("stamp", "sha256"),
    "problem": tr.Str(4096),
}, required=("role", "file", "status"))
FINDINGS = tr.List(FINDING, max_len=64)
PLACEHOLDER_ITEM = tr.Obj({
    "variable": tr.Str(256, name=True),
    "where": tr.Str(4096),
    "value": tr.Str(4096),
    "url": tr.Str(8192),
}, required=("variable", "where", "value"))
PLACEHOLDER_ITEMS = tr.List(PLACEHOLDER_ITEM)


def _entry_of(item):
    """(variable, the entry's where prefix) of a placeholder item: 'frank_medium_files', 'orcarouter_q8_0'."""
    where = item["where"]
    if where.startswith("["):
        return item["variable"], where.split("]", 1)[0] + "]"
    return item["variable"], where.rsplit(".", 1)[0] if "." in where else ""


def proved(placeholders, findings):
    """The placeholder items a proposal covers: a manifest entry's size and sha256 (matched by the entry's url),
    for a file whose finding is 'proposed'."""
    placeholders = tr.read(PLACEHOLDER_ITEMS, placeholders, "the settle step's placeholders")
    findings = tr.read(FINDINGS, findings, "payload_adopt_info findings")
    urls = set(f["url"] for f in findings if f["status"] == "proposed" and f.get("url"))
    return [p for p in placeholders if p.get("url") in urls and p["where"].rsplit(".", 1)[-1] in ("size", "sha256")]


def unproved(placeholders, findings):
    """The placeholder items adoption cannot prove: every one, less those a proposal covers."""
    covered = proved(placeholders, findings)
    placeholders = tr.read(PLACEHOLDER_ITEMS, placeholders, "the settle step's placeholders")
    return [p for p in placeholders if p not in covered]


def proposal_lines(placeholders, findings):
    """One checklist line per proposal: the variable and entry to edit, the values to paste, and what to confirm
    them against; one per finding that refuses a file (mismatch, unreadable)."""
    placeholders = tr.read(PLACEHOLDER_ITEMS, placeholders, "the settle step's placeholders")
    findings = tr.read(FINDINGS, findings, "payload_adopt_info findings")
    lines = []
    for f in findings:
        if f["status"] == "proposed":
            where = sorted(set("%s%s" % (var, (" " + entry if entry.startswith("[") else "." + entry) if entry else "")
                               for var, entry in (_entry_of(p) for p in placeholders if p.get("url") == f["url"])))
            lines.append("%s: proposed from the file on the host (%s, by %s) - confirm against the Hub's size and LFS "
                         "oid, then write size: %d and sha256: %s" % (
                             ", ".join(where) or "gguf_fetch_manifest[%s]" % f["role"], f["path"],
                             "its fetch stamp" if f["by"] == "stamp" else "one sha256 pass", f["size"], f["sha256"]))
        elif f["status"] in ("mismatch", "unreadable"):
            lines.append("gguf_fetch_manifest[%s]: not adopted - %s" % (f["role"], tr.printable(f.get("problem", ""))))
    return lines


def checklist(placeholders, findings):
    """The host's checklist with adoption applied: the settle step's lines for every placeholder adoption cannot
    prove, then one line per proposal (the values to confirm and paste) and per refused file."""
    return checklist_lines(unproved(placeholders, findings)) + proposal_lines(placeholders, findings)
