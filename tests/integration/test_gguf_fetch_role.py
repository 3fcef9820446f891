"""The gguf_fetch role's preflight, run by ansible-playbook on localhost.

A bad manifest must fail before anything changes (no directory, no request)
and the message must name the entry and the fix. The happy path on a real
systemd host is molecule/gguf_fetch; here the role runs against a local
range_http_server once to prove gguf_fetch_paths.
"""

import hashlib
import json
import os
import re
import subprocess
import sys

import pytest

import range_http_server

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHA = "0" * 64
DATA = b"GGUF" + bytes(range(256)) * 64


def entry(**kw):
    e = {"name": "m", "role": "target", "repo": "lab/gen_models", "revision": "r1", "file": "m.gguf",
         "url": "http://127.0.0.1:9/m.gguf", "size": 1024, "sha256": SHA}
    e.update(kw)
    return {k: v for k, v in e.items() if v is not None}


def play(tmp_path, manifest, check=False, **over):
    models = tmp_path / "models"
    extra = {"gguf_fetch_manifest": manifest, "gguf_fetch_models_dir": str(models),
             "gguf_fetch_progress_log": str(tmp_path / "log" / "fetch.log"),
             "gguf_fetch_disk_margin_bytes": 0, "gguf_fetch_retry_delay": 0.05,
             "ansible_python_interpreter": sys.executable}
    extra.update(over)
    pb = tmp_path / "pb.yml"
    pb.write_text(
        "- hosts: localhost\n  gather_facts: false\n  roles: [gguf_fetch]\n"
        "  post_tasks:\n    - ansible.builtin.copy:\n        content: '{{ gguf_fetch_paths | to_json }}'\n"
        "        dest: %s\n        mode: '0644'\n      check_mode: false\n" % (tmp_path / "paths.json"))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"),
               ANSIBLE_ROLES_PATH=os.path.join(REPO, "roles"), ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
               ANSIBLE_NOCOLOR="1")
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
           "-e", json.dumps(extra), str(pb)]
    if check:
        cmd.append("--check")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    return p.returncode, p.stdout + p.stderr, models


@pytest.mark.parametrize("manifest,needles", [
    # A missing field, type and choice errors are caught first by meta/argument_specs.yml (settle names them the
    # same way in a play), also before anything runs.
    ([entry(sha256=None)], ["missing required arguments: sha256 found in gguf_fetch_manifest"]),
    ([entry(size="1.4GB")], ["argument 'size'", "'1.4GB'", "cannot be converted to an int"]),
    ([entry(size=0)], ["size 0", "integer > 0"]),
    ([entry(sha256="sha256:abc")], ["sha256 sha256:abc", "64 hex digits"]),
    ([entry(role="vision")], ["vision", "target, drafter, mmproj"]),
    ([entry(file="../etc/passwd")], ["one path component"]),
    ([entry(), entry(name="n", file="n.gguf")], ["exactly one target"]),
    ([entry(role="drafter")], ["exactly one target"]),
    ([], ["gguf_fetch_manifest is empty"]),
])
def test_bad_manifest_fails_before_anything_changes(tmp_path, manifest, needles):
    rc, out, models = play(tmp_path, manifest)
    assert rc != 0
    for n in needles:
        assert n in out, out[-3000:]
    assert not models.exists() and not (tmp_path / "log").exists()


def test_role_fetches_and_publishes_paths(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "t.gguf").write_bytes(DATA)
    (root / "d.gguf").write_bytes(DATA[::-1])
    server, port = range_http_server.serve(str(root))
    try:
        base = "http://127.0.0.1:%d" % port
        manifest = [
            entry(name="tgt", file="t.gguf", url=base + "/t.gguf", size=len(DATA),
                  sha256=hashlib.sha256(DATA).hexdigest()),
            entry(name="drf", role="drafter", file="d.gguf", url=base + "/d.gguf", size=len(DATA),
                  sha256=hashlib.sha256(DATA[::-1]).hexdigest(), dest_dir=str(tmp_path / "elsewhere")),
        ]
        rc, out, models = play(tmp_path, manifest, check=True)
        assert rc == 0, out[-3000:]
        assert "would_download" in out and not (models / "tgt" / "t.gguf").exists()
        # the directories too are only reported: check mode makes none
        assert not models.exists() and not (tmp_path / "elsewhere").exists() and not (tmp_path / "log").exists()
        assert len(server.requests) == 0
        rc, out, models = play(tmp_path, manifest)
        assert rc == 0, out[-3000:]
        assert "tail -f %s" % (tmp_path / "log" / "fetch.log") in out
        paths = json.loads((tmp_path / "paths.json").read_text())
        assert paths == {"target": str(models / "tgt" / "t.gguf"), "drafter": str(tmp_path / "elsewhere" / "d.gguf")}
        assert (models / "tgt" / "t.gguf").read_bytes() == DATA
        assert (tmp_path / "elsewhere" / "d.gguf").read_bytes() == DATA[::-1]
    finally:
        server.close()


def test_a_slow_download_prints_bytes_rate_and_eta_at_each_poll(tmp_path):
    """The fetch runs async: one line a poll on the controller, from the progress log; a re-run with the
    file in place starts no job at all."""
    root = tmp_path / "www"
    root.mkdir()
    data = DATA * 40                                   # 655 KiB at ~200 KB/s: about 3 s, 1 s polls
    (root / "t.gguf").write_bytes(data)
    server, port = range_http_server.serve(str(root))
    try:
        manifest = [entry(file="t.gguf", url="http://127.0.0.1:%d/_fault/rate-200000/t.gguf" % port,
                          size=len(data), sha256=hashlib.sha256(data).hexdigest())]
        rc, out, models = play(tmp_path, manifest, gguf_fetch_poll_delay=1, gguf_fetch_progress_interval=0.2)
        assert rc == 0, out[-3000:]
        lines = re.findall(r"\[localhost\] t\.gguf: (\S+ \S+) of (\S+ \S+) \(([\d.]+)%\), (\S+ \S+/s), ETA (\S+) "
                           r"\(poll (\d+), (\S+)\)", out)
        assert len(lines) >= 2, out[-3000:]
        # a line at each poll: before its first progress line a slow start says it waits (under load, poll 1)
        polls = [int(p) for p in re.findall(r"\[localhost\] t\.gguf: [^\n]*\(poll (\d+), \S+\)", out)]
        assert polls == list(range(1, len(polls) + 1)), out[-3000:]
        assert [int(poll) for *_, poll, _ in lines] == polls[len(polls) - len(lines):], out[-3000:]
        assert float(lines[0][2]) < 100.0 and lines[-1][2] == "100.0" and lines[-1][-1] == "finished"
        assert (models / "m" / "t.gguf").read_bytes() == data
        rc, out, _ = play(tmp_path, manifest, gguf_fetch_poll_delay=1)
        assert rc == 0 and re.search(r"verified,\s+by\s+stamp", out), out[-3000:]
        assert "Fetch | " not in out and "(poll 1" not in out
    finally:
        server.close()
