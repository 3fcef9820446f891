"""The lab model mirror: a unit on a real systemd host that serves Range requests."""
import json

PORT = 18171


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
