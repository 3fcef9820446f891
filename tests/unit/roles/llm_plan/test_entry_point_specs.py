# -*- coding: utf-8 -*-
"""The plan role's entry points other than main list no options of their own (ansible-doc lists each option once:
main's) and check their inputs against main's options with their first task - as strictly as main does (issue 37).

The checks run ansible-playbook in check mode on a local stand-in host (nothing leaves the controller)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit.roles.entry_points import (
    REPO, argument_errors, main_refusal, run_entry, specs, validate_task)

ROLE = os.path.join(REPO, 'roles', 'llm_plan')
VALIDATE = validate_task('llm_plan')
SPECS = specs('llm_plan')
SECONDARY = sorted(entry for entry in SPECS if entry != 'main')
BAD = {'llm_plan_floor_bytes': 'lots', 'llm_plan_header_facts': ['not', 'a', 'mapping']}


def _tasks(path):
    with open(os.path.join(REPO, path)) as handle:
        return yaml.safe_load(handle)


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


@pytest.fixture(scope='module')
def main_errors(tmp_path_factory):
    return main_refusal(tmp_path_factory.mktemp('main'), 'llm_plan', BAD, 'llm_plan_floor_bytes')


@pytest.mark.parametrize('entry', SECONDARY)
def test_a_bad_input_is_refused_as_main_refuses_it(tmp_path, main_errors, entry):
    rc, results = run_entry(tmp_path, 'llm_plan', entry, BAD)
    assert rc != 0
    assert argument_errors(results) == (VALIDATE, main_errors)
