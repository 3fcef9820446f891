# -*- coding: utf-8 -*-
"""Every default of runtime_retire, llama_server and llama_rpc_worker has an argument spec, and no spec lacks a default."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


import pytest

from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import load_yaml, role_file

ROLES = ['runtime_retire', 'llama_server', 'llama_rpc_worker']


@pytest.mark.parametrize('role', ROLES)
def test_defaults_and_main_spec_have_the_same_keys(role):
    defaults = set(load_yaml(role_file(role, 'defaults', 'main.yml')))
    spec = set(load_yaml(role_file(role, 'meta', 'argument_specs.yml'))['argument_specs']['main']['options'])
    assert defaults - spec == set(), 'defaults without a spec'
    assert spec - defaults == set(), 'specs without a default'


@pytest.mark.parametrize('role', ROLES)
def test_every_option_has_a_type_and_a_description_and_a_role_prefix(role):
    specs = load_yaml(role_file(role, 'meta', 'argument_specs.yml'))['argument_specs']
    for entry, spec in specs.items():
        assert spec.get('short_description'), entry
        for name, option in spec['options'].items():
            assert name.startswith(role + '_'), name
            assert option.get('type'), name
            assert option.get('description'), name


@pytest.mark.parametrize('role', ROLES)
def test_literal_defaults_match_the_spec(role):
    defaults = load_yaml(role_file(role, 'defaults', 'main.yml'))
    options = load_yaml(role_file(role, 'meta', 'argument_specs.yml'))['argument_specs']['main']['options']
    for name, option in options.items():
        if 'default' in option:
            assert option['default'] == defaults[name], name
        else:
            assert '{{' in str(defaults[name]), (name, 'a literal default belongs in the spec')
