# -*- coding: utf-8 -*-
"""Role defaults and the sample inventory hold no site values.

The site is what inventory/production names: its host names, logins, service users, endpoint aliases
and service names, and their home directories. None of those may appear in a value of any role's
defaults/main.yml (its comments too) or meta/argument_specs.yml (what someone who installs the collection gets without
asking), nor anywhere in inventory/sample (what they copy). The names are read from
inventory/production itself, so a new host or alias there is checked the day it lands.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
PRODUCTION = os.path.join(REPO, 'inventory', 'production')
SAMPLE = os.path.join(REPO, 'inventory', 'sample')
ROLES = os.path.join(REPO, 'roles')
# Which production variables name the site (their values, wherever they are set).
SITE_KEYS = ('ansible_user', 'ansible_host', 'llama_server_user', 'llama_server_alias',
             'llama_server_service_name', 'llama_cpp_build_user', 'gguf_fetch_owner')


class _AnyTagLoader(role_yaml.Loader):
    """Safe loading that reads !unsafe as its value (a templated spec default) and any other tagged value
    (!vault ...) as None: no check here needs one."""


_AnyTagLoader.add_multi_constructor('!', lambda loader, suffix, node: None)


def _load(path):
    with open(path) as handle:
        return yaml.load(handle, Loader=_AnyTagLoader)


def _walk(node, key=None):
    """(key, leaf) for every scalar leaf; a list's items carry the list's key."""
    if isinstance(node, dict):
        for k, value in node.items():
            for found in _walk(value, k):
                yield found
    elif isinstance(node, list):
        for item in node:
            for found in _walk(item, key):
                yield found
    else:
        yield key, node


def _yaml_files(top):
    for root, _dirs, files in os.walk(top):
        for name in sorted(files):
            if name.endswith(('.yml', '.yaml')):
                yield os.path.join(root, name)


def site_names():
    """Every host name and every value of SITE_KEYS in inventory/production, and /home/<user>."""
    names = set()
    hosts = _load(os.path.join(PRODUCTION, 'hosts.yml'))
    for _group, body in (hosts.get('all', {}).get('children') or {}).items():
        names.update((body or {}).get('hosts') or {})
    for path in _yaml_files(PRODUCTION):
        for key, value in _walk(_load(path) or {}):
            if key in SITE_KEYS and isinstance(value, str) and value and '{{' not in value:
                names.add(value)
    users = {v for k, v in ((k, v) for path in _yaml_files(PRODUCTION) for k, v in _walk(_load(path) or {}))
             if k in ('ansible_user', 'llama_server_user', 'llama_cpp_build_user') and isinstance(v, str)}
    names.update('/home/' + user for user in users if user)
    return sorted(names)


def _pattern(names):
    # a name as a whole word: the login 'dank' is site, the collection's own 'dankfleet' is not
    return re.compile('|'.join(r'(?<![\w.-])%s(?![\w-])' % re.escape(name) for name in names))


def test_the_site_names_are_found():
    names = site_names()
    assert 'dankserver' in names and 'frank-medium' in names and '/home/dank' in names, names


def _role_values():
    for role in sorted(os.listdir(ROLES)):
        for rel in ('defaults/main.yml', 'meta/argument_specs.yml'):
            path = os.path.join(ROLES, role, rel)
            if not os.path.exists(path):
                continue
            if rel.startswith('defaults'):
                # every line, comments too: what a reader of the defaults takes as the example
                with open(path) as handle:
                    for number, line in enumerate(handle, 1):
                        yield '%s/%s:%d' % (role, rel, number), 'line', line.strip()
                continue
            data = _load(path) or {}
            if rel.startswith('meta'):
                # only what a spec gives as a default or a choice (descriptions may cite the runbook)
                data = [{k: opt.get(k) for k in ('default', 'choices')}
                        for entry in (data.get('argument_specs') or {}).values()
                        for opt in (entry.get('options') or {}).values()]
            for key, value in _walk(data):
                if isinstance(value, str):
                    yield '%s/%s' % (role, rel), key, value


def test_role_defaults_hold_no_site_value():
    site = _pattern(site_names())
    found = ['%s: %s = %r' % (where, key, value) for where, key, value in _role_values() if site.search(value)]
    assert not found, 'site values in role defaults (move them to inventory/production):\n' + '\n'.join(found)


@pytest.mark.parametrize('path', sorted(_yaml_files(SAMPLE)) or ['<no inventory/sample>'])
def test_the_sample_inventory_names_no_site(path):
    assert os.path.exists(path), 'inventory/sample is missing'
    with open(path) as handle:
        text = handle.read()
    found = sorted(set(m.group(0) for m in _pattern(site_names()).finditer(text)))
    assert not found, '%s names the site: %s' % (os.path.relpath(path, REPO), found)
