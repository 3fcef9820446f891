# -*- coding: utf-8 -*-
"""The plan role's entry points other than main list no options of their own (ansible-doc lists each option once:
main's) and check their inputs against main's options with their first task - as strictly as main does (issue 37).

The checks run ansible-playbook in check mode on a local stand-in host (nothing leaves the controller)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'llm_plan')
BIN = os.path.dirname(sys.executable)
VALIDATE = "dankfleet.llm.llm_plan : Validate the inputs against the main entry point's options"
with open(os.path.join(ROLE, 'meta', 'argument_specs.yml')) as _handle:
    SPECS = yaml.safe_load(_handle)['argument_specs']
SECONDARY = sorted(entry for entry in SPECS if entry != 'main')
BAD = {'llm_plan_floor_bytes': 'lots', 'llm_plan_header_facts': ['not', 'a', 'mapping']}


def _tasks(path):
    with open(os.path.join(REPO, path)) as handle:
        return yaml.safe_load(handle)


def _run(tmp_path, entry, extra):
    (tmp_path / 'hosts.yml').write_text(json.dumps({'all': {'hosts': {'standin': dict(
        extra, ansible_connection='local', ansible_python_interpreter=sys.executable)}}}))
    (tmp_path / 'play.yml').write_text(yaml.safe_dump([{'name': 'entry', 'hosts': 'all', 'gather_facts': False, 'tasks': [
        {'ansible.builtin.include_role': {'name': 'dankfleet.llm.llm_plan', 'tasks_from': entry}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_STDOUT_CALLBACK='ansible.posix.json',
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), PATH='%s:%s' % (BIN, os.environ['PATH']))
    run = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-C', '-i', str(tmp_path / 'hosts.yml'),
                          str(tmp_path / 'play.yml')], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    return run.returncode, [(t['task']['name'], t['hosts'].get('standin', {}))
                            for t in json.loads(run.stdout)['plays'][0]['tasks']]


def test_secondary_entry_points_list_no_options_and_point_at_main():
    assert len(SPECS['main']['options']) >= 10 and SECONDARY == ['facts', 'plan', 'preflight', 'report']
    for entry in SECONDARY:
        assert not SPECS[entry].get('options'), entry
        assert "ansible-doc -t role dankfleet.llm.llm_plan -e main" in ' '.join(SPECS[entry]['description']), entry


@pytest.mark.parametrize('entry', SECONDARY)
def test_the_first_task_checks_main_options(entry):
    first = _tasks(os.path.join('roles', 'llm_plan', 'tasks', entry + '.yml'))[0]
    assert first.get('ansible.builtin.import_tasks') == 'validate.yml', entry


def test_main_skips_the_check_already_made():
    # main's own (implicit) check ran: its imports skip theirs (a play's imports each check, the role's variable
    # being private to it: tests/unit/playbooks/test_role_boundaries.py)
    assert [t.get('vars') for t in _tasks('roles/llm_plan/tasks/main.yml')] == [{'_llm_plan_spec_checked': True}] * 4


def _errors(results):
    failed = [(name, r) for name, r in results if r.get('failed')]
    assert len(failed) == 1, [name for name, _ in results]
    return failed[0][0], sorted(failed[0][1]['argument_errors'])


@pytest.fixture(scope='module')
def main_errors(tmp_path_factory):
    rc, results = _run(tmp_path_factory.mktemp('main'), 'main', BAD)
    assert rc != 0
    name, errors = _errors(results)
    assert name.startswith("dankfleet.llm.llm_plan : Validating arguments against arg spec 'main'")
    assert len(errors) == 2 and 'llm_plan_floor_bytes' in errors[0] + errors[1]
    return errors


@pytest.mark.parametrize('entry', SECONDARY)
def test_a_bad_input_is_refused_as_main_refuses_it(tmp_path, main_errors, entry):
    rc, results = _run(tmp_path, entry, BAD)
    assert rc != 0
    assert _errors(results) == (VALIDATE, main_errors)
