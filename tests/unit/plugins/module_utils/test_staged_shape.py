# -*- coding: utf-8 -*-
"""The staged record (issue 36, item 3): the stage half records what it staged on the host, the switch half reads it
back through its shape and refuses -- by name, with the fix -- when nothing is staged or the host no longer matches;
both halves are idempotent and check mode writes nothing. Real files, links and records in a temporary directory."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import datetime
import hashlib
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import staged_shape as ss
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

BODY = b"GGUF" + os.urandom(4096)


def clock(seconds):
    return lambda: datetime.datetime(2026, 9, 21, 3, 0, 0, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


@pytest.fixture()
def host(tmp_path):
    """A staged host: a release linked as current, the target on disk, the three rendered files."""
    rel = tmp_path / "llama.cpp" / "releases" / "r1"
    (rel / "bin").mkdir(parents=True)
    os.symlink("releases/r1", str(tmp_path / "llama.cpp" / "current"))
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "t.gguf").write_bytes(BODY)
    files = []
    for name, text in (("frank-medium.env", "CTX_SIZE=327680\n"), ("serve.sh", "#!/bin/bash\n"), ("frank-medium.service", "[Unit]\n")):
        (tmp_path / name).write_text(text)
        files.append(str(tmp_path / name))
    manifest = [{"role": "target", "name": "t", "file": "t.gguf", "url": "https://h/t.gguf", "size": len(BODY),
                 "sha256": hashlib.sha256(BODY).hexdigest()}]
    return dict(root=tmp_path, path=str(tmp_path / "state" / "staged.json"), link=str(tmp_path / "llama.cpp" / "current"),
                manifest=manifest, paths={"target": str(tmp_path / "models" / "t.gguf")}, files=files)


def args(h):
    return (h["path"], "frank-medium", h["link"], h["manifest"], h["paths"], h["files"])


@pytest.fixture()
def staged(host):
    (host["root"] / "state").mkdir()
    out = ss.stage(*args(host), started=clock(0)().timestamp(), clock=clock(1500))
    assert out["changed"] and out["record"]["stage_seconds"] == 1500.0
    return host


def test_a_staged_shape_is_recorded_and_the_switch_finds_it_matching(staged):
    with open(staged["path"]) as f:
        record = json.load(f)
    assert record["release"] == {"link": staged["link"], "target": str(staged["root"] / "llama.cpp" / "releases" / "r1")}
    assert record["payload"]["target"]["sha256"] == hashlib.sha256(BODY).hexdigest()
    assert sorted(record["files"]) == sorted(staged["files"])
    out = ss.check(*args(staged))
    assert out["pending"] is True and "matches the host" in out["msg"]


def test_a_second_stage_of_the_same_shape_writes_nothing(staged):
    before = os.stat(staged["path"])
    out = ss.stage(*args(staged), started=0.0, clock=clock(9999))
    assert out["changed"] is False and "recorded already" in out["msg"]
    assert os.stat(staged["path"]).st_mtime_ns == before.st_mtime_ns and os.stat(staged["path"]).st_ino == before.st_ino


def test_the_switch_refuses_when_nothing_is_staged(host):
    with pytest.raises(ss.StagedError) as exc:
        ss.check(*args(host))
    assert "nothing is staged for frank-medium" in str(exc.value) and "--tags stage" in str(exc.value)
    assert "nothing was changed" in str(exc.value)


@pytest.mark.parametrize("change, named", [
    ("env", "the rendered file %(root)s/frank-medium.env changed since the stage"),
    ("relink", "the release: staged"),
    ("replace", "the payload's target (%(root)s/models/t.gguf) is not the file the fetch verified"),
    ("redeclare", "the payload's target is declared differently now"),
    ("gone", "cannot be read"),
])
def test_the_switch_refuses_a_host_that_no_longer_matches_and_names_what(staged, change, named):
    root = staged["root"]
    if change == "env":
        (root / "frank-medium.env").write_text("CTX_SIZE=4096\n")
    elif change == "relink":
        (root / "llama.cpp" / "releases" / "r2").mkdir()
        os.unlink(staged["link"])
        os.symlink("releases/r2", staged["link"])
    elif change == "replace":
        os.rename(str(root / "models" / "t.gguf"), str(root / "models" / "old.gguf"))
        (root / "models" / "t.gguf").write_bytes(BODY)  # same bytes, another file: its proofs are not the stage's
    elif change == "redeclare":
        staged["manifest"] = [dict(staged["manifest"][0], sha256="ab" * 32)]
    elif change == "gone":
        os.unlink(str(root / "models" / "t.gguf"))
    with pytest.raises(ss.StagedError) as exc:
        ss.check(*args(staged))
    assert named % {"root": root} in str(exc.value)
    assert "does not match the host, so nothing was changed" in str(exc.value) and "--tags stage" in str(exc.value)
    assert exc.value.differences


def test_a_stage_missing_a_part_records_nothing_and_names_it(host):
    (host["root"] / "state").mkdir()
    os.unlink(host["files"][0])
    with pytest.raises(ss.StagedError) as exc:
        ss.stage(*args(host))
    assert "the rendered file %s cannot be read" % host["files"][0] in str(exc.value)
    assert not os.path.exists(host["path"])


def test_check_mode_stage_writes_nothing_and_lists_what_the_stage_would_make(host):
    (host["root"] / "state").mkdir()
    os.unlink(host["paths"]["target"])
    out = ss.stage(*args(host), check_mode=True)
    assert out["changed"] and not os.path.exists(host["path"])
    assert any("the fetch stage downloads it" in m for m in out["missing"]) and "would record" in out["msg"]


def test_the_switch_is_marked_once_and_says_how_long_each_half_took(staged):
    out = ss.mark_switched(staged["path"], started=clock(2000)().timestamp(), clock=clock(2095))
    assert out["changed"] and out["record"]["switch_seconds"] == 95.0
    assert "in 1500 s" in out["msg"] and "in 95 s (command to verified endpoint)" in out["msg"]
    again = ss.check(*args(staged))
    assert again["pending"] is False and "a second switch restarts nothing" in again["msg"]
    assert ss.mark_switched(staged["path"], clock=clock(3000))["changed"] is False
    # the stage of the same shape leaves the switched record alone
    assert ss.stage(*args(staged))["changed"] is False


def test_read_says_whether_a_staged_shape_waits_for_the_switch(staged):
    assert ss.read(staged["path"] + ".none") == {"changed": False, "record": {}, "pending": False,
                                                 "msg": "no staged record at %s.none" % staged["path"]}
    assert ss.read(staged["path"])["pending"] is True
    ss.mark_switched(staged["path"])
    assert ss.read(staged["path"])["pending"] is False
    with open(staged["path"], "w") as f:
        f.write("[]")
    with pytest.raises(ss.StagedError):
        ss.read(staged["path"])


def test_check_mode_marks_nothing(staged):
    before = open(staged["path"]).read()
    assert ss.mark_switched(staged["path"], check_mode=True)["changed"]
    assert open(staged["path"]).read() == before
    assert ss.mark_switched(staged["path"] + ".none")["changed"] is False


def test_a_record_that_is_a_link_is_refused_by_name(staged):
    os.rename(staged["path"], staged["path"] + ".real")
    os.symlink(staged["path"] + ".real", staged["path"])
    with pytest.raises(ss.StagedError) as exc:
        ss.check(*args(staged))
    assert "the staged record %s cannot be read" % staged["path"] in str(exc.value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=hostile.json_values())
def test_a_hostile_record_is_a_named_refusal(staged, value):
    """Any JSON at all in the record: a StagedError naming the record and the fix, or (a value that happens to be
    a matching record) the normal answer - never another exception."""
    with open(staged["path"], "w") as f:
        f.write(hostile.dumps(value))
    try:
        ss.check(*args(staged))
    except ss.StagedError as exc:
        assert "staged record" in str(exc) and "--tags stage" in str(exc)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=hostile.hostile_answers({"version": 1, "service": "frank-medium",
                                      "release": {"link": "/x/current", "target": "/x/releases/r1"},
                                      "payload": {"target": {"path": "/m/t.gguf", "size": 5, "sha256": "ab" * 32,
                                                             "inode": 1, "mtime_ns": 2, "ctime_ns": 3}},
                                      "files": {"/e.env": "cd" * 32}, "staged_at": "2026-09-21T03:00:00Z"}))
def test_a_record_of_the_wrong_shape_at_any_position_is_a_named_refusal(staged, value):
    with open(staged["path"], "w") as f:
        f.write(hostile.dumps(value))
    with pytest.raises(ss.StagedError) as exc:
        ss.check(*args(staged))  # the recorded paths are not this host's: a good shape still does not match
    assert "staged record" in str(exc.value) and "--tags stage" in str(exc.value)
