"""dankfleet.llm.gguf_info, the module: `paths` reads a whole payload in one call (llm_plan's facts: which files are
there, and the headers of those that are), reporting a missing or unreadable file instead of failing; `path` keeps
its old shape (a bad file fails the task). Real GGUFs from tests/lab/gen_models.py.
"""
import gen_models
import pytest

from ansible_collections.dankfleet.llm.plugins.modules import gguf_info as module
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module


def run(capsys, **args):
    return run_module(capsys, module.main, **args)


def test_paths_reads_what_is_there_and_reports_the_rest(tmp_path, capsys):
    target = gen_models.write_model("qwen35-hybrid", tmp_path / "t.gguf", header_only=True)
    drafter = gen_models.write_model("draft-dflash", tmp_path / "d.gguf")
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03")
    paths = {"target": target["path"], "drafter": drafter["path"], "mmproj": str(tmp_path / "missing.gguf"),
             "bad": str(tmp_path / "bad.gguf"), "dir": str(tmp_path)}
    r = run(capsys, paths=paths)
    assert not r.get("failed") and not r["changed"]
    files = r["files"]
    assert sorted(files) == sorted(paths)
    # a file read is what `path` returns for it, plus where it is and that it is there
    alone = run(capsys, path=target["path"])
    for key in ("changed", "invocation", "uid", "gid", "owner", "group", "mode", "state", "size"):
        alone.pop(key, None)  # Ansible's own (the result names a path: exit_json adds its stat)
    assert files["target"] == dict(alone, exists=True)
    assert files["target"]["block_count"] == target["block_count"]
    assert files["drafter"]["architecture"] == drafter["architecture"] and files["drafter"]["exists"]
    assert files["mmproj"] == {"path": str(tmp_path / "missing.gguf"), "exists": False}
    # unreadable: the message `path` fails with, and the task does not fail
    bad = run(capsys, path=str(tmp_path / "bad.gguf"))
    assert bad["failed"]
    assert files["bad"] == {"path": str(tmp_path / "bad.gguf"), "exists": True, "error": bad["msg"]}
    assert files["dir"]["exists"] and "error" in files["dir"] and "block_count" not in files["dir"]


def test_path_or_paths_one_of_them(tmp_path, capsys):
    assert "one of the following is required: path, paths" in run(capsys)["msg"]
    r = run(capsys, path=str(tmp_path / "a"), paths={"target": str(tmp_path / "a")})
    assert r["failed"] and "mutually exclusive" in r["msg"]
