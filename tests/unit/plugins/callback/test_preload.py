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

REPO = Path(__file__).resolve().parents[4]
BIN = Path(sys.executable).parent


def test_every_filter_file_is_named_and_defines_its_filter():
    names = preload.collection_filter_names()
    on_disk = sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.py") if not p.name.startswith("_"))
    assert names == on_disk and "host_state_current" in names
    for name in names:
        module = importlib.import_module("ansible_collections.dankfleet.llm.plugins.filter." + name)
        assert name in module.FilterModule().filters(), f"plugins/filter/{name}.py does not define the filter {name}"


def test_enabled_by_the_project_config():
    cfg = (REPO / "ansible.cfg").read_text()
    assert "callbacks_enabled = dankfleet.llm.preload" in cfg


def test_a_play_runs_the_same_with_the_plugins_preloaded(tmp_path):
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
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    run = subprocess.run([str(BIN / "ansible-playbook"), "-vvv", "-i", "localhost,", "-c", "local", str(play)],
                         env=env, capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "dankfleet.llm.preload: " in run.stdout and "not preloaded" not in run.stdout
    loaded = int(run.stdout.split("dankfleet.llm.preload: ", 1)[1].split()[0])
    assert loaded >= len(preload.collection_filter_names()) + 10
    assert '"msg": true' in run.stdout or "msg: true" in run.stdout
