"""tests/lab/connection_plugins/podman_pipelined: the lab's (and molecule's) container connection, against a
real container of the lab image (podman, no systemd needed: `sleep infinity` as PID 1).

- pipelined: a module is ONE `podman exec --interactive` (no mount, no temp dir, no copy, no chmod);
- a multi-MB module payload arrives whole over stdin (podman's old `exec -i` truncation);
- become (sudo to another user) pipelines too; copy (put_file) and fetch (fetch_file) mount the container
  only then, and move the bytes unchanged;
- ANSIBLE_PIPELINING=false falls back to the pinned plugin's way (temp dir + copy), still correct.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IMAGE = os.environ.get("LAB_IMAGE", "localhost/dankfleet-lab:bookworm")
RUN = re.compile(r"RUN \[(?P<argv>b'[^\]]*)\]")


def _podman_env() -> dict:
    conf = subprocess.run(["bash", "-c", "source tests/lab/podman-env.sh && echo $CONTAINERS_CONF"], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.strip()
    return dict(os.environ, CONTAINERS_CONF=conf)


@pytest.fixture(scope="module")
def container():
    if not shutil.which("podman"):
        pytest.fail("podman is not installed: run `make host-deps`", pytrace=False)
    env = _podman_env()
    if subprocess.run(["podman", "image", "exists", IMAGE], env=env).returncode != 0:
        pytest.fail(f"lab image {IMAGE} is missing: run `make lab-image` (tests/lab/build-image.sh)", pytrace=False)
    name = f"dankfleet-pipelined-{os.getpid()}"
    subprocess.run(["podman", "run", "-d", "--name", name, "--network", "none", IMAGE, "sleep", "infinity"],
                   env=env, check=True, capture_output=True)
    try:
        yield name, env
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], env=env, capture_output=True)


def _play(tmp_path, name, env, tasks, pipelining=True):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {name: {
        "ansible_connection": "podman_pipelined", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    book = tmp_path / "play.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    run_env = {k: v for k, v in env.items() if not k.startswith("ANSIBLE_")}
    run_env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_PIPELINING="true" if pipelining else "false",
                   ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default")
    out = subprocess.run([str(BIN / "ansible-playbook"), "-vvv", "-i", str(inventory), str(book)], cwd=REPO,
                         env=run_env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return out.stdout


def _podman_calls(text, task):
    """The podman command lines one task ran (-vvv's RUN lines between its TASK banner and the next)."""
    part = text.split(f"TASK [{task}]", 1)[1].split("TASK [", 1)[0]
    return [m.group("argv") for m in RUN.finditer(part)]


def test_a_module_is_one_interactive_exec(container, tmp_path):
    name, env = container
    payload = "x" * (3 * 1024 * 1024)  # a 3 MiB module argument: the module arrives over stdin
    text = _play(tmp_path, name, env, [
        {"name": "ping", "ansible.builtin.ping": {}},
        {"name": "big", "register": "big",
         "ansible.builtin.command": {"argv": ["wc", "-c"], "stdin": payload, "stdin_add_newline": False}},
        {"name": "show big", "ansible.builtin.debug": {"var": "big.stdout"}},
        {"name": "become", "ansible.builtin.command": {"argv": ["id", "-un"]}, "become": True,
         "become_user": "nobody", "register": "who"},
        {"name": "show who", "ansible.builtin.debug": {"var": "who.stdout"}},
    ])
    ping = _podman_calls(text, "ping")
    assert len(ping) == 1 and "b'--interactive'" in ping[0] and "b'exec'" in ping[0], ping
    assert not any("b'mount'" in c for c in _podman_calls(text, "ping") + _podman_calls(text, "big"))
    assert len(_podman_calls(text, "big")) == 1 and len(_podman_calls(text, "become")) == 1
    assert f'"big.stdout": "{len(payload)}"' in text
    assert '"who.stdout": "nobody"' in text


def test_files_go_in_and_out_unchanged(container, tmp_path):
    name, env = container
    src = tmp_path / "blob.bin"
    src.write_bytes(os.urandom(256 * 1024))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    back = tmp_path / "back"
    for pipelining in (True, False):
        text = _play(tmp_path, name, env, [
            {"name": "copy in", "ansible.builtin.copy": {"src": str(src), "dest": "/tmp/blob.bin", "mode": "0600"}},
            {"name": "fetch out", "ansible.builtin.fetch": {"src": "/tmp/blob.bin", "dest": f"{back}/", "flat": True}},
            {"name": "stat", "ansible.builtin.stat": {"path": "/tmp/blob.bin", "checksum_algorithm": "sha256"},
             "register": "st"},
            {"name": "show", "ansible.builtin.debug": {"msg": "{{ st.stat.checksum }}"}},
        ], pipelining=pipelining)
        assert (back / "blob.bin").read_bytes() == src.read_bytes()
        assert f'"msg": "{digest}"' in text
        stat_calls = _podman_calls(text, "stat")
        if pipelining:
            assert len(stat_calls) == 1 and "b'--interactive'" in stat_calls[0], stat_calls
        else:  # the pinned plugin's way: a temp dir, the module copied in, then run - and no --interactive
            assert len(stat_calls) > 1 and not any("b'--interactive'" in c for c in stat_calls), stat_calls
        (back / "blob.bin").unlink()
