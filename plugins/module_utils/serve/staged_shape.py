# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The staged record: the deploy's two halves (``--tags stage``, then ``--tags switch``) meet in one file on the host.

Plain Python (stdlib only): the module plugins/modules/staged_shape.py is a thin wrapper, the tests import this.

``stage`` builds or adopts, fetches, plans and renders the shape into place while the predecessor still serves,
then records what it staged (``record``): the release the link points at, each payload file (its declared size and
sha256, which the fetch has just verified, and the inode/size/mtime/ctime it had then) and the sha256 of every
rendered file (env file, launcher, unit). ``switch`` reads that record back (``check``, through RECORD_SHAPE) and
refuses -- by name, with the fix, before anything stops -- when nothing is staged or the host no longer matches it:
another release linked, a payload file replaced (its ctime moved) or declared differently, a rendered file edited.
Nothing is hashed again but the small rendered files: the stage's proofs hold as long as the files' status does.
After a passing gate the switch marks the record switched (``mark_switched``): a second switch then restarts
nothing, and the record says how long each half took.

The record is written by a new file and a rename, and only when what it records changed (a second stage of the
same shape rewrites nothing). Check mode reads and reports, never writes.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import datetime
import errno
import json
import os
import stat

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.host.payload_adopt import (
    MANIFEST, PATHS, declared_sha256, declared_size)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import (
    FileRefused, open_parent, open_regular)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.sha256 import sha256_file

RECORD_VERSION = 1
RECORD_MAX_BYTES = 1 << 20
FIX = "run the playbook with --tags stage (while the predecessor still serves), then --tags switch"

_SHA = tr.Str(64, name=True, pattern="[0-9a-f]{64}", what="64 lowercase hex digits")
_PATH = tr.Str(4096, name=True, pattern="/.*", what="an absolute path")
PAYLOAD_SHAPE = tr.Obj({
    "path": _PATH,
    "size": tr.Int(0, tr.INT_LIMIT),
    "sha256": _SHA,
    "inode": tr.Int(0, tr.INT_LIMIT),
    "mtime_ns": tr.Int(-tr.INT_LIMIT, tr.INT_LIMIT),
    "ctime_ns": tr.Int(-tr.INT_LIMIT, tr.INT_LIMIT),
}, required=True)
RECORD_SHAPE = tr.Obj({
    "version": tr.Int(1, 1 << 16),
    "service": tr.Str(256, name=True),
    "release": tr.Obj({"link": _PATH, "target": _PATH}, required=True),
    "payload": tr.Map(PAYLOAD_SHAPE, key=tr.Str(64, name=True), max_len=64),
    "files": tr.Map(_SHA, key=_PATH, max_len=64),
    "staged_at": tr.Str(64, name=True),
    "stage_seconds": tr.Num(0, 1e9),
    "switched_at": tr.Str(64, name=True),
    "switch_seconds": tr.Num(0, 1e9),
}, required=("version", "service", "release", "payload", "files", "staged_at"))
# what a record says about the shape (the times and the switch mark are about the runs)
SHAPE_KEYS = ("version", "service", "release", "payload", "files")


class StagedError(Exception):
    """A named refusal: nothing is staged, the record cannot be read, or the host does not match it."""

    def __init__(self, msg, differences=()):
        Exception.__init__(self, msg)
        self.differences = list(differences)


def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def _stamp(moment):
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def observe(service, release_link, manifest, paths, files, missing_ok=False):
    """What is staged on the host now, in the record's shape (without the times). missing_ok (check mode, where the
    build and the fetch did not run): what is not there yet is named in ``missing`` instead of refused."""
    manifest = tr.read(MANIFEST, manifest, "staged_shape manifest")
    paths = tr.read(PATHS, paths, "staged_shape paths")
    missing = []
    out = {"version": RECORD_VERSION, "service": service, "release": {"link": release_link, "target": ""},
           "payload": {}, "files": {}}
    try:
        os.readlink(release_link)  # a link: the build's (and the adoption's) way of publishing a release
        target = os.path.realpath(release_link)
        if os.path.isdir(target):
            out["release"]["target"] = target
        else:
            missing.append("the release link %s points at %s, which is no directory" % (release_link, target))
    except OSError as exc:
        missing.append("the release link %s cannot be read (%s): the build stage makes it" % (release_link, exc.strerror))
    for entry in manifest:
        role = entry["role"]
        if role not in paths:
            continue
        size, sha = declared_size(entry["size"]), declared_sha256(entry["sha256"])
        if not size or not sha:
            missing.append("gguf_fetch_manifest[%s] declares no size and sha256 yet (a placeholder)" % role)
            continue
        try:
            st = os.stat(paths[role], follow_symlinks=False)
        except OSError as exc:
            missing.append("%s (%s) cannot be read (%s): the fetch stage downloads it" % (paths[role], role, exc.strerror))
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            missing.append("%s (%s) is not the declared %d-byte file" % (paths[role], role, size))
            continue
        out["payload"][role] = {"path": paths[role], "size": size, "sha256": sha, "inode": st.st_ino,
                                "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}
    for path in files:
        try:
            out["files"][path] = sha256_file(path)
        except (OSError, FileRefused) as exc:
            missing.append("the rendered file %s cannot be read (%s): the serve stage renders it"
                           % (path, getattr(exc, "strerror", None) or exc))
    if missing and not missing_ok:
        raise StagedError("the shape of %s is not staged completely, nothing was recorded: %s. %s"
                          % (service, "; ".join(missing), FIX.capitalize()), missing)
    return out, missing


def read_record(path):
    """The record at path read through RECORD_SHAPE; None when there is none. A record of any other shape, or one
    that is not a regular file, is a StagedError naming it."""
    try:
        with open_regular(path, what="staged record", max_bytes=RECORD_MAX_BYTES, follow=False) as f:
            text = f.read()
    except OSError as exc:  # FileRefused included: it names the path and the cause
        if exc.errno == errno.ENOENT:
            return None
        raise StagedError("the staged record %s cannot be read: %s. %s" % (path, exc, FIX.capitalize()))
    try:
        return tr.load_json(text.decode("utf-8"), "the staged record %s" % path, RECORD_SHAPE)
    except (tr.ShapeError, UnicodeDecodeError) as exc:
        raise StagedError("%s. %s" % (tr.printable(str(exc)), FIX.capitalize()))


def _write(path, record):
    d, name = open_parent(path, "staged record", reserve=30)
    with d:
        d.write_atomic(name, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8"), mode=0o644)


def differences(recorded, now):
    """What differs between a record and the host now, one line each (empty when the host matches)."""
    out = []
    if recorded["service"] != now["service"]:
        out.append("the record is of %s, this is %s" % (recorded["service"], now["service"]))
    if recorded["release"] != now["release"]:
        out.append("the release: staged %s -> %s, now %s -> %s" % (
            recorded["release"]["link"], recorded["release"]["target"], now["release"]["link"],
            now["release"]["target"] or "nothing"))
    for role in sorted(set(recorded["payload"]) | set(now["payload"])):
        was, is_ = recorded["payload"].get(role), now["payload"].get(role)
        if was is None:
            out.append("the payload's %s (%s) was not staged" % (role, is_["path"]))
        elif is_ is None:
            out.append("the payload's %s (%s) was staged, the shape no longer loads it or it is gone" % (role, was["path"]))
        elif (was["size"], was["sha256"]) != (is_["size"], is_["sha256"]):
            out.append("the payload's %s is declared differently now (size %d sha256 %s, staged %d %s)" % (
                role, is_["size"], is_["sha256"], was["size"], was["sha256"]))
        elif was != is_:
            out.append("the payload's %s (%s) is not the file the fetch verified at the stage (its path, inode, "
                       "mtime or ctime moved)" % (role, is_["path"]))
    for path in sorted(set(recorded["files"]) | set(now["files"])):
        if recorded["files"].get(path) != now["files"].get(path):
            both = path in recorded["files"] and path in now["files"]
            out.append("the rendered file %s %s" % (path, "changed since the stage" if both else "is not in the record"))
    return out


def stage(path, service, release_link, manifest, paths, files, started=None, check_mode=False, clock=utcnow):
    """Record what is staged. Returns {changed, record, missing, msg}; a record of the same shape is left as it is
    (changed False). In check mode nothing is written and what is missing is listed, not refused."""
    now, missing = observe(service, release_link, manifest, paths, files, missing_ok=check_mode)
    try:
        old = read_record(path)
    except StagedError:
        old = None  # a record of another shape is replaced by a good one
    moment = clock()
    if old is not None and dict((k, old[k]) for k in SHAPE_KEYS) == now and not missing:
        return {"changed": False, "record": old, "missing": [],
                "msg": "the staged shape of %s is recorded already (%s, staged %s): nothing to record"
                       % (service, path, old["staged_at"])}
    record = dict(now, staged_at=_stamp(moment))
    if started is not None:
        record["stage_seconds"] = round(max(0.0, moment.timestamp() - started), 1)
    if check_mode:
        return {"changed": True, "record": record, "missing": missing,
                "msg": "would record the staged shape of %s in %s%s" % (
                    service, path, (" once the stage has made: " + "; ".join(missing)) if missing else "")}
    _write(path, record)
    return {"changed": True, "record": record, "missing": [],
            "msg": "staged: %s recorded in %s (release %s, %d payload file(s), %d rendered file(s)%s)" % (
                service, path, record["release"]["target"], len(record["payload"]), len(record["files"]),
                ", the stage took %.0f s" % record["stage_seconds"] if "stage_seconds" in record else "")}


def check(path, service, release_link, manifest, paths, files):
    """The switch's refusal: the record read back and compared with the host. Returns {record, pending, msg} or
    raises StagedError naming what is missing or differs, with the fix."""
    record = read_record(path)
    if record is None:
        raise StagedError("nothing is staged for %s on this host (no record at %s), so the switch has nothing to "
                          "start and nothing was changed. %s" % (service, path, FIX.capitalize()))
    now, missing = observe(service, release_link, manifest, paths, files, missing_ok=True)
    found = missing + differences(record, now)
    if found:
        raise StagedError("the staged record %s (staged %s) does not match the host, so nothing was changed: %s. %s"
                          % (path, record["staged_at"], "; ".join(found), FIX.capitalize()), found)
    pending = "switched_at" not in record
    return {"record": record, "pending": pending,
            "msg": "staged %s matches the host (release %s, %d payload file(s), %d rendered file(s))%s" % (
                record["staged_at"], record["release"]["target"], len(record["payload"]), len(record["files"]),
                "" if pending else "; switched already at %s - a second switch restarts nothing" % record["switched_at"])}


def read(path):
    """The record as it is, without comparing it with the host (the rollback's decision: a pending staged shape is
    what the switch starts, even beside a snapshot). Returns {changed, record ({} when none), pending, msg}; a record
    of the wrong shape is a StagedError."""
    record = read_record(path)
    if record is None:
        return {"changed": False, "record": {}, "pending": False, "msg": "no staged record at %s" % path}
    pending = "switched_at" not in record
    return {"changed": False, "record": record, "pending": pending,
            "msg": "staged %s, %s" % (record["staged_at"], "not switched to yet" if pending else
                                      "switched at %s" % record["switched_at"])}


def mark_switched(path, started=None, check_mode=False, clock=utcnow):
    """After a passing gate: the record marked switched (once; changed False when there is no record or it is
    marked already). Returns {changed, record, msg}."""
    try:
        record = read_record(path)
    except StagedError as exc:
        return {"changed": False, "record": {}, "msg": "not marked: %s" % exc}
    if record is None:
        return {"changed": False, "record": {}, "msg": "no staged record at %s: nothing to mark" % path}
    if "switched_at" in record:
        return {"changed": False, "record": record, "msg": "switched already at %s" % record["switched_at"]}
    moment = clock()
    record = dict(record, switched_at=_stamp(moment))
    if started is not None:
        record["switch_seconds"] = round(max(0.0, moment.timestamp() - started), 1)
    if not check_mode:
        _write(path, record)
    return {"changed": True, "record": record,
            "msg": "switched: staged %s%s, switched %s%s" % (
                record["staged_at"], " in %.0f s" % record["stage_seconds"] if "stage_seconds" in record else "",
                record["switched_at"], " in %.0f s (command to verified endpoint)" % record["switch_seconds"]
                if "switch_seconds" in record else "")}
