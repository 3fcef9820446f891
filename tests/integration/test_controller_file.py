"""dankfleet.llm.controller_file through Ansible itself: the deploy's report for its caller is written on
the controller by the action alone - the play's host is unreachable here (an ssh host on TEST-NET-1),
so a task that ran a module over the host's connection would fail; check mode writes nothing, --diff
shows the change, and a second run with the same content is unchanged."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

PLAY = """\
- hosts: faraway
  gather_facts: false
  tasks:
    - name: report
      dankfleet.llm.controller_file:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        content: "{{ {'host': inventory_hostname, 'url': url} | to_nice_json }}"
        mode: "0640"
"""


def run_play(tmp_path, *args):
    (tmp_path / "play.yml").write_text(textwrap.dedent(PLAY))
    # unreachable: any connection attempt fails within the timeout
    (tmp_path / "hosts").write_text("faraway ansible_host=192.0.2.1 ansible_connection=ssh ansible_timeout=2\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_STDOUT_CALLBACK="json")
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts"), str(tmp_path / "play.yml"),
                          "-e", "out=%s" % (tmp_path / "report"), *args],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(run.stdout)["plays"][0]["tasks"][0]["hosts"]["faraway"]


def test_written_on_the_controller_without_the_host(tmp_path):
    (tmp_path / "report").mkdir()
    report = tmp_path / "report" / "faraway.json"
    checked = run_play(tmp_path, "-e", "url=http://a", "--check", "--diff")
    assert checked["changed"] is True and '"url": "http://a"' in checked["diff"]["after"]
    assert not report.exists()
    first = run_play(tmp_path, "-e", "url=http://a")
    assert first["changed"] is True and first["dest"] == str(report)
    assert json.loads(report.read_text()) == {"host": "faraway", "url": "http://a"}
    assert oct(report.stat().st_mode & 0o777) == "0o640"
    assert run_play(tmp_path, "-e", "url=http://a")["changed"] is False
    assert run_play(tmp_path, "-e", "url=http://b")["changed"] is True
    assert json.loads(report.read_text())["url"] == "http://b"


def test_a_missing_directory_is_refused_naming_it(tmp_path):
    (tmp_path / "play.yml").write_text(textwrap.dedent(PLAY))
    (tmp_path / "hosts").write_text("faraway ansible_host=192.0.2.1 ansible_connection=ssh ansible_timeout=2\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(tmp_path / "hosts"), str(tmp_path / "play.yml"),
                          "-e", "out=%s" % (tmp_path / "nowhere"), "-e", "url=x"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode != 0
    assert "does not exist on the controller; create it first" in run.stdout
    assert not (tmp_path / "nowhere").exists()
