"""The HTTP peers of the real modules (chat_completion, llama_server_gate, gguf_fetch) misbehaving, through
main() as Ansible runs it: a llama-server stand-in (tests/lab/range_http_server.py serving the answers as
files) that drips, sends an endless body or redirects; secrets with a trailing newline and credentials in a
URL. Every run ends within its deadline plus a slack, fails naming the cause, and no secret is anywhere in
the result (msg, invocation, findings).

Also: every module option that carries a secret is no_log in its argument spec.
"""
import glob
import hashlib
import importlib
import json
import os
import time

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import llama_server_gate as lg
from ansible_collections.dankfleet.llm.plugins.modules import chat_completion, gguf_fetch, llama_server_gate
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module
import range_http_server

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
SLACK = 1.5
KEY = "sk-live-0f9e8d7c6b5a4321"
CHAT = {"choices": [{"message": {"content": "ready"}}], "usage": {"completion_tokens": 1}}
FAKE_SYSTEMCTL = """#!/bin/sh
case "$*" in
  *--value*) echo x ;;
  *) printf 'NRestarts=0\\nMainPID=4711\\nActiveState=active\\n' ;;
esac
"""


def stand_in(tmp_path, faults=""):
    root = tmp_path / "www"
    (root / "v1" / "chat").mkdir(parents=True)
    (root / "health").write_text('{"status":"ok"}')
    (root / "v1" / "chat" / "completions").write_text(json.dumps(CHAT))
    (root / "v1" / "models").write_text(json.dumps({"data": [{"id": "frank-lab"}]}))
    (root / "props").write_text(json.dumps({"total_slots": 1, "default_generation_settings": {"n_ctx": 1024},
                                            "modalities": {"vision": False}}))
    return range_http_server.serve(str(root), faults=faults)


def timed_run(capsys, main, **args):
    t0 = time.monotonic()
    result = run_module(capsys, main, **args)
    return result, time.monotonic() - t0


# --- chat_completion ---------------------------------------------------------------------------------

@pytest.mark.parametrize("faults,needle", [
    ("drip-300", "no complete answer within 1.5 s"),
    ("endless", "longer than the 16777216 bytes"),
    ("length-99999", "no complete answer within 1.5 s"),
    ("redirect-host-169.254.169.254", "link-local"),
    ("reset-every-5", "Connection reset by peer"),
])
def test_chat_completion_against_a_hostile_peer_ends_in_time_naming_it(tmp_path, capsys, faults, needle):
    server, port = stand_in(tmp_path, faults)
    try:
        r, took = timed_run(capsys, chat_completion.main, url="http://127.0.0.1:%d" % port, model="frank-lab",
                            api_key=KEY, timeout=1.5)
    finally:
        server.close()
    assert r["failed"] and needle in r["msg"] and "answered nothing" in r["msg"], r["msg"]
    assert took < 1.5 + SLACK
    assert KEY not in json.dumps(r)


def test_chat_completion_answers_through_the_client(tmp_path, capsys):
    server, port = stand_in(tmp_path)
    try:
        r = run_module(capsys, chat_completion.main, url="http://127.0.0.1:%d/" % port, model="frank-lab",
                       api_key=KEY)
    finally:
        server.close()
    assert not r.get("failed") and r["content"] == "ready" and r["completion_tokens"] == 1
    assert server.requests[-1]["auth"] and KEY not in json.dumps(r)


@pytest.mark.parametrize("key", [KEY + "\n", " " + KEY, KEY + "\r\n", KEY + "\t"])
def test_chat_completion_refuses_a_key_with_whitespace_unshown(tmp_path, capsys, key):
    server, port = stand_in(tmp_path)
    try:
        r = run_module(capsys, chat_completion.main, url="http://127.0.0.1:%d" % port, model="m", api_key=key)
    finally:
        server.close()
    assert r["failed"] and "api_key has whitespace around it" in r["msg"] and "Nothing was sent" in r["msg"]
    assert KEY not in json.dumps(r) and server.requests == []


def test_chat_completion_refuses_credentials_in_the_url_unshown(capsys):
    r = run_module(capsys, chat_completion.main, url="http://admin:Hunter2-pass@127.0.0.1:1", model="m")
    assert r["failed"] and "carries credentials" in r["msg"]
    assert "Hunter2-pass" not in json.dumps(r)          # the invocation included


# --- llama_server_gate -------------------------------------------------------------------------------

def gate_env(tmp_path, port, **over):
    env = dict(MODEL_PATH="/nonexistent/model.gguf", ALIAS="frank-lab", BIND_ADDR="127.0.0.1", LISTEN_PORT=str(port),
               CTX_SIZE="1024", PARALLEL="1", VISION="off", SPEC_TYPE="", LLAMA_API_KEY=KEY)
    env.update(over)
    path = tmp_path / "llama-server.env"
    path.write_text("".join("%s='%s'\n" % (k, v) for k, v in env.items()))
    return str(path)


@pytest.fixture
def systemctl(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("systemctl", "journalctl"):
        (bindir / name).write_text(FAKE_SYSTEMCTL)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ.get("PATH", "/usr/bin:/bin")))


def test_the_gate_passes_through_the_client(tmp_path, capsys, systemctl):
    server, port = stand_in(tmp_path)
    try:
        r = run_module(capsys, llama_server_gate.main, env_file=gate_env(tmp_path, port), service="llama-server",
                       health_timeout=5)
    finally:
        server.close()
    assert r["passed"] is True, r["findings"]
    assert KEY not in json.dumps(r)


@pytest.mark.parametrize("faults,step,needle", [
    ("drip-2000", "step 1", "no complete answer within"),       # the peer: a byte every 2 s
    ("endless", "step 1", "longer than the 16777216 bytes"),
    ({"/v1/chat/completions": "drip-300"}, "step 2", "no complete answer within 2 s"),
    ({"/v1/chat/completions": "endless-chunked"}, "step 2", "longer than the 16777216 bytes"),
    ({"/props": "length-5000"}, "step 3", "/props answered HTTP -1"),
])
def test_the_gate_against_a_hostile_peer_ends_in_time_with_a_finding(tmp_path, capsys, systemctl, monkeypatch,
                                                                     faults, step, needle):
    monkeypatch.setattr(lg, "INFO_TIMEOUT", 2)      # 30 s per /props request in production; 2 s keeps the test short
    server, port = stand_in(tmp_path, faults)
    try:
        r, took = timed_run(capsys, llama_server_gate.main, env_file=gate_env(tmp_path, port), service="llama-server",
                            health_timeout=3, request_timeout=2)
    finally:
        server.close()
    assert r["passed"] is False and r["findings"][0].startswith("gate (new shape) %s:" % step), r["findings"]
    assert needle in r["findings"][0], r["findings"]
    # step 1 has 3 s, step 2 2 s, step 3 2 s per request (the /props length lie holds the connection)
    limit = {"step 1": 3, "step 2": 3 + 2, "step 3": 3 + 2 + 2}[step]
    assert took < limit + SLACK, took
    assert KEY not in json.dumps(r)


@pytest.mark.parametrize("key", [KEY + " ", " " + KEY, KEY + "\t"])
def test_the_gate_refuses_a_key_with_whitespace_unshown(tmp_path, capsys, systemctl, key):
    r = run_module(capsys, llama_server_gate.main, env_file=gate_env(tmp_path, 1, LLAMA_API_KEY=key),
                   service="llama-server")
    assert r["failed"] and "LLAMA_API_KEY has whitespace around it" in r["msg"] and "Nothing was checked" in r["msg"]
    assert KEY not in json.dumps(r)


# --- gguf_fetch ----------------------------------------------------------------------------------------

def fetch_args(tmp_path, url, **over):
    data = b"GGUF" + bytes(range(256)) * 64
    (tmp_path / "models").mkdir(exist_ok=True)
    a = dict(url=url, dest=str(tmp_path / "models" / "m.gguf"), size=len(data),
             sha256=hashlib.sha256(data).hexdigest(), disk_margin_bytes=0, retries=1, retry_delay=0, timeout=1)
    a.update(over)
    return a


@pytest.mark.parametrize("token", ["hf_tokenValue0123456789\n", "hf_tokenValue0123456789 \n", "\thf_tokenValue0123456789"])
def test_gguf_fetch_refuses_a_token_with_whitespace_unshown(tmp_path, capsys, token):
    r = run_module(capsys, gguf_fetch.main, **fetch_args(tmp_path, "http://127.0.0.1:1/m.gguf", token=token))
    assert r["failed"] and "token has whitespace around it" in r["msg"]
    assert "hf_tokenValue0123456789" not in json.dumps(r)
    assert os.listdir(str(tmp_path / "models")) == []


def test_gguf_fetch_refuses_credentials_in_the_url_unshown(tmp_path, capsys):
    r = run_module(capsys, gguf_fetch.main, **fetch_args(tmp_path, "https://hf:S3cr3t-pw@huggingface.co/x/m.gguf"))
    assert r["failed"] and "carries credentials" in r["msg"] and "Nothing was downloaded" in r["msg"]
    assert "S3cr3t-pw" not in json.dumps(r)
    assert os.listdir(str(tmp_path / "models")) == []


def test_gguf_fetch_whose_headers_drip_ends_in_bounded_time(tmp_path, capsys):
    server, port = stand_in(tmp_path, "drip-2000")
    try:
        r, took = timed_run(capsys, gguf_fetch.main, **fetch_args(tmp_path, "http://127.0.0.1:%d/m.gguf" % port))
    finally:
        server.close()
    assert r["failed"] and "no answer from" in r["msg"] and r["attempts"] == 2
    assert took < 2 * 1 + SLACK
    assert not os.path.exists(str(tmp_path / "models" / "m.gguf"))


# --- no_log ------------------------------------------------------------------------------------------

SECRET_OPTIONS = ("token", "api_key", "password", "secret", "hf_token")


class _Captured(Exception):
    pass


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "plugins", "modules", "*.py"))))
def test_every_secret_option_is_no_log(path, monkeypatch):
    name = os.path.basename(path)[:-3]
    mod = importlib.import_module("ansible_collections.dankfleet.llm.plugins.modules.%s" % name)
    if not hasattr(mod, "main"):
        pytest.skip("%s is the documentation of an action plugin: no argument spec of its own" % name)
    specs = []

    def capture(*args, **kwargs):
        specs.append(kwargs.get("argument_spec") or args[0])
        raise _Captured()
    monkeypatch.setattr(mod, "AnsibleModule", capture, raising=False)
    try:
        mod.main()
    except (_Captured, SystemExit):
        pass
    assert specs, "%s.main() built no AnsibleModule" % name

    def walk(spec, where):
        for option, entry in spec.items():
            if option in SECRET_OPTIONS or option.endswith("_token") or option.endswith("_key") and "api" in option:
                assert entry.get("no_log") is True, "%s: option %s%s carries a secret and is not no_log" % (
                    name, where, option)
            if isinstance(entry.get("options"), dict):
                walk(entry["options"], "%s%s." % (where, option))
    walk(specs[0], "")
