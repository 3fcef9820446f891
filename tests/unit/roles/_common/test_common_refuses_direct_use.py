# -*- coding: utf-8 -*-
"""roles/_common is internal: every entry point refuses a caller that is not one of the collection's roles
(a bare play, another project's role), naming the roles to use instead, and lets the collection's roles in.
Each case runs ansible-playbook in check mode on a local stand-in host (nothing leaves the controller)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import json
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
BIN = os.path.dirname(sys.executable)
ENTRY_POINTS = sorted(os.path.splitext(os.path.basename(p))[0]
                      for p in glob.glob(os.path.join(REPO, 'roles', '_common', 'tasks', '*.yml')))
GUARD = 'dankfleet.llm._common : Refuse direct use - _common is imported only by the collection\'s roles'


def _run(tmp_path, tasks, roles=None):
    for name, role_tasks in (roles or {}).items():
        (tmp_path / 'roles' / name / 'tasks').mkdir(parents=True)
        (tmp_path / 'roles' / name / 'tasks' / 'main.yml').write_text(yaml.safe_dump(role_tasks))
    (tmp_path / 'hosts.yml').write_text(json.dumps({'all': {'hosts': {'standin': {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}}))
    (tmp_path / 'play.yml').write_text(yaml.safe_dump([{
        'name': 'bare', 'hosts': 'all', 'gather_facts': False, 'tasks': tasks}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_STDOUT_CALLBACK='ansible.posix.json',
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), ANSIBLE_ROLES_PATH=str(tmp_path / 'roles'),
               PATH='%s:%s' % (BIN, os.environ['PATH']))
    run = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-C', '-i', str(tmp_path / 'hosts.yml'),
                          str(tmp_path / 'play.yml')], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    results = [(t['task']['name'], t['hosts'].get('standin', {}))
               for t in json.loads(run.stdout)['plays'][0]['tasks']]
    return run.returncode, results


def _guard(results):
    found = [r for name, r in results if name == GUARD]
    assert len(found) == 1, [name for name, _ in results]
    return found[0]


def test_every_entry_point_is_guarded():
    assert len(ENTRY_POINTS) >= 6
    for name in ENTRY_POINTS:
        with open(os.path.join(REPO, 'roles', '_common', 'tasks', name + '.yml')) as handle:
            first = yaml.safe_load(handle)[0]
        assert first.get('ansible.builtin.import_tasks') == 'guard/parent.yml', name


@pytest.mark.parametrize('entry_point', ENTRY_POINTS)
def test_a_bare_play_is_refused_naming_the_roles_to_use(tmp_path, entry_point):
    rc, results = _run(tmp_path, [{'ansible.builtin.import_role': {
        'name': 'dankfleet.llm._common', 'tasks_from': entry_point, 'rolespec_validate': False}}])
    guard = _guard(results)
    assert rc != 0 and guard.get('failed') is True
    assert 'cannot be used directly (imported from a play, not from a role)' in guard['msg']
    assert 'dankfleet.llm.llama_server' in guard['msg'] and 'dankfleet.llm.runtime_retire' in guard['msg']
    # nothing after the guard ran
    assert [name for name, _ in results][-1] == GUARD


def test_another_projects_role_is_refused(tmp_path):
    rc, results = _run(tmp_path, [{'ansible.builtin.import_role': {'name': 'site_tweaks'}}], roles={'site_tweaks': [{
        'name': 'borrow _common', 'ansible.builtin.import_role': {
            'name': 'dankfleet.llm._common', 'tasks_from': 'units', 'rolespec_validate': False}}]})
    guard = _guard(results)
    assert rc != 0 and guard.get('failed') is True
    assert '(imported by site_tweaks)' in guard['msg']


def test_a_collection_role_gets_past_the_guard(tmp_path):
    # runtime_retire's ports step, as after a retire that stopped something listening on a (free) port
    rc, results = _run(tmp_path, [{'ansible.builtin.import_role': {'name': 'dankfleet.llm.runtime_retire',
                                                                   'tasks_from': 'ports', 'rolespec_validate': False},
                                   'vars': {'_runtime_retire_wait_ports': [59999]}}])
    names = [name for name, _ in results]
    if GUARD not in names:
        pytest.fail('runtime_retire ports did not reach _common: %s' % names)
    assert _guard(results).get('failed') is not True
