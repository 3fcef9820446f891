# -*- coding: utf-8 -*-
"""The file-access layer (module_utils/base/regular_file.py) and the modules' readers/writers that use it.

Run as root (the deploy's case): foreign-owned directories are chowned to nobody. Every call that could
block runs under a SIGALRM deadline, so a regression hangs no test: it fails naming the call.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import contextlib
import errno
import json
import os
import signal
import socket
import stat

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.base import regular_file as rf

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")


class Hung(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds=5):
    def on_alarm(signum, frame):
        raise Hung("still blocked after %ss" % seconds)
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def refused(fn, *args, **kwargs):
    """The FileRefused fn raises, within the deadline."""
    with deadline():
        with pytest.raises(rf.FileRefused) as info:
            fn(*args, **kwargs)
    return info.value


def unix_socket(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    return s


# ------------------------------------------------------------------------------ reads

def test_a_regular_file_is_read_to_eof(tmp_path):
    (tmp_path / "f").write_bytes(b"abc\n")
    assert rf.read_bytes(str(tmp_path / "f")) == b"abc\n"
    assert rf.read_text(str(tmp_path / "f")) == "abc\n"


@pytest.mark.parametrize("kind", ["fifo", "socket", "dir", "null", "zero"])
def test_what_is_not_a_regular_file_is_refused_by_kind_without_blocking(tmp_path, kind):
    path = tmp_path / "x"
    keep = None
    if kind == "fifo":
        os.mkfifo(str(path))
    elif kind == "socket":
        keep = unix_socket(path)
    elif kind == "dir":
        path.mkdir()
    else:
        path = "/dev/" + kind
    e = refused(rf.read_bytes, str(path), "env file")
    assert str(e).startswith(str(path) + ": ")
    want = {"fifo": "FIFO", "socket": "a socket", "dir": "a directory", "null": "character device",
            "zero": "character device"}[kind]
    assert want in str(e)
    if keep:
        keep.close()


def test_a_link_is_followed_only_where_allowed(tmp_path):
    (tmp_path / "real").write_text("x")
    os.symlink("real", str(tmp_path / "link"))
    assert rf.read_text(str(tmp_path / "link")) == "x"
    e = refused(rf.read_text, str(tmp_path / "link"), "stamp", follow=False)
    assert "symbolic link" in e.cause and e.errno == errno.ELOOP


def test_the_size_cap_holds_for_st_size_and_for_files_that_lie_about_it(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 100)
    assert "more than the 10" in refused(rf.read_bytes, str(tmp_path / "big"), "stamp", 10).cause
    # /proc/self/pagemap says 0 bytes and holds 8 bytes per page of the address space: read to EOF, capped
    e = refused(rf.read_bytes, "/proc/self/pagemap", "kernel file", 1 << 16)
    assert "more than the 65536" in e.cause


def test_a_proc_file_of_size_zero_is_read_whole():
    assert os.stat("/proc/self/status").st_size == 0
    assert "Pid:" in rf.read_text("/proc/self/status", "kernel file")


def test_decoding_errors_name_path_offset_and_line(tmp_path):
    (tmp_path / "env").write_bytes(b"A=1\nB=\xff\n")
    e = refused(rf.read_text, str(tmp_path / "env"), "env file")
    assert str(e).startswith(str(tmp_path / "env"))
    assert "byte 0xff at offset 6 (line 2)" in e.cause and "env file must be UTF-8" in e.cause


def test_open_regular_keeps_its_old_call_shape(tmp_path):
    class E(Exception):
        pass
    os.mkfifo(str(tmp_path / "p"))
    with deadline():
        with pytest.raises(E) as info:
            rf.open_regular(str(tmp_path / "p"), E, "GGUF file")
    assert info.value.args[0] == str(tmp_path / "p") and "FIFO" in info.value.args[1]


# ------------------------------------------------------------------------------ names

@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../up", "x\0y"])
def test_a_name_that_leaves_its_directory_is_refused(name):
    assert "one plain file name" in refused(rf.check_name, name, "textfile_name").cause or name == ""


def test_a_name_with_no_room_for_its_suffix_is_refused():
    rf.check_name("a" * 241, reserve=14)
    e = refused(rf.check_name, "a" * 249, "dest file name", 14)
    assert "249 bytes" in e.cause and "at most 241" in e.cause


# ------------------------------------------------------------------------ directories

@root_only
def test_a_link_below_a_directory_another_user_owns_is_refused_by_name(tmp_path):
    models = tmp_path / "home" / "dank" / "models"
    models.mkdir(parents=True)
    os.chown(str(tmp_path / "home" / "dank"), NOBODY, NOBODY)
    os.chown(str(models), NOBODY, NOBODY)
    (tmp_path / "etc").mkdir()
    os.symlink(str(tmp_path / "etc"), str(models / "m"))
    e = refused(rf.open_dir, str(models / "m"), "directory of dest")
    assert str(e).startswith(str(models / "m")) and "nobody can write" in e.cause
    with rf.open_dir(str(models)) as d:      # the directory itself is fine: writes there are dir_fd-relative
        assert d.foreign == NOBODY


def test_links_in_directories_only_root_can_write_are_followed(tmp_path):
    (tmp_path / "real").mkdir()
    os.chmod(str(tmp_path), 0o755)
    os.symlink("real", str(tmp_path / "alias"))
    with rf.open_dir(str(tmp_path / "alias")) as d:
        assert d.path == str(tmp_path / "real") and d.foreign is None


def test_a_file_where_a_directory_belongs_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    assert "a file, not a directory" in refused(rf.open_dir, str(tmp_path / "f" / "sub")).cause
    os.mkfifo(str(tmp_path / "p"))
    assert "FIFO" in refused(rf.open_dir, str(tmp_path / "p")).cause


def test_missing_directories_are_created_relative_to_their_parent(tmp_path):
    assert rf.open_dir(str(tmp_path / "a" / "b"), must_exist=False) is None
    with rf.open_dir(str(tmp_path / "a" / "b"), create_mode=0o750) as d:
        assert d.path == str(tmp_path / "a" / "b")
    assert stat.S_IMODE(os.stat(str(tmp_path / "a" / "b")).st_mode) == 0o750


# ------------------------------------------------------------------------------ writes

@root_only
def test_write_atomic_replaces_a_planted_link_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "shadow"
    victim.write_text("secret")
    d = tmp_path / "models"
    d.mkdir()
    os.chown(str(d), NOBODY, NOBODY)
    os.symlink(str(victim), str(d / "x.verified.json"))
    with rf.open_dir(str(d)) as sd:
        sd.write_atomic("x.verified.json", b"{}\n", mode=0o640)
    assert victim.read_text() == "secret"
    st = os.lstat(str(d / "x.verified.json"))
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o640
    assert sorted(os.listdir(str(d))) == ["x.verified.json"]       # no temporary file left


def test_write_atomic_refuses_a_directory_at_the_target(tmp_path):
    (tmp_path / "t").mkdir()
    with rf.open_dir(str(tmp_path)) as sd:
        assert "is a directory" in refused(sd.write_atomic, "t", b"x").cause


@pytest.mark.parametrize("kind", ["link", "fifo", "hardlink", "dir", "socket"])
def test_a_file_written_in_place_is_never_opened_through_a_link_or_a_fifo(tmp_path, kind):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me")
    d = tmp_path / "d"
    d.mkdir()
    keep = None
    if kind == "link":
        os.symlink(str(victim), str(d / "x.part"))
    elif kind == "fifo":
        os.mkfifo(str(d / "x.part"))
    elif kind == "hardlink":
        os.link(str(victim), str(d / "x.part"))
    elif kind == "dir":
        (d / "x.part").mkdir()
    else:
        keep = unix_socket(d / "x.part")
    with rf.open_dir(str(d)) as sd:
        e = refused(sd.open_existing_or_new, "x.part", "partial download", readable=True)
    assert str(e).startswith(str(d / "x.part") + ": ")
    assert victim.read_bytes() == b"keep me"
    if keep:
        keep.close()


def test_an_existing_part_is_opened_untruncated(tmp_path):
    (tmp_path / "x.part").write_bytes(b"12345")
    with rf.open_dir(str(tmp_path)) as sd:
        fd = sd.open_existing_or_new("x.part", readable=True)
    try:
        assert os.fstat(fd).st_size == 5 and os.pread(fd, 5, 0) == b"12345"
    finally:
        os.close(fd)


# ------------------------------------------------------------------- the modules' uses

@root_only
def test_gguf_fetch_never_follows_a_planted_part_or_stamp_or_lock(tmp_path):
    from ansible_collections.dankfleet.llm.plugins.module_utils.host import gguf_fetch as gf
    victim = tmp_path / "shadow"
    for suffix in (".part", ".lock", ".verified.json"):
        victim.write_bytes(b"root:secret\n")
        d = tmp_path / ("m" + suffix)
        d.mkdir()
        os.chown(str(d), NOBODY, NOBODY)
        os.symlink(str(victim), str(d / ("x.gguf" + suffix)))
        with deadline():
            with pytest.raises(gf.FetchError) as info:
                gf.fetch("http://127.0.0.1:9/x.gguf", str(d / "x.gguf"), 10, "0" * 64, retries=0, disk_margin_bytes=0)
        assert "symbolic link" in info.value.msg and str(d / ("x.gguf" + suffix)) in info.value.msg
        assert victim.read_bytes() == b"root:secret\n" and os.path.islink(str(d / ("x.gguf" + suffix)))


def test_gguf_fetch_refuses_a_dest_name_its_stamp_cannot_have_before_anything_changes(tmp_path):
    from ansible_collections.dankfleet.llm.plugins.module_utils.host import gguf_fetch as gf
    dest = tmp_path / ("a" * 245 + ".gguf")
    with pytest.raises(gf.FetchError) as info:
        gf.fetch("http://127.0.0.1:9/x.gguf", str(dest), 10, "0" * 64, retries=0, disk_margin_bytes=0)
    assert "dest file name is 250 bytes" in info.value.msg and "Nothing was downloaded" in info.value.msg
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize("kind", ["fifo", "dir", "link"])
def test_gguf_fetch_progress_log_that_is_no_file_is_refused_without_blocking(tmp_path, kind):
    from ansible_collections.dankfleet.llm.plugins.module_utils.host import gguf_fetch as gf
    log = tmp_path / "fetch.log"
    if kind == "fifo":
        os.mkfifo(str(log))
    elif kind == "dir":
        log.mkdir()
    else:
        os.symlink("/etc/passwd", str(log))
    with deadline():
        with pytest.raises(gf.FetchError) as info:
            gf.fetch("http://127.0.0.1:9/x.gguf", str(tmp_path / "x.gguf"), 10, "0" * 64, retries=0,
                     disk_margin_bytes=0, progress_log=str(log))
    assert "progress_log %s is" % log in info.value.msg
    assert not os.path.exists(str(tmp_path / "x.gguf.part"))


def test_host_state_checksums_a_kernel_file_without_hanging():
    from ansible_collections.dankfleet.llm.plugins.module_utils.host import host_state as hs
    with deadline():
        assert hs.path_state("/proc/self/pagemap", max_bytes=1 << 20)["checksum"] is None   # endless: no checksum
        assert hs.path_state("/proc/self/status")["checksum"] is not None                  # size 0, real content


def test_gpu_facts_refuses_a_fifo_or_garbage_in_a_recorded_tree(tmp_path):
    from ansible_collections.dankfleet.llm.plugins.module_utils.host import gpu_facts as g
    dev = tmp_path / "sys" / "x"
    dev.mkdir(parents=True)
    os.mkfifo(str(dev / "vendor"))
    (dev / "class").write_bytes(b"0x03\xfe0000\n")
    with deadline():
        with pytest.raises(g.GpuFactsError, match="vendor: is a FIFO"):
            g.read_text(str(tmp_path), "/sys/x/vendor")
        with pytest.raises(g.GpuFactsError, match=r"class: is not UTF-8 text: byte 0xfe at offset 4"):
            g.read_text(str(tmp_path), "/sys/x/class")
    assert g.read_text(str(tmp_path), "/sys/x/absent") is None


@pytest.mark.parametrize("kind", ["fifo", "dir", "binary", "link"])
def test_plan_actual_records_file_is_refused_by_name(tmp_path, kind):
    from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual as pa
    path = tmp_path / pa.RECORD_FILE
    if kind == "fifo":
        os.mkfifo(str(path))
    elif kind == "dir":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"[\xff]")
    else:
        (tmp_path / "elsewhere.json").write_text("[]")
        os.symlink("elsewhere.json", str(path))
    with deadline():
        with pytest.raises(pa.PlanActualError) as info:
            pa.append_record(str(path), {"x": 1})
    assert str(path) in str(info.value) and "move it aside" in str(info.value)


@pytest.mark.parametrize("name", ["../escape.prom", "/etc/cron.d/x", "..", "sub/x.prom"])
def test_plan_actual_textfile_name_cannot_climb_out(tmp_path, name):
    from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual as pa
    (tmp_path / "tf").mkdir()
    with pytest.raises(pa.PlanActualError, match="textfile_name"):
        pa.write_textfile(str(tmp_path / "tf"), "x 1\n", name)
    assert sorted(os.listdir(str(tmp_path))) == ["tf"] and os.listdir(str(tmp_path / "tf")) == []


def test_plan_actual_textfile_replaces_a_planted_link(tmp_path):
    from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual as pa
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "tf").mkdir()
    os.symlink(str(victim), str(tmp_path / "tf" / pa.TEXTFILE_NAME))
    path, changed = pa.write_textfile(str(tmp_path / "tf"), "x 1\n")
    assert changed and victim.read_text() == "keep" and not os.path.islink(path)
    assert pa.write_textfile(str(tmp_path / "tf"), "x 1\n") == (path, False)


PROBE = """
import importlib, json, sys
llama_env = importlib.import_module(sys.argv.pop(1))   # the copy beside this probe, as on the host
assert 'regular_file' not in (getattr(llama_env.read_text, '__module__', '') or '')
out = {}
for path in sys.argv[1:]:
    try:
        out[path] = ['ok', llama_env.read_env_file(path)[0]]
    except llama_env.LlamaEnvError as exc:
        out[path] = ['refused', str(exc)]
print(json.dumps(out))
"""


def test_the_env_file_readers_agree_on_what_they_refuse(tmp_path):
    """llama_env.py is installed alone beside llama_env_check.py on the host: its stdlib fallback reader
    refuses what the layer refuses (run as it runs there: its own directory, no collection importable)."""
    import shutil
    import subprocess
    import sys
    from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_env
    alone = tmp_path / "libexec"
    alone.mkdir()
    shutil.copy(llama_env.__file__, str(alone / "llama_env.py"))
    (alone / "probe.py").write_text(PROBE)
    os.mkfifo(str(tmp_path / "fifo"))
    (tmp_path / "bin").write_bytes(b"A=\xff\n")
    (tmp_path / "ok").write_text("A=1\n")
    paths = [str(tmp_path / n) for n in ("fifo", "bin", "ok")] + ["/dev/zero", str(tmp_path)]
    proc = subprocess.run([sys.executable, "-s", "-E", str(alone / "probe.py"), "llama_env"] + paths, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=30, universal_newlines=True, cwd=str(alone))
    assert proc.returncode == 0, proc.stderr
    there = json.loads(proc.stdout)
    for path in paths:
        with deadline():
            try:
                here = ["ok", llama_env.read_env_file(path)[0]]
            except llama_env.LlamaEnvError as exc:
                here = ["refused", str(exc)]
        assert here[0] == there[path][0], (path, here, there[path])
        assert path in here[1] if here[0] == "refused" else here == there[path]
    assert "offset 2" in there[str(tmp_path / "bin")][1]


@root_only
@pytest.mark.parametrize("kind", ["link", "hardlink", "fifo"])
def test_gguf_fetch_part_planted_after_the_checks_is_still_never_written(tmp_path, kind):
    """The race: the service user puts a link at .part between gguf_fetch's checks and its open."""
    from ansible_collections.dankfleet.llm.plugins.module_utils.host import gguf_fetch as gf
    victim = tmp_path / "shadow"
    victim.write_bytes(b"root:secret\n")
    d = tmp_path / "models"
    d.mkdir()
    os.chown(str(d), NOBODY, NOBODY)
    f = gf.Fetcher("http://127.0.0.1:9/x.gguf", str(d / "x.gguf"), 10, "0" * 64, retries=0, disk_margin_bytes=0)
    f._validate()
    f._dir = rf.open_dir(str(d))
    part = str(d / "x.gguf.part")
    {"link": lambda: os.symlink(str(victim), part), "hardlink": lambda: os.link(str(victim), part),
     "fifo": lambda: os.mkfifo(part)}[kind]()
    with deadline():
        with pytest.raises(gf.FetchError, match="x.gguf.part: .*(symbolic link|hard links|FIFO)"):
            f._open_part()
    f._dir.close()
    assert victim.read_bytes() == b"root:secret\n"
