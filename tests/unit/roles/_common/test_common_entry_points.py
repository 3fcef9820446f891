# -*- coding: utf-8 -*-
"""roles/_common: every entry point has a task file and an argument spec, every default a spec, and
every caller passes only the options of the entry point it names."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os

import pytest

from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
COMMON = os.path.join(REPO, 'roles', '_common')


def _load(path):
    with open(path) as handle:
        return role_yaml.load(handle) or {}


SPECS = _load(os.path.join(COMMON, 'meta', 'argument_specs.yml'))['argument_specs']


def _callers():
    """(file, tasks_from, vars) of every import_role/include_role of dankfleet.llm._common."""
    found = []
    paths = [p for pattern in ('roles/**/*.yml', 'playbooks/**/*.yml', 'molecule/**/*.yml', '*.yml')
             for p in glob.glob(os.path.join(REPO, pattern), recursive=True)]

    def walk(node, path):
        if isinstance(node, list):
            for item in node:
                walk(item, path)
        elif isinstance(node, dict):
            for key in ('ansible.builtin.import_role', 'ansible.builtin.include_role', 'import_role', 'include_role'):
                call = node.get(key)
                if isinstance(call, dict) and call.get('name') in ('dankfleet.llm._common', '_common'):
                    found.append((os.path.relpath(path, REPO), call.get('tasks_from', 'main'), node.get('vars') or {}))
            for value in node.values():
                walk(value, path)

    for path in sorted(set(paths)):
        if '/.venv/' in path or '/collections/' in path:
            continue
        walk(_load(path), path)
    return found


CALLERS = _callers()


def test_every_entry_point_has_a_task_file_and_the_other_way_round():
    tasks = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(COMMON, 'tasks', '*.yml'))}
    assert tasks == set(SPECS)


def test_defaults_are_the_options_and_their_literal_defaults():
    defaults = _load(os.path.join(COMMON, 'defaults', 'main.yml'))
    options = {}
    for spec in SPECS.values():
        assert spec.get('short_description', '').startswith('Internal')
        for name, option in spec['options'].items():
            assert name.startswith('_common_'), name
            assert option.get('type') and option.get('description'), name
            assert 'default' in option, name
            options[name] = option
    assert set(defaults) == set(options)
    for name, option in options.items():
        assert option['default'] == defaults[name], name


def test_the_role_is_used_and_every_call_names_an_entry_point_and_only_its_options():
    assert {tasks_from for _, tasks_from, _ in CALLERS} == set(SPECS)
    for path, tasks_from, variables in CALLERS:
        name = os.path.splitext(tasks_from)[0]
        assert name in SPECS, (path, tasks_from)
        passed = {k for k in variables if k.startswith('_common_')}
        assert passed <= set(SPECS[name]['options']), (path, tasks_from, passed - set(SPECS[name]['options']))


@pytest.mark.parametrize('role', ['llama_server', 'runtime_retire', 'llama_cpp_build'])
def test_the_roles_that_share_it_use_it(role):
    assert any(path.startswith('roles/%s/' % role) for path, _, _ in CALLERS)


def test_no_task_spells_out_runuser_systemctl_user():
    """User units go through systemd_service scope: user (become the user), not runuser ... XDG_RUNTIME_DIR=..."""
    offenders = []
    for path in glob.glob(os.path.join(REPO, 'roles', '**', '*.yml'), recursive=True) + \
            glob.glob(os.path.join(REPO, 'playbooks', '**', '*.yml'), recursive=True):
        with open(path) as handle:
            for number, line in enumerate(handle, 1):
                if line.lstrip().startswith('#'):
                    continue
                if 'runuser' in line or 'XDG_RUNTIME_DIR=' in line:
                    offenders.append('%s:%d' % (os.path.relpath(path, REPO), number))
    assert offenders == []


def test_running_states_agree_with_runtime_retire():
    common = _load(os.path.join(COMMON, 'vars', 'main.yml'))['_common_units_running_states']
    retire = _load(os.path.join(REPO, 'roles', 'runtime_retire', 'vars', 'main.yml'))['_runtime_retire_running_states']
    assert common == retire


@pytest.mark.parametrize('entry', sorted(SPECS))
def test_every_entry_point_checks_its_own_arguments_first(entry):
    """The callers import with rolespec_validate false (Ansible's check is tagged always), so each entry point's
    first task after the guard against direct use checks its arguments against its own spec, under the tags the
    import gives it."""
    tasks = _load(os.path.join(COMMON, 'tasks', entry + '.yml'))
    assert tasks[0].get('ansible.builtin.import_tasks') == 'guard/parent.yml'
    check = tasks[1]['ansible.builtin.validate_argument_spec']
    assert check['argument_spec'] == "{{ _common_argument_specs['%s'].options }}" % entry
    assert not {'tags', 'when'} & (set(tasks[0]) | set(tasks[1]))
    variables = _load(os.path.join(COMMON, 'vars', 'main.yml'))
    assert "role_path ~ '/meta/argument_specs.yml'" in variables['_common_argument_specs']
