"""The lab model mirror: a unit on a real systemd host that serves Range requests."""
import json
from pathlib import Path

from ansible_collections.dankfleet.llm.molecule.shared import endpoint_checks as checks

PORT = 18171
SCENARIO = Path(__file__).resolve().parents[1]


def test_systemd_is_pid1_and_running(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    assert host.run("systemctl is-system-running").stdout.strip() in ("running", "degraded")


def test_unit_active_and_enabled(host):
    svc = host.service("dankfleet-model-mirror")
    assert svc.is_running
    assert svc.is_enabled
    nrestarts = host.run("systemctl show -p NRestarts --value dankfleet-model-mirror").stdout.strip()
    assert nrestarts == "0"


def test_port_answers_range_with_the_right_bytes(host):
    manifest = json.loads(host.file("/srv/dankfleet-cache/models/MANIFEST.json").content_string)
    name, entry = sorted(manifest.items())[0]
    rel = entry["path"].rsplit("/", 1)[-1]
    out = host.run(
        "curl -s -o /tmp/part -w '%%{http_code} %%{size_download}' -r 0-1023 http://127.0.0.1:%s/%s",
        str(PORT), rel)
    assert out.stdout.split() == ["206", "1024"], out.stdout
    head = host.run("head -c 1024 /srv/dankfleet-cache/models/%s | sha256sum", rel).stdout.split()[0]
    got = host.run("sha256sum /tmp/part").stdout.split()[0]
    assert got == head
    assert host.run("head -c 4 /tmp/part").stdout == "GGUF"


WRITES = ("Create the mirror's program directory", "Install the Range HTTP server", "Template the mirror's unit",
          "Enable and start the mirror")


def converge(monkeypatch):
    """The scenario's converge.yml again, against its own inventory: {task name without the role: result}."""
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.builtin.json")
    run = checks.playbook(str(SCENARIO / "converge.yml"), inventory=checks.scenario_inventory(), timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    tasks = json.loads(run.stdout)["plays"][0]["tasks"]
    return {t["task"]["name"].split(" : ", 1)[-1]: next(iter(t["hosts"].values()), {}) for t in tasks}


def test_a_converged_rerun_reads_once_and_skips_every_write(host, monkeypatch):
    """The re-run's one host round trip is the probe: the files, the directory and the unit are found as
    the role leaves them (the unit rendered on the controller by the lookup equals the file the template
    task wrote), so every writing task is skipped."""
    again = converge(monkeypatch)
    probe = again["Read the mirror's files and unit (one read-only probe)"]
    assert probe["units"]["dankfleet-model-mirror.service"]["ActiveState"] == "active"
    assert {name: again[name].get("skipped") for name in WRITES} == dict.fromkeys(WRITES, True)


def test_an_edited_unit_is_put_back_and_the_mirror_restarted(host, monkeypatch):
    unit = "/etc/systemd/system/dankfleet-model-mirror.service"
    written = host.file(unit).content_string
    pid = host.run("systemctl show -p MainPID --value dankfleet-model-mirror").stdout.strip()
    assert host.run("sed -i 's/--quiet/--quiet /' %s", unit).rc == 0
    again = converge(monkeypatch)
    assert again["Template the mirror's unit"]["changed"] is True
    assert again["Install the Range HTTP server"].get("skipped") is True
    assert host.file(unit).content_string == written
    assert host.run("systemctl show -p MainPID --value dankfleet-model-mirror").stdout.strip() != pid
    assert host.service("dankfleet-model-mirror").is_running
