"""After retire + restore: the earlier runtime is back byte-identical and running again.

Every command goes through Ansible's podman connection (seconds each), so one probe collects the
facts a person would check by hand and the tests read them.
"""
import json

import pytest

PORT = 18320
TRASH = "/root/.AGENTTRASH/20260916-vllm-radiance-retire"

PROBE = r"""
set -u
before=$(python3 -c 'import json; print(" ".join(sorted(json.load(open("/root/retire-before.json")))))')
python3 /root/fingerprint.py /root/retire-after.json $before
echo "{"
echo "\"same\": $(python3 -c 'import json; print(json.dumps(json.load(open("/root/retire-before.json")) == json.load(open("/root/retire-after.json"))))'),"
echo "\"link\": \"$(readlink /etc/systemd/system/vllm-radiance-proxy.service)\","
echo "\"enabled\": \"$(systemctl is-enabled vllm-radiance-proxy.service)\","
echo "\"active\": \"$(systemctl is-active vllm-radiance-proxy.service)\","
echo "\"user_active\": \"$(runuser -u dank -- env XDG_RUNTIME_DIR=/run/user/1000 systemctl --user is-active vllm-radiance-warmup.service)\","
echo "\"answer\": \"$(curl -sf http://127.0.0.1:%(port)d/ | tr -d '\n')\","
echo "\"trash\": \"$(find %(trash)s \( -type f -o -type l \) -printf '%%P ')\""
echo "}"
"""


@pytest.fixture(scope="module")
def probe(host):
    cmd = host.run("bash -c %s", PROBE % {"port": PORT, "trash": TRASH})
    assert cmd.rc == 0, cmd.stderr
    return json.loads(cmd.stdout)


def test_every_file_is_back_byte_identical(probe):
    # owner, group, mode and sha256 (link target for links) of all nine paths, before vs after
    assert probe["same"] is True


def test_the_unit_file_is_still_a_link_into_the_repo(probe):
    assert probe["link"] == "/opt/vllm-radiance/units/vllm-radiance-proxy.service"


def test_the_proxy_is_enabled_running_and_answers_on_its_port(probe):
    assert (probe["enabled"], probe["active"]) == ("enabled", "active")
    assert probe["answer"] == "vllm-radiance proxy"


def test_the_user_unit_runs_again(probe):
    assert probe["user_active"] == "active"


def test_the_trash_keeps_only_the_restored_manifest(probe):
    listing = probe["trash"].split()
    assert len(listing) == 1 and listing[0].startswith("MANIFEST.restored-")
