"""The preload callback: it names every filter file of the collection, each file defines the filter it is
named after (the convention the preload relies on), and through ansible-playbook it loads the plugins
before the first task without changing what the play does."""
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ansible_collections.dankfleet.llm.plugins.callback import preload
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import ansible_env

REPO = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent


def test_every_filter_file_is_named_and_defines_its_filter():
    names = preload.collection_filter_names()
    on_disk = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.py") if not p.name.startswith("_"))
    assert names == on_disk and "host_state_current" in names
    for name in names:
        module = importlib.import_module("ansible_collections.dankfleet.llm.plugins.filter." + name)
        assert name in module.FilterModule().filters(), f"plugins/filter/{name}.py does not define the filter {name}"


def run_play(tmp_path, config):
    """A one-task play with ansible-playbook -vvv under `config` (no callback enabled by the environment)."""
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent("""\
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: a collection filter and a builtin one, in a worker forked after the preload
              ansible.builtin.debug:
                msg: "{{ {'exists': true, 'type': 'directory', 'mode': '0755'} | dankfleet.llm.host_state_current('directory', mode='0755')
                         and ('a,b' | split(',') | length == 2) }}"
        """))
    env = ansible_env(ANSIBLE_CONFIG=str(config), ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false",
                      ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    return subprocess.run([str(BIN / "ansible-playbook"), "-vvv", "-i", "localhost,", "-c", "local", str(play)],
                          env=env, capture_output=True, text=True, cwd=tmp_path)


def test_enabled_by_the_project_config(tmp_path):
    """The project's ansible.cfg is what turns the preload on: under an empty config the same play runs
    without it (the callback needs enabling), under the project's it reports its preload."""
    empty = tmp_path / "empty.cfg"
    empty.write_text("[defaults]\n")
    without = run_play(tmp_path, empty)
    assert without.returncode == 0, without.stdout[-2000:] + without.stderr[-2000:]
    assert "dankfleet.llm.preload" not in without.stdout
    with_project = run_play(tmp_path, REPO / "ansible.cfg")
    assert with_project.returncode == 0, with_project.stdout[-2000:] + with_project.stderr[-2000:]
    assert "dankfleet.llm.preload: " in with_project.stdout


def test_a_play_runs_the_same_with_the_plugins_preloaded(tmp_path):
    run = run_play(tmp_path, REPO / "ansible.cfg")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "dankfleet.llm.preload: " in run.stdout and "not preloaded" not in run.stdout
    loaded = int(run.stdout.split("dankfleet.llm.preload: ", 1)[1].split()[0])
    assert loaded >= len(preload.collection_filter_names()) + 10
    assert '"msg": true' in run.stdout or "msg: true" in run.stdout
