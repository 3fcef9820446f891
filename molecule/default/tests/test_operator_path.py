"""The operator's path on the lab host, after converge + idempotence:

1. the endpoint is gated: unit active, no restarts, a real completion;
2. `deploy-frank-medium.yml --check --diff` changes nothing on the host, proved by
   a recursive listing with checksums of every path the deploy touches, before and after;
3. the rollback playbook refuses (nothing changed) when neither a recorded gated shape nor the
   inventory's shape is a layer split;
4. from a deliberately retired state (the frank-medium unit retired into the trash,
   an impostor serving the port) the rollback playbook retires the impostor and
   brings back a gated layer-split endpoint.
No test depends on another having run: what converge left is read once, before any test (the
autouse `converged` probe), and the one test that changes the host builds its retired state in its
own fixture and ends with the endpoint gated again.
"""
import json

import pytest

from ansible_collections.dankfleet.llm.molecule.shared import endpoint_checks as checks

PORT = "18470"
UNIT = "frank-medium"
TOUCHED = ["/opt/llama.cpp", "/var/lib/dankfleet", "/etc/llama-server", "/usr/local/libexec/dankfleet",
           "/var/lib/frank-medium", "/etc/systemd/system", "/var/cache/llama-cpp-build/ccache",
           "/etc/prometheus/rules.d", "/var/lib/grafana/dashboards", "/var/log/dankfleet"]


def playbook(*args):
    return checks.playbook(*args, inventory=checks.scenario_inventory())


def snapshot(host):
    return checks.snapshot(host, TOUCHED, UNIT)


def chat(host):
    return checks.chat(host, PORT)


@pytest.fixture(scope="module", autouse=True)
def converged(host):
    """What converge and idempotence left, read before any test of this file runs (whatever their order)."""
    svc = host.service(UNIT)
    return {
        "running": svc.is_running, "enabled": svc.is_enabled,
        "restarts": host.run("systemctl show -p NRestarts --value %s", UNIT).stdout.strip(),
        "completion_tokens": chat(host)["usage"]["completion_tokens"],
        "rollback_env": host.file("/var/lib/frank-medium/rollback/env").exists,
        "rules": host.file("/etc/prometheus/rules.d/frank-medium.rules.yml").content_string,
        "record": json.loads(host.file("/var/lib/frank-medium/plan-vs-actual.json").content_string)[-1],
        "contract": json.loads((checks.REPO / ".lab" / "client-contracts"
                                / "dankfleet-default.frank-medium.contract.json").read_text()),
    }


def test_endpoint_is_gated(converged):
    assert converged["running"] and converged["enabled"]
    assert converged["restarts"] == "0"
    assert converged["completion_tokens"] >= 1
    assert converged["rollback_env"]
    # observability: the promtool-validated rules carry the spec-decode alert
    assert "LlmSpecDecodeOff" in converged["rules"]
    # the verify stage ran after the gate: its results are in that deploy's plan-vs-actual record
    record = converged["record"]
    verify = {c["name"]: c for c in record["verify"]["checks"]}
    assert record["verify"]["passed"] is True
    for name in ("stream", "tools", "reasoning_effort", "slots", "window"):
        assert verify[name]["status"] == "pass", verify[name]
    assert all(s["draft_n"] > 0 for s in verify["slots"]["figures"]["slots"]), verify["slots"]
    assert verify["window"]["figures"]["slot_ctx"] == 4096 and verify["window"]["figures"]["fraction"] == 1.0
    assert record["verify"]["contract"]["reasoning_efforts"] == {"low": 200, "medium": 200, "high": 200, "xhigh": 200}
    # ... and the client contract on the controller
    assert converged["contract"]["context_per_slot"] == 4096


def test_check_diff_changes_nothing(host):
    before = snapshot(host)
    run = playbook("deploy-frank-medium.yml", "--check", "--diff")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "Fit table" in run.stdout and "yes <- chosen" in run.stdout
    assert "up to date" in run.stdout            # the build stage's verdict
    assert "verified" in run.stdout              # the fetch stage's verdict
    assert "check mode: would verify http://127.0.0.1:18470" in run.stdout   # what verify would send
    after = snapshot(host)
    assert before == after


def test_rollback_refuses_without_a_layer_split_shape(host):
    before = snapshot(host)
    run = playbook("rollback-frank-medium.yml", "-e", "llama_server_state_dir=/var/lib/no-such-shape",
                   "-e", "llama_server_split_mode=row")
    assert run.returncode != 0
    assert "No gated shape is recorded" in run.stdout and "not a layer split" in run.stdout
    assert "Nothing was changed" in run.stdout
    assert snapshot(host) == before


@pytest.fixture
def retired_with_impostor(host, tmp_path):
    """The state a rollback starts from, built here: frank-medium retired on purpose, an impostor on its port."""
    retire = checks.retire_playbook(tmp_path / "retire.yml", "Retire frank-medium on purpose",
                                    "frank-medium-on-purpose", PORT)
    run = playbook(str(retire))
    assert run.returncode == 0, run.stdout[-4000:]
    assert not host.file("/etc/systemd/system/frank-medium.service").exists
    impostor = host.run(
        "printf '[Unit]\\nDescription=impostor on the endpoint port\\n[Service]\\n"
        "ExecStart=/usr/bin/python3 -m http.server %s --bind 127.0.0.1\\n' "
        "> /etc/systemd/system/radiance-proxy.service && systemctl daemon-reload && "
        "systemctl start radiance-proxy && sleep 1 && "
        "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%s/", PORT, PORT)
    assert impostor.stdout.endswith("200"), impostor.stdout + impostor.stderr
    return tmp_path


def test_rollback_from_a_retired_state(host, retired_with_impostor):
    tmp_path = retired_with_impostor
    extra = tmp_path / "rollback-vars.json"
    extra.write_text(json.dumps({"dankfleet_rollback_retire": [
        {"name": "radiance", "units": [{"name": "radiance-proxy.service"}], "ports": [int(PORT)]}]}))
    run = playbook("rollback-frank-medium.yml", "-e", f"@{extra}")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "gate (rolled-back shape) passed" in run.stdout
    assert "verify passed" in run.stdout

    assert host.service(UNIT).is_running
    assert not host.service("radiance-proxy").is_running
    assert [m["id"] for m in checks.models(host, PORT)["data"]] == ["frank-medium"]
    assert chat(host)["usage"]["completion_tokens"] >= 1
    env = host.file("/etc/llama-server/frank-medium.env").content_string
    assert "SPLIT_MODE=layer" in env
