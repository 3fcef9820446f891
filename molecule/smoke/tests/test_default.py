def test_systemd(host):
    assert host.run("systemctl is-system-running").stdout.strip() in ("running", "degraded")
