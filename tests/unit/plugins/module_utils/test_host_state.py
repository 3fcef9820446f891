"""host_state's readers against real files, users, sockets and `ss`; is_current's answers."""
import grp
import hashlib
import os
import pwd
import shutil

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host import host_state as hs
from ansible_collections.dankfleet.llm.tests.unit.http_testlib import listening_ss


def test_file_dir_link_absent(tmp_path):
    f = tmp_path / "env"
    f.write_text("A=1\n")
    os.chmod(f, 0o640)
    (tmp_path / "d").mkdir(mode=0o750)
    os.chmod(tmp_path / "d", 0o750)
    os.symlink("env", tmp_path / "link")
    os.symlink("nowhere", tmp_path / "dangling")
    me = pwd.getpwuid(os.getuid()).pw_name
    state = hs.path_state(str(f))
    assert state["type"] == "file" and state["mode"] == "0640" and state["owner"] == me
    assert state["group"] == grp.getgrgid(os.getgid()).gr_name and state["size"] == 4
    assert state["checksum"] == hashlib.sha1(b"A=1\n").hexdigest()
    assert hs.path_state(str(tmp_path / "d"))["type"] == "directory"
    assert hs.path_state(str(tmp_path / "d"))["mode"] == "0750"
    assert hs.path_state(str(tmp_path / "d"))["checksum"] is None
    link = hs.path_state(str(tmp_path / "link"))
    assert link["type"] == "link" and link["link_target"] == "env" and link["target_exists"] is True
    dangling = hs.path_state(str(tmp_path / "dangling"))
    assert dangling["exists"] is True and dangling["target_exists"] is False
    assert hs.path_state(str(tmp_path / "absent")) == {"exists": False, "type": "absent"}


def test_checksum_skipped_above_the_limit(tmp_path):
    f = tmp_path / "big"
    f.write_bytes(b"x" * 100)
    assert hs.path_state(str(f), max_bytes=99)["checksum"] is None
    assert hs.path_state(str(f), max_bytes=100)["checksum"] == hashlib.sha1(b"x" * 100).hexdigest()


def test_relative_path_refused():
    with pytest.raises(hs.HostStateError, match="not absolute"):
        hs.path_state("etc/passwd")


def test_users_and_groups():
    root = hs.user_state("root")
    assert root["exists"] and root["uid"] == 0 and root["group"] == grp.getgrgid(0).gr_name
    assert root["group"] in root["groups"] and root["home"] == pwd.getpwnam("root").pw_dir
    assert hs.user_state("no-such-user-dankfleet") == {"exists": False}
    assert hs.group_state(grp.getgrgid(0).gr_name)["gid"] == 0
    assert hs.group_state("no-such-group-dankfleet") == {"exists": False}


def test_user_groups_include_supplementary():
    # every group that lists a member must show up in that member's groups
    for g in grp.getgrall():
        for member in g.gr_mem:
            state = hs.user_state(member)
            if state["exists"]:
                assert g.gr_name in state["groups"]
                return
    pytest.skip("no group on this host lists a member")


@pytest.mark.skipif(not shutil.which("ss"), reason="iproute2 ss is not installed")
def test_ports_from_real_ss():
    with listening_ss() as (port, out):
        state = hs.parse_ports(out, [port, 1])
    assert state[str(port)]["listening"] is True
    assert state["1"] == {"listening": False, "holders": [], "lines": []}
    if os.geteuid() == 0:  # ss names the process only for root (or the socket's owner)
        assert os.getpid() in [h["pid"] for h in state[str(port)]["holders"]]


def test_parse_unit():
    text = ("LoadState=loaded\nActiveState=active\nSubState=running\nUnitFileState=enabled\nMainPID=42\n"
            "NRestarts=0\nFragmentPath=/etc/systemd/system/frank-medium.service\n")
    unit = hs.parse_unit(text)
    assert unit["exists"] and unit["MainPID"] == 42 and unit["UnitFileState"] == "enabled"
    missing = hs.parse_unit("LoadState=not-found\nActiveState=inactive\nMainPID=0\n")
    assert missing["exists"] is False and missing["MainPID"] == 0
    assert hs.parse_unit("")["exists"] is False


def test_unit_specs():
    assert hs.unit_spec("a.service") == ("a.service", "a.service", "system", None)
    assert hs.unit_spec({"name": "b.service", "scope": "user", "user": "dank"})[0] == "b.service@dank"
    with pytest.raises(hs.HostStateError, match="no user"):
        hs.unit_spec({"name": "b.service", "scope": "user"})
    with pytest.raises(hs.HostStateError, match="scope"):
        hs.unit_spec({"name": "b.service", "scope": "global"})
    cmd = hs.unit_command("b.service", "user", "dank", 1000)
    assert cmd[:3] == ["runuser", "-u", "dank"] and "XDG_RUNTIME_DIR=/run/user/1000" in cmd and cmd[-1] == "b.service"


def test_commands(tmp_path):
    assert hs.command_state("sh") == shutil.which("sh")
    assert hs.command_state("no-such-command-dankfleet") is None
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\n")
    assert hs.command_state(str(script)) is None
    os.chmod(script, 0o755)
    assert hs.command_state(str(script)) == str(script)


def test_is_current(tmp_path):
    f = tmp_path / "unit"
    f.write_text("[Unit]\n")
    os.chmod(f, 0o644)
    entry = hs.path_state(str(f))
    me = entry["owner"]
    assert hs.is_current(entry, content="[Unit]\n", mode="0644", owner=me, group=entry["group"])
    assert hs.is_current(entry, content="[Unit]\n", mode=0o644, owner=str(entry["uid"]))
    assert not hs.is_current(entry, content="[Unit]\nX=1\n")
    assert not hs.is_current(entry, mode="0640")
    assert not hs.is_current(entry, owner="no-such-owner")
    assert not hs.is_current(entry, group="no-such-group")
    assert not hs.is_current(entry, state="directory")
    assert hs.is_current(entry, checksum=hashlib.sha1(b"[Unit]\n").hexdigest())
    assert not hs.is_current({"exists": False, "type": "absent"}, state="directory")
    assert not hs.is_current(None) and not hs.is_current({})
    os.symlink("unit", tmp_path / "l")
    link = hs.path_state(str(tmp_path / "l"))
    assert hs.is_current(link, state="link", src="unit") and not hs.is_current(link, state="link", src="other")
    with pytest.raises(hs.HostStateError, match="state"):
        hs.is_current(entry, state="hard")
