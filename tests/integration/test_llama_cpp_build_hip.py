"""The llama_cpp_build role's hip path, run by Ansible against this host in temp dirs.

No ROCm toolchain can be fetched here, so the role runs against a synthetic one
with the real directory shapes (tests/lab/synthetic_toolchain.py: real ELF
libraries with true SONAME/NEEDED/RUNPATH, rocBLAS and hipBLASLt device-library
trees) and a cmake stand-in that records its argv and environment and links
llama-server & co. against that toolchain. Everything else is the role itself:
preflight, toolchain unpack, environment scrubbing, bundling, stamp, staging and
rename, `current`, verification, check mode, and every bad input.

The playbook is launched with LD_LIBRARY_PATH, ROCM_PATH and a PATH pointing at
/opt/rocm, so the scrubbing is tested against a hostile invoking shell.
"""
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

import synthetic_toolchain

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not shutil.which("cc") or not shutil.which("readelf"),
                                reason="needs a C compiler and binutils")

PLAYBOOK = """
- name: llama_cpp_build against this host
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: dankfleet.llm.llama_cpp_build
"""
RUNBOOK_FAILURE = "die on the first request with 'rocBLAS error: Cannot read "


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """Synthetic toolchain tarball, source archive and cmake stand-in, made once."""
    root = tmp_path_factory.mktemp("hip-lab")
    tree = synthetic_toolchain.make_toolchain(str(root / "toolchain"))
    tc_sha = synthetic_toolchain.make_tarball(tree, str(root / "toolchain.tar.gz"))
    src_sha = synthetic_toolchain.make_source_archive(str(root / "src.tar.gz"))
    synthetic_toolchain.stub_cmake(str(root / "cmake"))
    (root / "play.yml").write_text(PLAYBOOK)
    repo = make_git_repo(root / "llama.cpp")
    return {"root": root, "tc_sha": tc_sha, "src_sha": src_sha, "repo": repo}


def git(repo, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@localhost", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@localhost", GIT_CONFIG_NOSYSTEM="1", HOME=str(repo))
    return subprocess.run(["git", "-C", str(repo)] + list(args), env=env, check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout.strip()


def make_git_repo(path):
    """Three commits (so the build number is 3), and a branch whose NAME looks like a commit."""
    path.mkdir()
    git(path, "init", "-q", "-b", "master")
    for i in range(3):
        (path / "CMakeLists.txt").write_text("project(synthetic-llama) # %d\n" % i)
        git(path, "add", "-A")
        git(path, "commit", "-qm", "commit %d" % i)
    first = git(path, "rev-list", "--max-parents=0", "HEAD")
    assert not first.startswith("deadbeef")
    git(path, "branch", "deadbeef", first)
    return {"path": path, "head": git(path, "rev-parse", "HEAD")}


def role_vars(lab, prefix, **over):
    root = lab["root"]
    values = {
        "llama_cpp_build_prefix": str(prefix),
        "llama_cpp_build_scratch_dir": str(prefix) + "-scratch",
        "llama_cpp_build_user": "root",
        "llama_cpp_build_user_create": False,
        "llama_cpp_build_as_user": False,
        "llama_cpp_build_keep_scratch": True,
        "llama_cpp_build_source_type": "archive",
        "llama_cpp_build_archive_src": str(root / "src.tar.gz"),
        "llama_cpp_build_archive_sha256": lab["src_sha"],
        "llama_cpp_build_archive_subdir": "fake-llama.cpp-b11434/llama.cpp",
        "llama_cpp_build_number": 11434,
        "llama_cpp_build_backend": "hip",
        "llama_cpp_build_host_gfx_targets": ["gfx1201"],
        "llama_cpp_build_toolchain_src": str(root / "toolchain.tar.gz"),
        "llama_cpp_build_toolchain_sha256": lab["tc_sha"],
        "llama_cpp_build_toolchain_clang": "bin/clang",
        "llama_cpp_build_cmake": str(root / "cmake"),
        "llama_cpp_build_ccache": False,
        "llama_cpp_build_gpu_present": True,
        "llama_cpp_build_expected_devices": 1,
        "llama_cpp_build_jobs": 1,
    }
    values.update(over)
    return values


class Run:
    def __init__(self, proc):
        self.rc = proc.returncode
        self.out = proc.stdout
        # messages are folded by the yaml result format; compare with blanks collapsed
        self.text = " ".join(proc.stdout.split())
        recap = re.search(r"localhost\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", self.out)
        self.ok, self.changed, self.failed = (int(g) for g in recap.groups()) if recap else (0, 0, 1)

    def __repr__(self):
        return self.out[-6000:]


def play(lab, prefix, check=False, **over):
    vars_file = Path(str(prefix) + "-vars.yml")
    vars_file.write_text(yaml.safe_dump(role_vars(lab, prefix, **over)))
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / "collections"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
        # a hostile shell: none of this may reach the build
        "LD_LIBRARY_PATH": "/opt/rocm/lib:/opt/rocm-6.3.3/lib",
        "ROCM_PATH": "/opt/rocm",
        "HIP_PATH": "/opt/rocm",
        "PATH": "/opt/rocm/bin:" + env.get("PATH", "/usr/bin:/bin"),
    })
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
           str(lab["root"] / "play.yml"), "-e", "@" + str(vars_file),
           "-e", "ansible_python_interpreter=" + sys.executable]
    if check:
        cmd.append("--check")
    return Run(subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=600))


def releases(prefix):
    path = Path(prefix) / "releases"
    return sorted(os.listdir(path)) if path.is_dir() else []


def cmake_calls(prefix):
    calls = []
    for log in Path(str(prefix) + "-scratch").glob("build-*/cmake-calls.jsonl"):
        calls += [json.loads(line) for line in log.read_text().splitlines()]
    return calls


@pytest.fixture(scope="module")
def built(lab, tmp_path_factory):
    """One good hip release, built by the role; tests copy it before changing anything."""
    prefix = tmp_path_factory.mktemp("built") / "opt-llama"
    dry = play(lab, prefix, check=True)
    left_behind = [str(p) for p in (prefix, Path(str(prefix) + "-scratch")) if p.exists()]
    first = play(lab, prefix)
    return {"prefix": prefix, "dry": dry, "left_behind": left_behind, "first": first}


def copy_of(built, tmp_path):
    prefix = tmp_path / "opt-llama"
    shutil.copytree(str(built["prefix"]), str(prefix), symlinks=True)
    return prefix


def current_of(prefix):
    return os.readlink(str(Path(prefix) / "current"))


# --------------------------------------------------------------------------- the good path

def test_dry_run_first_reports_and_touches_nothing(built):
    dry = built["dry"]
    assert dry.rc == 0, dry
    assert "would build b11434 for hip into %s/releases/b11434-hip-" % built["prefix"] in dry.text
    assert built["left_behind"] == []  # no prefix, no scratch dir, no toolchain
    assert "Build | compile" in dry.out  # listed, skipped: nothing compiled in a dry run


def test_first_run_builds_bundles_and_links(lab, built):
    first, prefix = built["first"], Path(built["prefix"])
    assert first.rc == 0 and first.failed == 0, first
    (name,) = releases(prefix)
    assert re.fullmatch(r"b11434-hip-[0-9a-f]{12}", name)
    assert current_of(prefix) == "releases/" + name
    rel = prefix / "releases" / name
    for path in ("bin/llama-server", "lib/libggml-hip.so", "lib/librocblas.so.5", "lib/libhipblas.so.3",
                 "lib/libamdhip64.so.7", "lib/rocm_sysdeps/lib/librocm_sysdeps_numa.so.1", "lib/libamd_comgr.so.3",
                 "lib/rocblas/library/TensileLibrary.dat", "lib/hipblaslt/library/gfx1201/TensileLibrary_gfx1201.dat",
                 "build.log", "BUILD_STAMP.json"):
        assert (rel / path).exists(), path
    assert not (rel / "lib/rocblas/library/TensileLibrary_lazy_gfx1100.dat").exists()
    assert not (prefix / ".staging").exists()
    assert "verified %s: version: 0.6.0-dev (build 11434, commit unknown); devices ROCm0" % rel in first.text
    stamp = json.loads((rel / "BUILD_STAMP.json").read_text())
    assert stamp["inputs"]["toolchain_sha256"] == lab["tc_sha"] and stamp["inputs"]["backend"] == "hip"
    assert stamp["outputs"]["build_number"] == 11434 and stamp["outputs"]["user"] == "root"


def test_toolchain_unpacked_under_the_prefix_and_used_alone(lab, built):
    prefix = Path(built["prefix"])
    root = prefix / "toolchains" / lab["tc_sha"][:16]
    assert (root / "lib/rocblas/library/TensileLibrary.dat").is_file()
    assert (root / ".dankfleet-toolchain-sha256").read_text().strip() == lab["tc_sha"]
    configure, build = cmake_calls(prefix)[:2]
    for call in (configure, build):
        env = call["env"]
        assert "LD_LIBRARY_PATH" not in env
        assert not [k for k, v in env.items() if "/opt/rocm" in v], env
        assert env["ROCM_PATH"] == env["HIP_PATH"] == env["CMAKE_PREFIX_PATH"] == str(root)
        assert env["HIPCXX"] == str(root / "bin/clang")
        assert env["PATH"].startswith(str(root / "bin") + ":")
    argv = configure["argv"]
    for flag in ("-DGGML_HIP=ON", "-DGPU_TARGETS=gfx1201", "-DAMDGPU_TARGETS=gfx1201", "-DLLAMA_USE_PREBUILT_UI=OFF",
                 "-DLLAMA_BUILD_NUMBER=11434", "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib",
                 "-DCMAKE_HIP_COMPILER=%s" % (root / "bin/clang"), "-DCMAKE_PREFIX_PATH=%s" % root):
        assert flag in argv, flag
    assert build["argv"][-5:] == ["--target", "llama-server", "llama-bench", "llama-fit-params", "llama-cli"]


def test_second_run_changes_nothing_and_runs_no_cmake(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    shutil.copytree(str(built["prefix"]) + "-scratch", str(prefix) + "-scratch", symlinks=True)
    calls = len(cmake_calls(prefix))
    again = play(lab, prefix)
    assert again.rc == 0 and again.changed == 0, again
    assert "up to date: b11434 for hip" in again.out
    assert len(cmake_calls(prefix)) == calls
    dry = play(lab, prefix, check=True)
    assert dry.rc == 0 and dry.changed == 0 and "up to date: b11434 for hip" in dry.out, dry


def test_changed_inputs_build_a_new_release_and_keep_the_old(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    (old,) = releases(prefix)
    dry = play(lab, prefix, check=True, llama_cpp_build_cmake_extra_flags={"GGML_HIP_ROCWMMA_FATTN": "ON"})
    assert dry.rc == 0 and "would build b11434 for hip" in dry.out and releases(prefix) == [old], dry
    run = play(lab, prefix, llama_cpp_build_cmake_extra_flags={"GGML_HIP_ROCWMMA_FATTN": "ON"})
    assert run.rc == 0, run
    new = [r for r in releases(prefix) if r != old]
    assert len(new) == 1 and current_of(prefix) == "releases/" + new[0]
    # rollback is a link move: the old inputs find their release, nothing is built
    calls = len(cmake_calls(prefix))
    back = play(lab, prefix)
    assert back.rc == 0 and back.changed == 1 and current_of(prefix) == "releases/" + old, back
    assert len(cmake_calls(prefix)) == calls


# --------------------------------------------------------------------------- bad input: clear failure, nothing changed

def assert_untouched(built, prefix):
    assert releases(prefix) == releases(built["prefix"])
    assert current_of(prefix) == current_of(built["prefix"])
    assert not (Path(prefix) / ".staging").exists()


def test_wrong_archive_checksum(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    run = play(lab, prefix, llama_cpp_build_archive_sha256="0" * 64)
    assert run.rc != 0
    assert "has sha256 %s but llama_cpp_build_archive_sha256 declares %s" % (lab["src_sha"], "0" * 64) in run.text
    assert "nothing was built" in run.text
    assert_untouched(built, prefix)


def test_unknown_backend(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    run = play(lab, prefix, llama_cpp_build_backend="rocm")
    assert run.rc != 0
    assert re.search(r"llama_cpp_build_backend.*must be one of: hip, cuda, cpu", run.text), run
    assert_untouched(built, prefix)


def test_gfx_target_not_on_this_host(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    run = play(lab, prefix, llama_cpp_build_gfx_targets=["gfx1200"])
    assert run.rc != 0
    text = run.text
    assert "gfx1200 not on this host" in text and "segfaults on these cards" in text, run
    assert "llama_cpp_build_allow_foreign_targets: true" in text
    assert_untouched(built, prefix)


def test_missing_toolchain(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    # another toolchain than the one already unpacked, and its tarball is not there
    run = play(lab, prefix, llama_cpp_build_toolchain_src=str(tmp_path / "rocm-7.14.tar.gz"),
               llama_cpp_build_toolchain_sha256="2" * 64)
    assert run.rc != 0
    assert "the private ROCm toolchain %s is missing on the host" % (tmp_path / "rocm-7.14.tar.gz") in \
        run.text, run
    assert_untouched(built, prefix)
    unset = play(lab, prefix, llama_cpp_build_toolchain_src="")
    assert unset.rc != 0 and "backend hip needs the private ROCm toolchain" in unset.text
    assert_untouched(built, prefix)


def test_toolchain_checksum_mismatch(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    run = play(lab, prefix, llama_cpp_build_toolchain_sha256="1" * 64)
    assert run.rc != 0 and "toolchain tarball" in run.text and "has sha256 %s" % lab["tc_sha"] in run.text, run
    assert_untouched(built, prefix)
    assert not (Path(prefix) / "toolchains" / ("1" * 16)).exists()


def test_a_release_that_fails_verification_is_never_installed(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    run = play(lab, prefix, llama_cpp_build_cmake_extra_flags={"STUB_NO_RUNPATH": "ON"})
    assert run.rc != 0
    assert "the new release failed verification, nothing was installed" in run.text
    assert "instead of RUNPATH $ORIGIN/../lib" in run.text
    assert_untouched(built, prefix)


def test_a_flattened_device_library_copy_fails_the_role_with_the_runbooks_failure(lab, built, tmp_path):
    prefix = copy_of(built, tmp_path)
    rel = Path(prefix) / current_of(prefix)
    # reproduce the runbook's bug by hand: the old copy gone, then `cp -r SRC DST/` with DST missing
    shutil.rmtree(str(rel / "lib/rocblas"))
    toolchain = Path(prefix) / "toolchains" / lab["tc_sha"][:16]
    subprocess.check_call(["cp", "-r", str(toolchain / "lib/rocblas/library"), str(rel / "lib/rocblas/")])
    assert (rel / "lib/rocblas/TensileLibrary.dat").is_file()
    run = play(lab, prefix)
    assert run.rc != 0
    text = run.text
    index = rel / "lib/rocblas/library/TensileLibrary.dat"
    assert "%s is missing but %s exists" % (index, rel / "lib/rocblas/TensileLibrary.dat") in text, run
    assert RUNBOOK_FAILURE + "%s: No such file or directory for GPU arch : gfx1201'" % index in text
    assert "answer /health" in text and "cp -r SRC DST/" in text


# --------------------------------------------------------------------------- git sources

def git_vars(lab, ref):
    return {"llama_cpp_build_source_type": "git", "llama_cpp_build_git_repo": "file://%s" % lab["repo"]["path"],
            "llama_cpp_build_git_ref": ref, "llama_cpp_build_number": 0}


def test_git_commit_checked_out_verified_and_numbered(lab, tmp_path):
    prefix = tmp_path / "opt-llama"
    ref = lab["repo"]["head"][:10]
    run = play(lab, prefix, **git_vars(lab, ref))
    assert run.rc == 0, run
    (name,) = releases(prefix)
    assert name.startswith(ref + "-hip-")
    stamp = json.loads((prefix / "releases" / name / "BUILD_STAMP.json").read_text())
    assert stamp["outputs"]["commit"] == lab["repo"]["head"]
    assert stamp["outputs"]["build_number"] == 3  # git rev-list --count HEAD
    assert "-DLLAMA_BUILD_NUMBER=3" in cmake_calls(prefix)[0]["argv"]
    assert "verified %s/releases/%s: version: 0.6.0-dev (build 3," % (prefix, name) in run.text


def test_a_branch_named_like_a_commit_is_caught_after_checkout(lab, tmp_path):
    prefix = tmp_path / "opt-llama"
    run = play(lab, prefix, **git_vars(lab, "deadbeef"))
    assert run.rc != 0
    assert re.search(r"has [0-9a-f]{40} checked out, not the requested deadbeef", run.text), run
    assert releases(prefix) == [] and not (prefix / "current").exists()


def test_a_branch_name_is_refused_before_anything(lab, tmp_path):
    prefix = tmp_path / "opt-llama"
    run = play(lab, prefix, **git_vars(lab, "master"))
    assert run.rc != 0 and "llama_cpp_build_git_ref 'master' is not a commit" in run.text, run
    assert not prefix.exists()


# --------------------------------------------------------------------------- URL sources

@pytest.fixture
def http_root(lab):
    """lab's files over HTTP on 127.0.0.1 (the integration tests' port range)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(lab["root"]))
    for port in range(18040, 18100):
        try:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
            break
        except OSError:
            continue
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_url_sources_fetched_by_size_and_sha256(lab, http_root, tmp_path):
    prefix = tmp_path / "opt-llama"
    root = lab["root"]
    urls = dict(llama_cpp_build_archive_src=http_root + "/src.tar.gz",
                llama_cpp_build_archive_size=(root / "src.tar.gz").stat().st_size,
                llama_cpp_build_toolchain_src=http_root + "/toolchain.tar.gz",
                llama_cpp_build_toolchain_size=(root / "toolchain.tar.gz").stat().st_size)
    run = play(lab, prefix, **urls)
    assert run.rc == 0, run
    assert (Path(str(prefix) + "-scratch") / "downloads/src.tar.gz").is_file()
    assert (prefix / "toolchains" / (lab["tc_sha"][:16] + ".tar")).is_file()
    assert len(releases(prefix)) == 1
    missing = dict(urls, llama_cpp_build_archive_size=0)
    fresh = tmp_path / "other"
    run = play(lab, fresh, **missing)
    assert run.rc != 0 and "declare its size in bytes in llama_cpp_build_archive_size" in run.text, run
    assert not fresh.exists()
