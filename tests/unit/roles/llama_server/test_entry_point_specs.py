# -*- coding: utf-8 -*-
"""The serve role's entry points other than main document only their own options (ansible-doc lists each option
once) and check their inputs against main's options with their first task - as strictly as main does.

The checks run ansible-playbook in check mode on a local stand-in host (nothing leaves the controller)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit.roles.entry_points import (
    REPO, argument_errors, main_refusal, run_entry, specs, validate_task)

ROLE = os.path.join(REPO, 'roles', 'llama_server')
VALIDATE = validate_task('llama_server')
SPECS = specs('llama_server')
SECONDARY = sorted(entry for entry in SPECS if entry != 'main')
BAD = {'llama_server_port': 'not-a-port', 'llama_server_parallel': [1]}


def _tasks(name):
    with open(os.path.join(ROLE, 'tasks', name + '.yml')) as handle:
        return yaml.safe_load(handle)


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


@pytest.fixture(scope='module')
def main_errors(tmp_path_factory):
    return main_refusal(tmp_path_factory.mktemp('main'), 'llama_server', BAD, 'llama_server_port')


@pytest.mark.parametrize('entry', SECONDARY)
def test_a_bad_input_is_refused_as_main_refuses_it(tmp_path, main_errors, entry):
    rc, results = run_entry(tmp_path, 'llama_server', entry, BAD)
    assert rc != 0
    assert argument_errors(results) == (VALIDATE, main_errors)


def test_a_good_input_is_checked_once(tmp_path):
    # prepare on the stand-in: its own check passes, preflight's is skipped (the run stops later, on the host)
    rc, results = run_entry(tmp_path, 'llama_server', 'prepare', {})
    checks = [r for name, r in results if name == VALIDATE]
    assert len(checks) == 2, [name for name, _ in results]
    assert checks[0].get('failed') is not True and checks[0].get('skipped') is not True
    assert checks[1].get('skipped') is True
