"""The journal watch (roles/llama_server/files/llm_watch.py): what it counts, that a count is a total
across runs (the cursor), and that its files are replaced whole.

The script is the one the role installs, imported from its path. The journal itself is read for real
in the molecule scenario `production` (systemd-cat lines moving the textfile); here the counting,
the state and the textfile are exercised directly, and main() runs against this host's journalctl.
"""
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

REPO = Path(__file__).resolve().parents[4]
SCRIPT = REPO / "roles" / "llama_server" / "files" / "llm_watch.py"
KERNEL_EXPORT = REPO / "tests" / "fixtures" / "watch" / "kernel-amdgpu-sdma0-utcl2.json"
PROMTOOL = shutil.which("promtool")


def load():
    spec = importlib.util.spec_from_file_location("llm_watch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


W = load()
ID = "frank-medium"
UNIT = "frank-medium.service"

# The runbook's own lines (000_: the WRN line, the reprocess path, the abort chain), as llama-server logs them.
UNIT_LINES = {
    "llm_watch_prompt_cache_refused_total":
        "srv  update: - prompt state size 11388.990 MiB exceeds cache size limit 8192.000 MiB, skipping",
    "llm_watch_full_reprocess_total":
        "slot update_slots: id  1 | task 812 | forcing full prompt re-processing due to lack of cache data",
    "llm_watch_gpu_page_faults_total/illegal_memory_access":
        "ROCm error: an illegal memory access was encountered",
    "llm_watch_gpu_page_faults_total/ggml_abort": "/src/ggml/src/ggml.c:199: ggml_abort called",
}
KERNEL_LINES = {
    "llm_watch_gpu_page_faults_total/page_fault":
        "amdgpu 0000:0b:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:9 pasid:32781)",
    "llm_watch_gpu_page_faults_total/utcl2": "amdgpu 0000:0b:00.0: amdgpu: \t Faulty UTCL2 client ID: SDMA0 (0x9)",
}
NOISE = ["slot print_timing: id  0 | task 3 | draft acceptance = 0.62857 (44 accepted / 70 generated)",
         "main: server is listening on http://0.0.0.0:7770", ""]


def entry(i, message, transport="stdout", ident=ID, unit=None):
    """A journal entry; the unit's own (journald's _SYSTEMD_UNIT) unless another unit or a session is named, and
    a kernel entry has none."""
    e = {"__CURSOR": "s=x;i=%x" % i, "__REALTIME_TIMESTAMP": str(1758060000000000 + i), "_TRANSPORT": transport,
         "MESSAGE": message}
    if ident is not None:
        e["SYSLOG_IDENTIFIER"] = ident
    if transport != "kernel":
        e["_SYSTEMD_UNIT"] = unit or (UNIT if ident == ID else "%s.service" % ident)
    return e


# One journal line: the unit's (matching or noise), the kernel's, another program's, the kernel's words in the
# unit's mouth (must not count as a kernel fault), the unit's words in the kernel's (must not count either), and
# any local user's `logger -t frank-medium` (the unit's identifier, from a login session: must not count).
LINE = st.one_of(
    st.sampled_from(sorted(UNIT_LINES.items())).map(lambda kv: (kv[0], kv[1], "stdout", ID)),
    st.sampled_from(sorted(UNIT_LINES.values()) + sorted(KERNEL_LINES.values())).map(
        lambda m: (None, m, "syslog", "logger")),
    st.sampled_from(sorted(KERNEL_LINES.items())).map(lambda kv: (kv[0], kv[1], "kernel", "kernel")),
    st.sampled_from(NOISE).map(lambda m: (None, m, "stdout", ID)),
    st.sampled_from(sorted(UNIT_LINES.values())).map(lambda m: (None, m, "stdout", "other-service")),
    st.sampled_from(sorted(KERNEL_LINES.values())).map(lambda m: (None, m, "stdout", ID)),
    st.sampled_from(sorted(UNIT_LINES.values())).map(lambda m: (None, m, "kernel", "kernel")),
)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(LINE, max_size=40), cuts=st.lists(st.integers(0, 40), max_size=5))
def test_totals_are_the_same_however_the_runs_fall(lines, cuts, tmp_path_factory):
    """Each line counts once, in the counter it names, whether the journal is read in one run or in several
    (the cursor and totals through the state FILE, as between two timer runs)."""
    entries = [entry(i, m, t, ID if ident == "logger" else ident, "session-3.scope" if ident == "logger" else None)
               for i, (_, m, t, ident) in enumerate(lines)]
    expected = {}
    for key, _m, _t, _i in lines:
        if key:
            expected[key] = expected.get(key, 0) + 1
    path = tmp_path_factory.mktemp("state") / "s.json"
    bounds = sorted(set([0, len(entries)] + [c for c in cuts if c <= len(entries)]))
    for lo, hi in zip(bounds, bounds[1:]):
        state = W.load_state(str(path))
        # what journalctl --after-cursor returns: everything after the saved cursor
        start = 0 if state["cursor"] is None else int(state["cursor"].split("i=")[1], 16) + 1
        assert start == lo
        W.count(entries[lo:hi], state, UNIT)
        W.write_atomic(str(path), json.dumps(state))
    counts = W.load_state(str(path))["counts"]
    assert {k: v for k, v in counts.items() if v} == expected


def test_the_runbook_lines_each_count_where_they_belong():
    for key, message in UNIT_LINES.items():
        assert W.classify(entry(0, message), UNIT) == key
        assert W.classify(entry(0, message, ident="vllm"), UNIT) is None
        # any local user: `logger -t frank-medium` stamps the identifier, never the unit
        assert W.classify(entry(0, message, "syslog", ID, unit="session-3.scope"), UNIT) is None
    for key, message in KERNEL_LINES.items():
        assert W.classify(entry(0, message, "kernel", "kernel"), UNIT) == key
        assert W.classify(entry(0, message), UNIT) is None  # a fault is the kernel's to report
        assert W.classify(entry(0, message, "syslog", "kernel", unit="session-3.scope"), UNIT) is None
    # journalctl -o json writes a message that is not UTF-8 as a byte array
    raw = list(UNIT_LINES["llm_watch_full_reprocess_total"].encode()) + [0xff]
    assert W.classify(entry(0, raw), UNIT) == "llm_watch_full_reprocess_total"


def test_a_recorded_export_counts_once(tmp_path):
    state = W.empty_state()
    assert W.import_export(str(KERNEL_EXPORT), state, UNIT) == 2
    assert W.import_export(str(KERNEL_EXPORT), state, UNIT) == 0
    assert state["counts"]["llm_watch_gpu_page_faults_total/page_fault"] == 1
    assert state["counts"]["llm_watch_gpu_page_faults_total/utcl2"] == 1
    assert state["cursor"] is None  # an import never moves the live journal's cursor


def test_a_cursor_the_journal_lost_falls_back_to_the_time(tmp_path):
    cmd = W.journal_cmd("journalctl", UNIT, since_usec=1758060000000005)
    assert "--since=@1758060000.000005" in cmd and cmd[-3:] == ["_SYSTEMD_UNIT=" + UNIT, "+", "_TRANSPORT=kernel"]
    assert "--after-cursor=c1" in W.journal_cmd("journalctl", UNIT, cursor="c1")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian prometheus) not installed")
def test_the_textfile_passes_promtool_check_metrics():
    state = W.empty_state()
    W.count([entry(i, m) for i, m in enumerate(UNIT_LINES.values())], state, UNIT)
    text = W.render(state, 'frank "medium".service', 3, True, 1758060000)
    run = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert 'llm_watch_prompt_cache_refused_total{unit="frank \\"medium\\".service"} 1' in text
    assert 'llm_watch_unit_restarts{unit="frank \\"medium\\".service"} 3' in text


def test_a_failed_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    target = tmp_path / "t.prom"
    target.write_text("old\n")

    def boom(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(W.os, "replace", boom)
    with pytest.raises(OSError):
        W.write_atomic(str(target), "new\n")
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["t.prom"]


def run_main(tmp_path, *extra):
    (tmp_path / "tf").mkdir(exist_ok=True)
    argv = ["--unit", "nothing-here.service", "--identifier", "dankfleet-watch-test-%d" % os.getpid(),
            "--state", str(tmp_path / "state.json"), "--textfile", str(tmp_path / "tf" / "w.prom"), *extra]
    return W.main(argv)


@pytest.mark.skipif(shutil.which("journalctl") is None, reason="no journalctl")
def test_main_keeps_totals_across_runs_and_writes_the_textfile(tmp_path):
    assert run_main(tmp_path, "--import", str(KERNEL_EXPORT)) == 0
    assert run_main(tmp_path, "--import", str(KERNEL_EXPORT)) == 0
    text = (tmp_path / "tf" / "w.prom").read_text()
    assert 'llm_watch_gpu_page_faults_total{unit="nothing-here.service",kind="page_fault"} 1' in text
    assert "llm_watch_journal_up{unit=\"nothing-here.service\"} 1" in text
    assert oct(os.stat(tmp_path / "state.json").st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("text, field", [
    ("{not json", "is not JSON"),
    ('{"version": 1, "cursor": null, "realtime_usec": 0, "imported": {}, '
     '"counts": {"llm_watch_full_reprocess_total": "7"}}', "counts.llm_watch_full_reprocess_total"),
    ('{"version": 1, "counts": {"llm_watch_full_reprocess_total": 1e400}}', "counts.llm_watch_full_reprocess_total"),
    ('{"version": 1, "cursor": "s=1\\n--since=0", "counts": {}}', "cursor"),
    ('{"version": 1, "counts": {"llm_watch_full_reprocess_total": -1}}', "counts.llm_watch_full_reprocess_total"),
    ('{"version": 1, "counts": {}, "realtime_usec": "soon"}', "realtime_usec"),
    ('[]', "expected an object"),
])
def test_a_broken_state_is_named_set_aside_and_the_watch_goes_on(tmp_path, capsys, text, field):
    """Issue 33: a state file with string counts crashed the watch. Now it is named (file and field), moved
    aside whole for a person to read, and the run counts from a fresh state: the next run is clean."""
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(W.StateError, match=field):
        W.load_state(str(tmp_path / "state.json"))
    assert run_main(tmp_path, "--journalctl", "/nonexistent/journalctl") == 1
    err = capsys.readouterr().err
    assert str(tmp_path / "state.json") in err and field in err and "moved aside" in err
    aside = [p for p in os.listdir(tmp_path) if p.startswith("state.json.bad-")]
    assert len(aside) == 1 and (tmp_path / aside[0]).read_text() == text
    assert 'llm_watch_full_reprocess_total{unit="nothing-here.service"} 0' in (tmp_path / "tf" / "w.prom").read_text()
    assert W.load_state(str(tmp_path / "state.json"))["counts"]["llm_watch_full_reprocess_total"] == 0
    assert run_main(tmp_path, "--journalctl", "/nonexistent/journalctl") == 2     # a clean state: journal down only


def test_a_journal_that_does_not_answer_is_reported_in_the_textfile(tmp_path):
    assert run_main(tmp_path, "--journalctl", "/nonexistent/journalctl") == 2
    assert 'llm_watch_journal_up{unit="nothing-here.service"} 0' in (tmp_path / "tf" / "w.prom").read_text()
