"""One home for the fleet-wide settings (roles/dankfleet, kubespray's kubespray_defaults): every play lists the role
first, the planner depends on it (so imported alone it plans with the same numbers), no other role or inventory
file carries a default of its own for them, and the settle step types them from the role's argument spec."""
import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import settle as s
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import COLLECTIONS
from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
BIN = os.path.dirname(sys.executable)
ROLE = 'dankfleet.llm.dankfleet'


def _load(path):
    with open(os.path.join(REPO, path)) as handle:
        return role_yaml.load(handle)


DEFAULTS = _load('roles/dankfleet/defaults/main.yml')
SPECS = _load('roles/dankfleet/meta/argument_specs.yml')['argument_specs']
# not `main`: Ansible would validate it itself when a play lists the role, before the settle step
SPEC = SPECS['fleet']['options']
PLAYS = [(os.path.relpath(path, REPO), i, play) for path in sorted(glob.glob(os.path.join(REPO, 'playbooks', '*.yml')))
         for i, play in enumerate(_load(path) or []) if 'import_playbook' not in play and 'ansible.builtin.import_playbook' not in play]


def test_the_plays_are_found():
    assert len(PLAYS) >= 8 and any(p == 'playbooks/deploy_endpoints.yml' for p, _, _ in PLAYS)


@pytest.mark.parametrize('path,index,play', PLAYS, ids=['%s#%d' % (p, i) for p, i, _ in PLAYS])
def test_every_play_reads_the_fleet_defaults_first(path, index, play):
    roles = [r['role'] if isinstance(r, dict) else r for r in play.get('roles') or []]
    assert roles[:1] == [ROLE], '%s play %d (%s) must list %s first in roles:' % (path, index, play.get('name'), ROLE)


def test_the_role_documents_exactly_its_defaults():
    assert sorted(SPECS) == ['fleet']
    assert sorted(DEFAULTS) == sorted(SPEC)
    for name, option in SPEC.items():
        assert option['default'] == DEFAULTS[name], name
        assert name.startswith('dankfleet_')
    with open(os.path.join(REPO, 'roles', 'dankfleet', 'README.md')) as handle:
        readme = handle.read()
    assert all('`%s`' % name in readme for name in DEFAULTS)


def test_no_other_home_gives_them_a_default():
    """No role default, inventory group_vars or `| default(...)` in the planner repeats one of the values."""
    for path in glob.glob(os.path.join(REPO, 'roles', '*', 'defaults', 'main.yml')):
        if os.sep + 'dankfleet' + os.sep in path:
            continue
        names = set(_load(path) or {})
        assert not names & set(DEFAULTS), (path, names & set(DEFAULTS))
        with open(path) as handle:
            text = handle.read()
        for name in DEFAULTS:
            assert '%s | default(' % name not in text, (path, name)
    for path in glob.glob(os.path.join(REPO, 'group_vars', '*', '*.yml')):
        assert not set(_load(path) or {}) & set(DEFAULTS), path


def test_the_planner_depends_on_them():
    deps = [d['role'] if isinstance(d, dict) else d for d in _load('roles/llm_plan/meta/main.yml')['dependencies']]
    assert deps == [ROLE]


@pytest.mark.parametrize('name', sorted(SPEC))
def test_the_settle_step_types_them_from_the_spec(name):
    options = s.spec_options({'dankfleet': SPECS})
    wrong = {'int': 'two', 'bool': 'maybe', 'dict': [1], 'str': ['a']}[SPEC[name]['type']]
    out = s.settle({name: wrong, 'llama_server_model_path': '/m/t.gguf'}, options, [name])
    assert [p.variable for p in out['problems']] == [name], out['problems']


def test_the_planner_imported_alone_plans_with_the_fleet_defaults(tmp_path):
    """A play with none of the collection's plays around it imports llm_plan's preflight: the fleet-wide settings
    resolve from the dependency, and an inventory value still wins."""
    (tmp_path / 'play.yml').write_text(yaml.safe_dump([{
        'name': 'alone', 'hosts': 'all', 'gather_facts': False,
        'tasks': [{'ansible.builtin.import_role': {'name': 'dankfleet.llm.llm_plan', 'tasks_from': 'preflight'}},
                  {'name': 'Show', 'ansible.builtin.debug': {
                      'msg': '{{ [llm_plan_floor_bytes | int, llm_plan_lean_layers | int, dankfleet_offline] }}'}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_STDOUT_CALLBACK='ansible.posix.json',
               ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, PATH='%s:%s' % (BIN, os.environ['PATH']))
    env.pop('PYTHONPATH', None)
    shown = []
    for extra in ([], ['-e', 'dankfleet_plan_floor_bytes=2147483648']):
        run = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-i', 'lonely,', '-c', 'local',
                              '-e', 'ansible_python_interpreter=%s' % sys.executable,
                              '-e', 'llama_server_model_path=/m/t.gguf', str(tmp_path / 'play.yml')] + extra,
                             env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        task = next(t for t in json.loads(run.stdout)['plays'][0]['tasks'] if t['task']['name'] == 'Show')
        shown.append(task['hosts']['lonely']['msg'])
    assert shown == [[1073741824, 0, False], [2147483648, 0, False]]
