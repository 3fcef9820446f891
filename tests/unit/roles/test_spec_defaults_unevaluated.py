# -*- coding: utf-8 -*-
"""No templated default of a role's argument spec is evaluated when ansible-core validates the role's arguments.

ansible-core puts a validate_argument_spec task first in every entry point that has a spec and templates what it
passes it: the entry point's whole options, defaults included. A templated default written there as plain text
(llama_server_rpc's, over the llm_rpc_workers' hostvars) is evaluated at every role start, before the workers'
facts are gathered, and fails (molecule rpc_split: "object of type 'dict' has no attribute 'default_ipv4'"). So every
spec default holding a template is written ``!unsafe``: validation leaves it as its text, and the settle step
templates it itself (plugins/action/settle.py).

Real parts: ansible-playbook, on a local stand-in host, validates every entry point of every role with the roles' own
meta/ (argument_specs.yml, main.yml), defaults/ and vars/; only the task files are left empty, so ansible-core's
validation is all that runs. The inventory sets each templated option as an operator's inventory would, and leaves
what the templates read undefined: no facts, a worker host never contacted, no dankfleet_settled, no llm_plan. The
same run with the tags taken out fails where rpc_split failed, so the run can tell.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES_DIR = os.path.join(REPO, 'roles')
ROLES = sorted(r for r in os.listdir(ROLES_DIR) if os.path.isfile(os.path.join(ROLES_DIR, r, 'meta', 'argument_specs.yml')))
BIN = os.path.dirname(sys.executable)
_VALIDATION = re.compile(r"^dankfleet\.llm\.(\w+) : Validating arguments against arg spec '(\w+)'")


def _spec_text(role):
    with open(os.path.join(ROLES_DIR, role, 'meta', 'argument_specs.yml')) as handle:
        return handle.read()


def _specs(role):
    return role_yaml.load(_spec_text(role))['argument_specs']


def _templated(value):
    if isinstance(value, str):
        return '{{' in value
    if isinstance(value, list):
        return any(_templated(v) for v in value)
    if isinstance(value, dict):
        return any(_templated(v) for v in value.values())
    return False


def untagged_templates(text):
    """[(line, text)] of every spec default (at any depth, list elements and dict values too) that holds a template
    and is not written ``!unsafe``."""
    out = []

    def check(node):
        if isinstance(node, yaml.ScalarNode):
            if '{{' in node.value and node.tag != '!unsafe':
                out.append((node.start_mark.line + 1, node.value))
        elif isinstance(node, yaml.SequenceNode) and node.tag != '!unsafe':
            for item in node.value:
                check(item)
        elif isinstance(node, yaml.MappingNode) and node.tag != '!unsafe':
            for _, value in node.value:
                check(value)

    def walk(node):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == 'default':
                    check(value)
                else:
                    walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    walk(yaml.compose(text, Loader=role_yaml.Loader))
    return out


def test_the_scan_finds_an_untagged_template():
    text = ('argument_specs:\n  main:\n    options:\n'
            '      a: {type: str, default: !unsafe "{{ x }}"}\n'
            '      b: {type: str, default: "{{ y }}"}\n'
            '      c: {type: list, default: [!unsafe "{{ z }}/1", "{{ z }}/2"]}\n'
            '      d: {type: dict, options: {e: {type: str, default: "/{{ w }}"}}}\n'
            '      f: {type: str, default: plain}\n')
    assert untagged_templates(text) == [(5, '{{ y }}'), (6, '{{ z }}/2'), (7, '/{{ w }}')]


@pytest.mark.parametrize('role', ROLES)
def test_every_templated_spec_default_is_unsafe(role):
    assert untagged_templates(_spec_text(role)) == [], (
        'roles/%s/meta/argument_specs.yml: write a templated default `default: !unsafe "{{ ... }}"` (role argument '
        'validation would evaluate it at every role start)' % role)


def _value(option):
    """A literal the option's spec accepts, as an inventory would set it."""
    if option.get('choices'):
        return [option['choices'][0]] if option.get('type') == 'list' else option['choices'][0]
    return {'int': 0, 'float': 0.0, 'bool': False, 'list': [], 'dict': {}}.get(option.get('type', 'str'), 'x')


def _collection(tmp_path, strip):
    """The collection under tmp_path: meta/runtime.yml, the plugins, and each role's meta, defaults and vars with
    an empty tasks file per entry point; ``strip`` writes the specs without their ``!unsafe`` tags."""
    root = tmp_path / 'ansible_collections' / 'dankfleet' / 'llm'
    (root / 'meta').mkdir(parents=True)
    shutil.copy(os.path.join(REPO, 'meta', 'runtime.yml'), str(root / 'meta' / 'runtime.yml'))
    os.symlink(os.path.join(REPO, 'plugins'), str(root / 'plugins'))
    for role in ROLES:
        src, dst = os.path.join(ROLES_DIR, role), root / 'roles' / role
        shutil.copytree(os.path.join(src, 'meta'), str(dst / 'meta'))
        if strip:
            (dst / 'meta' / 'argument_specs.yml').write_text(_spec_text(role).replace('!unsafe ', ''))
        for sub in ('defaults', 'vars'):
            if os.path.isdir(os.path.join(src, sub)):
                os.symlink(os.path.join(src, sub), str(dst / sub))
        (dst / 'tasks').mkdir()
        for entry in _specs(role):
            (dst / 'tasks' / (entry + '.yml')).write_text('--- []\n')


def _validate_every_entry_point(tmp_path, strip=False):
    """(rc, {(role, entry): the validation's result}, stderr) of one play importing every entry point."""
    _collection(tmp_path, strip)
    entries = [(role, entry) for role in ROLES for entry in _specs(role)]
    given = {}
    for role, entry in entries:
        for name, option in (_specs(role)[entry].get('options') or {}).items():
            if option.get('required') or _templated(option.get('default')):
                given[name] = _value(option)
    assert 'llama_server_rpc' in given
    inventory = {'all': {
        'hosts': {'head': dict(given, ansible_connection='local', ansible_python_interpreter=sys.executable)},
        'children': {'llm_endpoints': {'hosts': {'head': {}}},
                     # in the group, never contacted: no facts, as before the workers' play (its address as
                     # molecule rpc_split writes it, from its facts)
                     'llm_rpc_workers': {'hosts': {'worker': {
                         'ansible_host': '192.0.2.10',
                         'dankfleet_private_address': "{{ ansible_facts['default_ipv4']['address'] }}"}}}}}}
    (tmp_path / 'hosts.yml').write_text(json.dumps(inventory))
    (tmp_path / 'ansible.cfg').write_text('[defaults]\ninject_facts_as_vars = false\nretry_files_enabled = false\n')
    (tmp_path / 'play.yml').write_text(yaml.safe_dump([{
        'name': 'every entry point, validation alone', 'hosts': 'head', 'gather_facts': False,
        'tasks': [{'ansible.builtin.import_role': {'name': 'dankfleet.llm.' + role, 'tasks_from': entry}}
                  for role, entry in entries]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / 'ansible.cfg'), ANSIBLE_COLLECTIONS_PATH=str(tmp_path),
               ANSIBLE_STDOUT_CALLBACK='ansible.posix.json', PATH='%s:%s' % (BIN, os.environ['PATH']))
    env.pop('PYTHONPATH', None)
    run = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-i', str(tmp_path / 'hosts.yml'), str(tmp_path / 'play.yml')],
                         env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    results = {}
    for task in json.loads(run.stdout)['plays'][0]['tasks']:
        match = _VALIDATION.match(task['task']['name'])
        if match:
            results[match.groups()] = task['hosts'].get('head', {})
    return run.returncode, entries, results, run.stderr


def test_role_validation_evaluates_no_spec_default(tmp_path):
    rc, entries, results, stderr = _validate_every_entry_point(tmp_path)
    assert rc == 0, (stderr, [(k, r.get('msg')) for k, r in results.items() if r.get('failed')])
    assert sorted(results) == sorted(entries)
    assert set(r.get('msg') for r in results.values()) == {'The arg spec validation passed'}
    assert len(entries) >= 25


def test_without_the_tags_validation_evaluates_them(tmp_path):
    """The run above can fail: the specs without ``!unsafe`` stop at llama_server's validation on the worker that
    has nothing gathered yet, as rpc_split did."""
    rc, _, results, _ = _validate_every_entry_point(tmp_path, strip=True)
    assert rc != 0
    failed = [(key, r.get('msg', '')) for key, r in results.items() if r.get('failed')]
    assert len(failed) == 1
    (role, _), msg = failed[0]
    assert role == 'llama_server'
    # the spec's default evaluated by the validation itself, over the worker that has nothing gathered yet
    assert "validate_argument_spec' failed" in msg and 'default_ipv4' in msg, msg
