"""The operator-path verifiers' before/after listing (molecule/shared/endpoint_checks.py) must be able to
fail: a listing of nothing, or one that lacks a path it was asked for, compares equal to itself."""
import shlex

import pytest

from ansible_collections.dankfleet.llm.molecule.shared import endpoint_checks as checks

SHA = "0" * 64
LISTING = ("/etc/llama-server d 755 0:0 4096 1.0 \n"
           "/etc/llama-server/frank-medium.env f 644 0:0 12 1.0 \n"
           "/var/log/dankfleet d 755 0:0 4096 1.0 \n"
           "%s  /etc/llama-server/frank-medium.env\n"
           "MainPID=42\nNRestarts=0\n" % SHA)


def test_a_listing_of_every_path_with_a_file_passes():
    checks.check_listing(LISTING, ["/etc/llama-server", "/var/log/dankfleet"])


@pytest.mark.parametrize("text", ["", "MainPID=0\nNRestarts=0\nActiveEnterTimestampMonotonic=0\n"])
def test_an_empty_listing_fails(text):
    with pytest.raises(AssertionError, match="lacks"):
        checks.check_listing(text, ["/etc/llama-server"])


def test_a_missing_path_fails_by_name():
    with pytest.raises(AssertionError, match="/var/lib/grafana/dashboards"):
        checks.check_listing(LISTING, ["/etc/llama-server", "/var/lib/grafana/dashboards"])


def test_a_listing_without_a_checksum_fails():
    text = "\n".join(line for line in LISTING.splitlines() if not line.startswith(SHA))
    with pytest.raises(AssertionError, match="no file checksum"):
        checks.check_listing(text, ["/etc/llama-server"])


class _Host:
    """A testinfra host stand-in: records the command, answers with `stdout`."""

    def __init__(self, stdout):
        self.stdout, self.commands = stdout, []

    def run(self, command, *args):
        self.commands.append((command, args))
        return type("Result", (), {"rc": 0, "stdout": self.stdout, "stderr": ""})()


def test_the_snapshot_gives_find_each_path_as_its_own_word():
    """host.run's %s quotes an argument whole: every path joined into one argument made find list nothing."""
    host = _Host(LISTING)
    assert checks.snapshot(host, ["/etc/llama-server", "/var/log/dankfleet"], "frank-medium") == LISTING
    ((command, args),) = host.commands
    assert args == ()
    words = shlex.split(command.split(";", 1)[0])
    assert words[:3] == ["find", "/etc/llama-server", "/var/log/dankfleet"], words
