"""After retire + restore: the earlier runtime is back byte-identical and running again."""
import json

import pytest

PORT = 18320
TRASH = "/root/.AGENTTRASH/20260916-vllm-radiance-retire"


@pytest.fixture(scope="module")
def before(host):
    return json.loads(host.file("/root/retire-before.json").content_string)


def test_every_file_is_back_byte_identical(host, before):
    cmd = host.run("python3 /root/fingerprint.py /root/retire-after.json " + " ".join(sorted(before)))
    assert cmd.rc == 0, cmd.stderr
    after = json.loads(host.file("/root/retire-after.json").content_string)
    assert after == before


def test_the_unit_file_is_still_a_link_into_the_repo(host):
    unit = host.file("/etc/systemd/system/vllm-radiance-proxy.service")
    assert unit.is_symlink
    assert unit.linked_to == "/opt/vllm-radiance/units/vllm-radiance-proxy.service"


def test_the_proxy_is_enabled_running_and_answers_on_its_port(host):
    svc = host.service("vllm-radiance-proxy.service")
    assert svc.is_enabled
    assert svc.is_running
    assert host.socket("tcp://127.0.0.1:%d" % PORT).is_listening
    out = host.check_output("curl -sf http://127.0.0.1:%d/" % PORT)
    assert out == "vllm-radiance proxy"


def test_the_user_unit_runs_again(host):
    out = host.check_output(
        "runuser -u dank -- env XDG_RUNTIME_DIR=/run/user/1000 systemctl --user is-active vllm-radiance-warmup.service")
    assert out == "active"


def test_the_trash_keeps_only_the_restored_manifest(host):
    listing = host.check_output("find %s -type f -o -type l" % TRASH).split()
    assert len(listing) == 1
    assert listing[0].startswith(TRASH + "/MANIFEST.restored-")
