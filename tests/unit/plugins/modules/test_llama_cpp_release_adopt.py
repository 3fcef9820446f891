"""dankfleet.llm.llama_cpp_release, action adopt: a tree built by hand (the runbook's fb27a525, its private ROCm
toolchain bundled next to the binary, RUNPATH $ORIGIN/../lib) is proved exactly as a build's own release is
(verify()), then registered under the prefix, copied or linked; the tree itself is never changed.

The trees are real ELF: the synthetic toolchain's build of llama-server (cc, RUNPATH $ORIGIN/../lib, a shared
library chain down to the toolchain's libraries) bundled the way the runbook's script bundles it. Nothing about
the proofs is faked: readelf, ldd and `llama-server --version` run on them.
"""
import json
import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.host import llama_cpp_release as lcr
from ansible_collections.dankfleet.llm.plugins.modules import llama_cpp_release as module
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module, snapshot
import synthetic_toolchain

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
DEFAULTS = yaml.safe_load(open(os.path.join(REPO, "roles/llama_cpp_build/defaults/main.yml")).read())
pytestmark = pytest.mark.skipif(not shutil.which("cc") or not shutil.which("readelf") or not shutil.which("ldd"),
                                reason="needs a C compiler, binutils and ldd")
REF = "fb27a525"


def hand_built(root, commit=REF, build_number=7001, runpath=True):
    """What scripts/build-llama-rdna4.sh leaves: bin/llama-server & llama-bench, lib/ with libggml-hip.so, the
    private toolchain's libraries and the device libraries at their declared depth. Returns (tree, build dir)."""
    os.makedirs(root)
    tc = synthetic_toolchain.make_toolchain(os.path.join(root, "therock"))
    stub = synthetic_toolchain.stub_cmake(os.path.join(root, "cmake"))
    build = os.path.join(root, "build")
    env = {"PATH": "/usr/bin:/bin", "ROCM_PATH": tc}
    flags = ["-DLLAMA_BUILD_NUMBER=%d" % build_number, "-DGPU_TARGETS=gfx1201", "-DSTUB_COMMIT=%s" % commit]
    subprocess.check_call([stub, "-S", root, "-B", build] + flags + ([] if runpath else ["-DSTUB_NO_RUNPATH=ON"]),
                          env=env, stdout=subprocess.DEVNULL)
    subprocess.check_call([stub, "--build", build, "-j", "1", "--target", "llama-server", "llama-bench"], env=env,
                          stdout=subprocess.DEVNULL)
    tree = os.path.join(root, "llama.cpp-rdna4")
    lcr.bundle(build, tree, ["llama-server", "llama-bench"], "hip", tc, DEFAULTS["llama_cpp_build_hip_device_libs"],
               ["gfx1201"], extra_globs=["libamd_comgr.so*"])
    return tree, build


@pytest.fixture(scope="module")
def good_tree(tmp_path_factory):
    return hand_built(str(tmp_path_factory.mktemp("hand") / "h"))


@pytest.fixture
def tree(good_tree, tmp_path):
    """A private copy of the good tree (mtimes kept), so a test may break it."""
    dest = str(tmp_path / "home/dank/llama.cpp-rdna4")
    shutil.copytree(good_tree[0], dest, symlinks=True)
    return dest


def spec(tmp_path, **over):
    base = {
        "prefix": str(tmp_path / "opt/llama.cpp"), "scratch_dir": str(tmp_path / "scratch"), "backend": "hip",
        "source": {"type": "git", "repo": DEFAULTS["llama_cpp_build_git_repo"], "ref": REF},
        "targets": ["llama-server"], "gfx_targets": ["gfx1201"], "host_gfx_targets": ["gfx1201"],
        "device_libs": DEFAULTS["llama_cpp_build_hip_device_libs"], "system_libs": DEFAULTS["llama_cpp_build_system_libs"],
    }
    base.update(over)
    return base


def adopt(capsys, tmp_path, tree_dir, check_mode=False, mode="copy", **over):
    return run_module(capsys, module.main, check_mode=check_mode, action="adopt", spec=spec(tmp_path, **over),
                      adopt_from=tree_dir, adopt_mode=mode)


def run_version(binary):
    proc = subprocess.run([binary, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          env={"PATH": "/usr/bin:/bin"}, universal_newlines=True)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def test_check_mode_says_what_would_be_adopted_and_changes_nothing(tmp_path, capsys, tree):
    before = snapshot(str(tmp_path))
    result = adopt(capsys, tmp_path, tree, check_mode=True)
    assert not result.get("failed"), result["msg"]
    assert result["changed"] is True and not result["adopt"]["up_to_date"]
    assert result["msg"].startswith("would adopt %s (version: 0.6.0-dev (build 7001, commit %s), " % (tree, REF))
    assert "by copying as %s/opt/llama.cpp/releases/fb27a525-hip-adopted-" % tmp_path in result["msg"]
    assert result["msg"].endswith("(current would move from nothing)")
    assert result["verify"]["problems"] == []
    assert snapshot(str(tmp_path)) == before  # no prefix, no staging dir, the tree as it was


@pytest.mark.parametrize("mode", ["copy", "link"])
def test_a_hand_built_tree_is_adopted_without_a_rebuild_and_a_second_run_changes_nothing(tmp_path, capsys, tree, mode):
    original = snapshot(tree)
    result = adopt(capsys, tmp_path, tree, mode=mode)
    assert not result.get("failed"), result["msg"]
    release = result["adopt"]["release_dir"]
    assert result["changed"] is True and result["msg"] == "adopted %s (%s) as %s" % (tree, mode, release)
    assert os.path.basename(release).startswith("fb27a525-hip-adopted-")
    assert result["adopt"]["link_target"] == "releases/" + os.path.basename(release)
    # the original stays as it was: read, never moved or written
    assert snapshot(tree) == original
    # the release is the tree's bin/ and lib/, copied (links kept as links) or linked
    for part in ("bin", "lib"):
        path = os.path.join(release, part)
        if mode == "link":
            assert os.path.islink(path) and os.readlink(path) == os.path.join(tree, part)
        else:
            assert os.path.isdir(path) and not os.path.islink(path)
    if mode == "copy":
        assert os.path.islink(os.path.join(release, "lib/libamd_comgr.so.3"))
        assert os.path.isfile(os.path.join(release, "lib/rocblas/library/TensileLibrary.dat"))
    # the stamp says it was adopted, from where, and what was proved
    stamp = json.loads(open(os.path.join(release, "BUILD_STAMP.json")).read())
    assert stamp["inputs"]["adopted"]["from"] == tree and stamp["inputs"]["adopted"]["mode"] == mode
    assert stamp["outputs"]["build_number"] == 7001 and stamp["outputs"]["commit"] == REF
    assert stamp["outputs"]["adopted"]["from"] == tree
    assert "build 7001, commit fb27a525" in stamp["outputs"]["proofs"]["version"]
    assert stamp["outputs"]["proofs"]["runpath"] == "$ORIGIN/../lib"
    assert lcr.read_stamp(os.path.join(release, "BUILD_STAMP.json"))["inputs"] == stamp["inputs"]
    # the release runs on its own, and passes verify() as a build's release would
    assert "build 7001, commit fb27a525" in run_version(os.path.join(release, "bin/llama-server"))
    assert lcr.verify(release, **module.adopt_verify_args(module_spec(tmp_path)))["problems"] == []
    # nothing of the build's place is touched: current is the role's to move, the scratch dir is not made
    assert not os.path.lexists(os.path.join(str(tmp_path), "opt/llama.cpp/current"))
    assert not os.path.lexists(os.path.join(str(tmp_path), "opt/llama.cpp/.staging"))
    assert not os.path.lexists(str(tmp_path / "scratch"))
    # idempotent: a second run finds it, verifies it again and changes nothing
    on_disk = snapshot(str(tmp_path))
    again = adopt(capsys, tmp_path, tree, mode=mode)
    assert again["changed"] is False and not again.get("failed"), again["msg"]
    assert again["adopt"]["up_to_date"] and again["adopt"]["release_dir"] == release
    assert again["msg"] == "up to date: %s adopted (%s) as %s (current would move from nothing)" % (tree, mode, release)
    assert again["verify"]["problems"] == [] and snapshot(str(tmp_path)) == on_disk
    checked = adopt(capsys, tmp_path, tree, check_mode=True, mode=mode)
    assert checked["changed"] is False and snapshot(str(tmp_path)) == on_disk


def module_spec(tmp_path):
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    result = ArgumentSpecValidator({"spec": dict(type="dict", options=module.SPEC_OPTIONS)}).validate(
        {"spec": spec(tmp_path)})
    assert not result.error_messages, result.error_messages
    return result.validated_parameters["spec"]


def test_copy_and_link_are_two_releases_and_a_tree_rebuilt_in_place_is_another_one(tmp_path, capsys, tree):
    copied = adopt(capsys, tmp_path, tree, mode="copy")["adopt"]["release_dir"]
    linked = adopt(capsys, tmp_path, tree, mode="link")["adopt"]["release_dir"]
    assert copied != linked
    os.utime(os.path.join(tree, "bin/llama-server"), ns=(1, 1))  # rebuilt (or touched) in place
    relinked = adopt(capsys, tmp_path, tree, mode="link")
    assert relinked["changed"] is True and relinked["adopt"]["release_dir"] not in (copied, linked)


def break_flattened(tree):
    """The runbook's trap: `cp -r SRC DST/` with a missing DST, so rocblas/library's files sit in rocblas/."""
    flat = os.path.join(tree, "lib/rocblas")
    library = os.path.join(flat, "library")
    for name in os.listdir(library):
        os.rename(os.path.join(library, name), os.path.join(flat, name))
    os.rmdir(library)
    return ["%s/lib/rocblas/library/TensileLibrary.dat is missing but %s/lib/rocblas/TensileLibrary.dat exists: the "
            "device libraries were copied one level too shallow" % (tree, tree), "rocBLAS error: Cannot read"]


def break_missing_library(tree):
    os.remove(os.path.join(tree, "lib/librocblas.so.5"))
    return ["needs librocblas.so.5, which is not in %s/lib" % tree]


def break_runpath(tree):
    """llama-server relinked by hand with the host's ROCm ahead of the bundle: a wrong RUNPATH."""
    build = os.path.join(os.path.dirname(tree), "build")
    server = os.path.join(tree, "bin/llama-server")
    os.remove(server)
    subprocess.check_call(["cc", "-o", server, os.path.join(build, "main.c"), "-L" + os.path.join(tree, "lib"),
                           "-l:libggml-hip.so", "-Wl,-rpath-link," + os.path.join(tree, "lib"),
                           "-Wl,-rpath-link," + os.path.join(tree, "lib/rocm_sysdeps/lib"),
                           "-Wl,--enable-new-dtags", "-Wl,-rpath,/opt/rocm/lib:$ORIGIN/../lib"])
    return ["%s has RUNPATH /opt/rocm/lib:$ORIGIN/../lib instead of RUNPATH $ORIGIN/../lib" % server]


def break_commit(tree):
    """Another commit than the pinned one (a tree built from another ref)."""
    build = os.path.join(os.path.dirname(tree), "build")
    main = open(os.path.join(build, "main.c")).read().replace("commit %s" % REF, "commit deadbeef0")
    src = os.path.join(os.path.dirname(tree), "other.c")
    with open(src, "w") as handle:
        handle.write(main)
    server = os.path.join(tree, "bin/llama-server")
    os.remove(server)
    subprocess.check_call(["cc", "-o", server, src, "-L" + os.path.join(tree, "lib"), "-l:libggml-hip.so",
                           "-Wl,-rpath-link," + os.path.join(tree, "lib"),
                           "-Wl,-rpath-link," + os.path.join(tree, "lib/rocm_sysdeps/lib"),
                           "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../lib"])
    os.remove(src)
    return ["%s --version reports commit deadbeef0, expected %s" % (server, REF)]


@pytest.fixture
def breakable(good_tree, tmp_path):
    """A copy laid out as <root>/llama.cpp-rdna4 beside <root>/build, which the RUNPATH/commit breakers relink from."""
    root = tmp_path / "hand"
    root.mkdir()
    shutil.copytree(good_tree[1], str(root / "build"), symlinks=True)
    dest = str(root / "llama.cpp-rdna4")
    shutil.copytree(good_tree[0], dest, symlinks=True)
    return dest


@pytest.mark.parametrize("mode", ["copy", "link"])
@pytest.mark.parametrize("breaker", [break_flattened, break_missing_library, break_runpath, break_commit])
def test_a_tree_that_fails_a_proof_is_refused_by_name_and_nothing_changes(tmp_path, capsys, breakable, breaker, mode):
    expected = breaker(breakable)
    before = snapshot(str(tmp_path))
    for check_mode in (True, False):
        result = adopt(capsys, tmp_path, breakable, check_mode=check_mode, mode=mode)
        assert result["failed"] and result["msg"].startswith("%s cannot be adopted, nothing was changed:\n- " % breakable)
        for words in expected:
            assert words in result["msg"], result["msg"]
        # what a rebuild would need
        assert ("To rebuild it instead, set llama_cpp_build_adopt_from: '' and give the build its inputs: the pinned "
                "ref (llama_cpp_build_git_ref) and the private ROCm toolchain (llama_cpp_build_toolchain_src and "
                "llama_cpp_build_toolchain_sha256)") in result["msg"]
        assert snapshot(str(tmp_path)) == before


def test_a_path_that_is_not_a_tree_is_refused(tmp_path, capsys):
    result = adopt(capsys, tmp_path, str(tmp_path / "nope"))
    assert result["failed"] and result["msg"].startswith("llama_cpp_build_adopt_from %s is not a directory" % (
        tmp_path / "nope"))
    assert not (tmp_path / "opt").exists()


def test_a_release_of_the_prefix_is_not_adopted_again(tmp_path, capsys, tree):
    release = adopt(capsys, tmp_path, tree)["adopt"]["release_dir"]
    result = adopt(capsys, tmp_path, release)
    assert result["failed"] and "is (or holds) a release under %s/opt/llama.cpp/releases already" % tmp_path in result["msg"]


def test_a_release_dir_of_that_name_not_stamped_by_this_adoption_is_never_overwritten(tmp_path, capsys, tree):
    name = adopt(capsys, tmp_path, tree, check_mode=True)["adopt"]["name"]
    squatter = tmp_path / "opt/llama.cpp/releases" / name
    (squatter / "bin").mkdir(parents=True)
    result = adopt(capsys, tmp_path, tree)
    assert result["failed"] and "%s exists but its BUILD_STAMP.json does not say it adopted" % squatter in result["msg"]
    assert os.listdir(str(squatter)) == ["bin"]


def test_adopt_needs_a_tree(tmp_path, capsys):
    result = run_module(capsys, module.main, action="adopt", spec=spec(tmp_path))
    assert result["failed"] and result["msg"].startswith("action adopt needs adopt_from")
