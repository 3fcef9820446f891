# -*- coding: utf-8 -*-
"""The serve role's entry points other than main document only their own options (ansible-doc lists each option
once) and check their inputs against main's options with their first task - as strictly as main does.

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
ROLE = os.path.join(REPO, 'roles', 'llama_server')
BIN = os.path.dirname(sys.executable)
VALIDATE = "dankfleet.llm.llama_server : Validate the inputs against the main entry point's options"
with open(os.path.join(ROLE, 'meta', 'argument_specs.yml')) as _handle:
    SPECS = yaml.safe_load(_handle)['argument_specs']
SECONDARY = sorted(entry for entry in SPECS if entry != 'main')
BAD = {'llama_server_port': 'not-a-port', 'llama_server_parallel': [1]}


def _tasks(name):
    with open(os.path.join(ROLE, 'tasks', name + '.yml')) as handle:
        return yaml.safe_load(handle)


def _run(tmp_path, entry, extra):
    (tmp_path / 'hosts.yml').write_text(json.dumps({'all': {'hosts': {'standin': dict(
        extra, ansible_connection='local', ansible_python_interpreter=sys.executable)}}}))
    (tmp_path / 'play.yml').write_text(yaml.safe_dump([{'name': 'entry', 'hosts': 'all', 'gather_facts': False, 'tasks': [
        {'ansible.builtin.include_role': {'name': 'dankfleet.llm.llama_server', 'tasks_from': entry}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_STDOUT_CALLBACK='ansible.posix.json',
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), PATH='%s:%s' % (BIN, os.environ['PATH']))
    run = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-C', '-i', str(tmp_path / 'hosts.yml'),
                          str(tmp_path / 'play.yml')], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    return run.returncode, [(t['task']['name'], t['hosts'].get('standin', {}))
                            for t in json.loads(run.stdout)['plays'][0]['tasks']]


def test_secondary_entry_points_list_only_their_own_options():
    assert len(SPECS['main']['options']) > 100 and len(SECONDARY) >= 6
    for entry in SECONDARY:
        own = SPECS[entry].get('options') or {}
        assert all(name.startswith('llama_server_%s_' % entry) for name in own), (entry, sorted(own))
        assert "C(main)" in ' '.join(SPECS[entry]['description']), entry
        for name, option in own.items():  # the same option as main's, not a second definition that drifts
            assert option['type'] == SPECS['main']['options'][name]['type']
            assert option.get('default') == SPECS['main']['options'][name].get('default')


@pytest.mark.parametrize('entry', SECONDARY)
def test_the_first_task_checks_main_options(entry):
    assert _tasks(entry)[0].get('ansible.builtin.import_tasks') == 'validate.yml', entry


def test_main_and_prepare_skip_the_nested_check():
    # main's own (implicit) check and prepare's first task already ran: the imports below them skip theirs
    assert [t.get('vars') for t in _tasks('main')] == [{'_llama_server_spec_checked': True}] * 2
    imports = dict((t['ansible.builtin.import_tasks'], t.get('vars')) for t in _tasks('prepare'))
    assert imports['preflight.yml'] == {'_llama_server_spec_checked': True}


def _errors(results):
    failed = [(name, r) for name, r in results if r.get('failed')]
    assert len(failed) == 1, [name for name, _ in results]
    return failed[0][0], sorted(failed[0][1]['argument_errors'])


@pytest.fixture(scope='module')
def main_errors(tmp_path_factory):
    rc, results = _run(tmp_path_factory.mktemp('main'), 'main', BAD)
    assert rc != 0
    name, errors = _errors(results)
    assert name.startswith("dankfleet.llm.llama_server : Validating arguments against arg spec 'main'")
    assert len(errors) == 2 and 'llama_server_port' in errors[0] + errors[1]
    return errors


@pytest.mark.parametrize('entry', SECONDARY)
def test_a_bad_input_is_refused_as_main_refuses_it(tmp_path, main_errors, entry):
    rc, results = _run(tmp_path, entry, BAD)
    assert rc != 0
    assert _errors(results) == (VALIDATE, main_errors)


def test_a_good_input_is_checked_once(tmp_path):
    # prepare on the stand-in: its own check passes, preflight's is skipped (the run stops later, on the host)
    rc, results = _run(tmp_path, 'prepare', {})
    checks = [r for name, r in results if name == VALIDATE]
    assert len(checks) == 2, [name for name, _ in results]
    assert checks[0].get('failed') is not True and checks[0].get('skipped') is not True
    assert checks[1].get('skipped') is True
