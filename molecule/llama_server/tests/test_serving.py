"""After the scenario: shape (b) serves (restored by the rollback from the failed shape (d))."""
import json

import pytest

UNIT = "llama-server.service"
BASE = "http://127.0.0.1:18310"
ENV = "/etc/llama-server/llama-server.env"
LAUNCHER = "/usr/local/libexec/dankfleet/serve-llama-server"
MODELS = "/srv/dankfleet-cache/models"


def show(host, *props):
    out = host.check_output("systemctl show %s -p %s", UNIT, ",".join(props))
    return dict(line.split("=", 1) for line in out.splitlines())


def test_the_unit_is_enabled_running_and_never_restarted(host):
    svc = host.service(UNIT)
    assert svc.is_enabled
    assert svc.is_running
    state = show(host, "NRestarts", "ActiveState", "MainPID")
    assert state["ActiveState"] == "active"
    assert state["NRestarts"] == "0"
    assert state["MainPID"] != "0"


def test_the_unit_is_hardened(host):
    props = show(host, "User", "LimitMEMLOCK", "NoNewPrivileges", "ProtectSystem", "PrivateTmp",
                 "DevicePolicy", "Restart", "ReadWritePaths", "RestartPreventExitStatus")
    assert props == {
        "User": "llama", "LimitMEMLOCK": "infinity", "NoNewPrivileges": "yes", "ProtectSystem": "strict",
        "PrivateTmp": "yes", "DevicePolicy": "closed", "Restart": "on-failure",
        "ReadWritePaths": "/var/lib/llama-server/cache", "RestartPreventExitStatus": "78",
    }


def test_the_env_file_is_root_owned_0640_and_carries_shape_b(host):
    env = host.file(ENV)
    assert (env.user, env.group, env.mode) == ("root", "llama", 0o640)
    text = env.content_string
    assert "\nSPEC_TYPE=draft-simple,ngram-mod\n" in text
    assert "\nDRAFT_MODEL_PATH=%s/draft-small.gguf\n" % MODELS in text
    assert "CHAT_TEMPLATE_FILE=\n" in text  # the failed shape's template is gone again
    assert "LLAMA_API_KEY" not in text  # shape (b) has no key; shape (a) had one
    assert "\nLLAMA_RELEASE=/opt/llama.cpp/releases/b11434-cpu-test\n" in text


def test_the_rollback_snapshot_is_the_live_shape_and_no_gate_is_pending(host):
    for live, name in ((ENV, "env"), (LAUNCHER, "launcher"), ("/etc/systemd/system/" + UNIT, "unit")):
        assert host.file("/var/lib/llama-server/rollback/" + name).sha256sum == host.file(live).sha256sum
    assert not host.file("/var/lib/llama-server/gate-pending").exists


def test_the_endpoint_answers_with_tokens_and_drafts(host):
    assert host.socket("tcp://127.0.0.1:18310").is_listening
    body = json.dumps({"model": "frank-medium-lab", "max_tokens": 16, "temperature": 0,
                       "messages": [{"role": "user", "content": "the quick brown fox " * 8}]})
    out = json.loads(host.check_output("curl -sf -H 'Content-Type: application/json' -d %s %s/v1/chat/completions",
                                       body, BASE))
    assert out["usage"]["completion_tokens"] >= 1
    models = json.loads(host.check_output("curl -sf %s/v1/models", BASE))
    assert "frank-medium-lab" in [m["id"] for m in models["data"]]
    metrics = host.check_output("curl -sf %s/metrics", BASE)
    drafts = [line for line in metrics.splitlines() if line.startswith("llamacpp:spec_decode_num_drafts_total ")]
    assert drafts and float(drafts[0].split()[1]) > 0


@pytest.mark.parametrize("override, reason", [
    ("MODEL_PATH=/nonexistent/model.gguf", "the model /nonexistent/model.gguf is missing"),
    ("LLAMA_BIN=/nonexistent/llama-server", "binary /nonexistent/llama-server is missing"),
    ("DRAFT_MODEL_PATH=/nonexistent/draft.gguf", "the drafter /nonexistent/draft.gguf for draft-simple is missing"),
    ("VISION=on MMPROJ_PATH=/nonexistent/mmproj.gguf", "the mmproj /nonexistent/mmproj.gguf is missing"),
    ("SPEC_TYPE=draft-mtp,draft-dflash", "chains draft-mtp with draft-dflash"),
])
def test_the_launcher_refuses_to_start_without_its_inputs(host, override, reason):
    # The live env file, with one thing broken; run as the service user, like the unit does.
    cmd = host.run("set -a; . %s; set +a; export " + override + "; runuser -u llama -- %s", ENV, LAUNCHER)
    assert cmd.rc == 78, cmd.stderr
    assert "refusing to start" in cmd.stderr and reason in cmd.stderr, cmd.stderr


def test_the_launcher_takes_no_arguments(host):
    cmd = host.run("runuser -u llama -- %s --port 1", LAUNCHER)
    assert cmd.rc == 78
    assert "takes no arguments" in cmd.stderr
