"""After retire + restore: the earlier runtime is back byte-identical and running again.

Every command goes through Ansible's podman connection (seconds each), so one probe collects the
facts a person would check by hand and the tests read them.
"""
import json
from pathlib import Path

import pytest
import yaml

COMMON = yaml.safe_load((Path(__file__).resolve().parents[1] / "vars" / "common.yml").read_text())
PORT = COMMON["retire_test_port"]
TRASH = COMMON["retire_test_dir"]
PATHS = COMMON["retire_test_paths"]   # what prepare fingerprinted before the retire

# set -e: a fingerprint that cannot be taken (a path not back) fails the probe instead of comparing less
PROBE = r"""
set -eu
python3 /root/fingerprint.py /root/retire-after.json %(paths)s
echo "{"
echo "\"before\": $(cat /root/retire-before.json),"
echo "\"after\": $(cat /root/retire-after.json),"
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
    cmd = host.run("bash -c %s", PROBE % {"port": PORT, "trash": TRASH, "paths": " ".join(PATHS)})
    assert cmd.rc == 0, cmd.stderr
    return json.loads(cmd.stdout)


def test_every_file_is_back_byte_identical(probe):
    # owner, group, mode and sha256 (link target for links) of all nine paths, before vs after; both
    # fingerprints must hold every path (empty equals empty, and proves nothing)
    assert sorted(probe["before"]) == sorted(PATHS) and len(PATHS) == 9
    assert all(row.get("sha256") or row.get("link") for row in probe["before"].values()), probe["before"]
    assert probe["after"] == probe["before"]


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
