"""dankfleet.llm.gguf_fetch, the module: its `directories` option (ansible.builtin.file state=directory's work in the
fetch's own call, so the role makes one round trip per file) against a real range_http_server.

Check mode creates and changes nothing and says what it would; bad input fails before the first directory is made;
a present directory gets the mode it is given; a second run changes nothing.
"""
import grp
import hashlib
import os
import pwd

import pytest

from ansible_collections.dankfleet.llm.plugins.modules import gguf_fetch as module
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module
import range_http_server

DATA = b"GGUF" + bytes(range(256)) * 16
USER = pwd.getpwuid(os.geteuid()).pw_name
GROUP = grp.getgrgid(os.getegid()).gr_name


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "m.gguf").write_bytes(DATA)
    server, port = range_http_server.serve(str(root))
    yield server, "http://127.0.0.1:%d/m.gguf" % port
    server.close()


def run(capsys, check=False, **args):
    return run_module(capsys, module.main, check_mode=check, **args)


def args(tmp_path, url, **over):
    models = tmp_path / "models"
    directories = [
        {"path": str(models), "owner": USER, "group": GROUP, "mode": "0755"},
        {"path": str(models / "m"), "owner": USER, "group": GROUP, "mode": "0750"},
        {"path": str(models / ".trash"), "mode": "0700"},
        {"path": str(tmp_path / "log" / "deep"), "mode": "0755"},
    ]
    a = dict(url=url, dest=str(models / "m" / "m.gguf"), size=len(DATA), sha256=hashlib.sha256(DATA).hexdigest(),
             disk_margin_bytes=0, directories=directories)
    a.update(over)
    return a


def mode(path):
    return os.stat(path).st_mode & 0o7777


def test_check_mode_reports_the_directories_and_creates_nothing(tmp_path, capsys, mirror):
    server, url = mirror
    before = len(server.requests)
    r = run(capsys, check=True, **args(tmp_path, url))
    assert not r.get("failed"), r
    assert r["changed"] and r["status"] == "would_download"
    assert [d["state"] for d in r["directories"]] == ["would_create"] * 4
    assert os.listdir(tmp_path) == []
    assert len(server.requests) == before


def test_directories_are_created_with_their_mode_then_the_file_fetched(tmp_path, capsys, mirror):
    _, url = mirror
    r = run(capsys, **args(tmp_path, url))
    assert not r.get("failed"), r
    assert r["status"] == "downloaded" and r["changed"]
    assert [d["state"] for d in r["directories"]] == ["created"] * 4
    models = tmp_path / "models"
    assert (mode(models), mode(models / "m"), mode(models / ".trash")) == (0o755, 0o750, 0o700)
    # a missing parent is created with the directory's own mode, as ansible.builtin.file does
    assert mode(tmp_path / "log") == 0o755 and mode(tmp_path / "log" / "deep") == 0o755
    assert (models / "m" / "m.gguf").read_bytes() == DATA
    # the second run: every directory present, the file verified by its stamp, nothing changed
    again = run(capsys, **args(tmp_path, url))
    assert not again["changed"] and again["status"] == "verified"
    assert [d["state"] for d in again["directories"]] == ["present"] * 4


def test_a_directory_with_another_mode_is_corrected_and_check_mode_only_says_so(tmp_path, capsys, mirror):
    _, url = mirror
    run(capsys, **args(tmp_path, url))
    trash = tmp_path / "models" / ".trash"
    os.chmod(trash, 0o755)
    r = run(capsys, check=True, **args(tmp_path, url))
    assert r["changed"] and r["directories"][2] == {"path": str(trash), "state": "would_update", "changed": True}
    assert mode(trash) == 0o755
    r = run(capsys, **args(tmp_path, url))
    assert r["changed"] and r["status"] == "verified" and r["directories"][2]["state"] == "updated"
    assert mode(trash) == 0o700


def test_bad_input_fails_before_a_directory_is_made(tmp_path, capsys, mirror):
    _, url = mirror
    r = run(capsys, **args(tmp_path, "ftp://127.0.0.1/m.gguf"))
    assert r["failed"] and "url must be http:// or https://" in r["msg"]
    r = run(capsys, **args(tmp_path, url, sha256="abc"))
    assert r["failed"] and "64 hex digits" in r["msg"]
    assert os.listdir(tmp_path) == []


def test_a_file_where_a_directory_belongs_fails_before_anything_is_made(tmp_path, capsys, mirror):
    _, url = mirror
    (tmp_path / "log").write_text("not a directory")
    a = args(tmp_path, url)
    a["directories"][3]["path"] = str(tmp_path / "log")
    r = run(capsys, **a)
    assert r["failed"] and r["msg"] == ("directories: %s exists and is not a directory: move it aside or point the "
                                        "directory elsewhere. Nothing was changed" % (tmp_path / "log"))
    assert sorted(os.listdir(tmp_path)) == ["log"]
