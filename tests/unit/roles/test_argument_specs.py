# -*- coding: utf-8 -*-
"""Every role's meta/argument_specs.yml against its defaults/main.yml, and every entry point against its use.

Discovered, not listed: each directory under roles/ is a role, each entry of its argument_specs an entry
point, and every `include_role`/`import_role` with `tasks_from` anywhere in the repo (playbooks, roles,
molecule, the lab) names an entry point, so a new role or a new `tasks_from` is checked the day it lands.

- main's options are the role's defaults, both ways (an option marked required may have none); a role
  without tasks/main.yml (internal, tasks_from only) has every default in some entry point;
- every option of every entry point has a type and a description, a list its elements, the role's
  prefix, and is a default of the role (or required); the entry point covers the defaults named for it
  (<role>_<entry>_*);
- every default is in the spec with the same value (a templated one as its template: the settle step reads the
  specs, never a role's defaults), and a literal default with choices is one of them;
- every entry point has its tasks file, and every tasks file used as an entry point has a spec entry.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import functools
import os

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES_DIR = os.path.join(REPO, 'roles')
ROLES = sorted(d for d in os.listdir(ROLES_DIR) if os.path.isdir(os.path.join(ROLES_DIR, d, 'tasks')))
ROLE_TASKS = ('include_role', 'import_role', 'ansible.builtin.include_role', 'ansible.builtin.import_role')
COLLECTION = 'dankfleet.llm.'


class _AnyTagLoader(role_yaml.Loader):
    """Safe loading that reads !unsafe as its value (a templated spec default) and any other tagged value
    (!vault ...) as None: no check here needs one."""


_AnyTagLoader.add_multi_constructor('!', lambda loader, suffix, node: None)


def _load(path):
    with open(path) as handle:
        return yaml.load(handle, Loader=_AnyTagLoader)


@functools.lru_cache(maxsize=None)
def defaults(role):
    path = os.path.join(ROLES_DIR, role, 'defaults', 'main.yml')
    return (_load(path) or {}) if os.path.exists(path) else {}


@functools.lru_cache(maxsize=None)
def specs(role):
    path = os.path.join(ROLES_DIR, role, 'meta', 'argument_specs.yml')
    return (_load(path) or {}).get('argument_specs') or {} if os.path.exists(path) else {}


def options(role, entry):
    return specs(role)[entry].get('options') or {}


def templated(value):
    return '{{' in str(value)


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            for found in _walk(value):
                yield found
    elif isinstance(node, list):
        for item in node:
            for found in _walk(item):
                yield found


@functools.lru_cache(maxsize=None)
def tasks_from_uses():
    """{(role, entry point): [files that use it]} for every include_role/import_role with tasks_from in the repo."""
    uses = {}
    for top, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith('.') and d not in ('collections', 'node_modules')]
        for name in files:
            if not name.endswith(('.yml', '.yaml')):
                continue
            path = os.path.join(top, name)
            try:
                with open(path) as handle:
                    docs = list(yaml.load_all(handle, Loader=_AnyTagLoader))
            except yaml.YAMLError:
                continue  # not YAML Ansible reads (a Jinja-templated file); yamllint has its own say
            for node in _walk(docs):
                for key in ROLE_TASKS:
                    call = node.get(key)
                    if not isinstance(call, dict) or 'tasks_from' not in call:
                        continue
                    role, entry = str(call.get('name', '')), str(call['tasks_from'])
                    if templated(role) or templated(entry):
                        continue
                    role = role[len(COLLECTION):] if role.startswith(COLLECTION) else role
                    entry = os.path.splitext(entry)[0] if entry.endswith(('.yml', '.yaml')) else entry
                    if role in ROLES:
                        uses.setdefault((role, entry), []).append(os.path.relpath(path, REPO))
    return uses


def test_roles_are_discovered():
    assert {'gguf_fetch', 'llama_cpp_build', 'llama_server', 'runtime_retire'} <= set(ROLES)


@pytest.mark.parametrize('role', ROLES)
def test_the_role_has_a_spec_for_its_entry_points(role):
    if os.path.isfile(os.path.join(ROLES_DIR, role, 'tasks', 'main.yml')):
        assert 'main' in specs(role), 'roles/%s/meta/argument_specs.yml has no argument_specs.main' % role
    else:  # an internal role used only through tasks_from
        assert specs(role), 'roles/%s has no meta/argument_specs.yml entry point' % role


@pytest.mark.parametrize('role', ROLES)
def test_defaults_and_main_spec_have_the_same_keys(role):
    if 'main' in specs(role):
        declared = options(role, 'main')
    else:  # no main: every default is an option of some entry point
        declared = dict((name, option) for entry in specs(role) for name, option in options(role, entry).items())
    required = set(name for name, option in declared.items() if option.get('required'))
    assert sorted(set(defaults(role)) - set(declared)) == [], 'defaults without a spec'
    if 'main' in specs(role):
        assert sorted(set(declared) - set(defaults(role)) - required) == [], 'specs in main without a default'


@pytest.mark.parametrize('role', ROLES)
def test_every_option_is_typed_described_prefixed_and_a_default(role):
    role_defaults = defaults(role)
    for entry, spec in specs(role).items():
        assert spec.get('short_description'), entry
        for name, option in (spec.get('options') or {}).items():
            where = '%s: %s' % (entry, name)
            assert name.startswith(role + '_'), where
            assert option.get('type'), where
            assert option.get('description'), where
            if option['type'] == 'list':
                assert option.get('elements'), where
            assert name in role_defaults or option.get('required'), (where, 'not a default of the role')


@pytest.mark.parametrize('role', ROLES)
def test_defaults_agree_with_the_spec(role):
    role_defaults = defaults(role)
    for entry, spec in specs(role).items():
        for name, option in (spec.get('options') or {}).items():
            if name not in role_defaults:
                continue
            value, where = role_defaults[name], '%s: %s' % (entry, name)
            # the settle step reads the specs, never a role's defaults: every default is there, a templated one as
            # its template
            if option.get('required'):
                assert 'default' not in option, (where, 'a required option has no default')
                continue
            assert 'default' in option, (where, 'the default belongs in the spec (a templated one as its template)')
            assert option['default'] == value, where
            if 'choices' in option and not templated(value):
                values = value if option['type'] == 'list' else [value]
                assert all(v in option['choices'] for v in values), where


@pytest.mark.parametrize('role', ROLES)
def test_every_entry_point_has_its_tasks_file_and_its_own_defaults(role):
    for entry in specs(role):
        tasks = os.path.join(ROLES_DIR, role, 'tasks', entry + '.yml')
        assert os.path.isfile(tasks), 'argument_specs.%s without roles/%s/tasks/%s.yml' % (entry, role, entry)
        if entry != 'main':
            named = set(k for k in defaults(role) if k.startswith('%s_%s_' % (role, entry)))
            assert sorted(named - set(options(role, entry))) == [], entry


def test_every_tasks_from_entry_point_has_a_spec():
    uses = tasks_from_uses()
    assert ('runtime_retire', 'restore') in uses  # the discovery sees the known uses
    missing = dict(('%s tasks_from: %s' % key, files) for key, files in sorted(uses.items())
                   if key[1] not in specs(key[0]))
    assert missing == {}, 'entry points used with tasks_from but not in the role\'s meta/argument_specs.yml'
