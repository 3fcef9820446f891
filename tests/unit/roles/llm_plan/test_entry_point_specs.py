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


REFUSE_NO_PAYLOAD = 'Refuse a payload that no settle step found and the play did not give'


def test_entered_at_facts_with_no_settle_step_the_payload_is_given_or_refused(tmp_path):
    """The payload comes from the settle step's result (dankfleet_settled.payload) or from the play (issue 32: the
    role no longer reads gguf_fetch_*): entered at facts with neither, it refuses naming what to pass - before any
    read; given, it plans that payload. Offline, so nothing of the stand-in is read either way."""
    manifest = [{'role': 'target', 'name': 'm', 'file': 'm.gguf'}]
    # the serve settings too, as a play without the settle step passes them (every value left to the planner)
    serve = {'backend': 'cpu', 'tensor_split': [], 'ctx_size': 0, 'cache_ram': 'auto', 'n_cpu_moe': 'auto'}
    rc, results = run_entry(tmp_path, 'llm_plan', 'facts', {'dankfleet_offline': True, 'gguf_fetch_manifest': manifest})
    failed = [(name, r) for name, r in results if r.get('failed')]
    assert rc != 0 and [name.split(' : ', 1)[-1] for name, _ in failed] == [REFUSE_NO_PAYLOAD]
    msg = failed[0][1]['msg']
    assert msg.startswith('llm_plan_models_dir is empty: this play ran no settle step') and 'llm_plan_manifest' in msg
    assert 'tasks_from: preflight' in msg and 'dankfleet.llm.settle' in msg

    given = {'dankfleet_offline': True, 'llm_plan_manifest': manifest, 'llm_plan_models_dir': '/srv/models',
             'llm_plan_serve': serve}
    rc, results = run_entry(tmp_path, 'llm_plan', 'facts', given)
    published = [r['ansible_facts']['llm_plan'] for _, r in results if 'llm_plan' in r.get('ansible_facts', {})]
    assert rc == 0 and published and published[-1]['payload_paths'] == {'target': '/srv/models/m/m.gguf'}
    assert [r.get('skipped') for name, r in results if name.endswith(REFUSE_NO_PAYLOAD)] == [True]

    # settled (dankfleet_settled, as the play's settle step registers it): its payload, not the fetch role's inputs
    settled = {'dankfleet_offline': True, 'gguf_fetch_models_dir': '/not/read',
               'dankfleet_settled': {'payload': {'manifest': manifest, 'models_dir': '/settled'}, 'payload_paths': {},
                                     'serve': serve}}
    rc, results = run_entry(tmp_path, 'llm_plan', 'facts', settled)
    published = [r['ansible_facts']['llm_plan'] for _, r in results if 'llm_plan' in r.get('ansible_facts', {})]
    assert rc == 0 and published[-1]['payload_paths'] == {'target': '/settled/m/m.gguf'}
