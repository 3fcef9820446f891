# -*- coding: utf-8 -*-
"""A role reads another role's published result, never its inputs (issue 32, item 5; the playbook side is
tests/unit/playbooks/test_role_boundaries.py). Every variable a role's tasks, handlers, templates, vars and defaults
read (inside {{ }} / {% %}, and the bare expressions of when/that/changed_when/failed_when/until) that is named with
another role's prefix (`<role>_*`, `_<role>_*`, `__<role>_*`, or the role's own name) must be one that role
publishes: a name its tasks set (set_fact or register) that is public, or that its meta/argument_specs.yml names.
The fleet-wide `dankfleet_*` settings (the dankfleet role, the settle step's result) are everyone's.

What is read today without being published is listed in INPUT_READS - the debt issue 32 (items 1-2: one serve shape)
pays off; the list must shrink, never grow: a new read fails, and so does an entry no role reads any more.
docs/ARCHITECTURE.md's "Role to role" block is drawn from what this test finds, and must say the same."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os
import re

import yaml

from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, 'roles', '*')) if os.path.isdir(p))
SHARED = {'dankfleet'}
EXPR = re.compile(r'{{(.*?)}}|{%(.*?)%}', re.S)
NAME = re.compile(r'(?<![\w.\'"])(_{0,2}[A-Za-z]\w*)')
BARE = {'when', 'that', 'changed_when', 'failed_when', 'until'}
DOC = os.path.join(REPO, 'docs', 'ARCHITECTURE.md')
BEGIN, END = '<!-- role-to-role: drawn by tests/unit/roles/test_role_to_role.py -->', '<!-- role-to-role end -->'

# (reader, variable) read today though the owner does not publish it: llm_plan's defaults take the fetch role's
# manifest. It goes with the typed serve shape. (llm_bench's reads of the serve role's inputs are paid: the bench
# takes the served env file, found through the settle step's dankfleet_settled.service.)
INPUT_READS = {('llm_plan', 'gguf_fetch_' + n) for n in ('manifest', 'models_dir', 'token')}


def owner(name):
    """The role whose prefix names the variable (the longest that fits), else None."""
    bare = name.lstrip('_')
    for role in sorted(ROLES, key=lambda r: -len(r.lstrip('_'))):
        prefix = role.lstrip('_')
        if bare == prefix or bare.startswith(prefix + '_'):
            return role
    return None


def names(expr):
    """The variable names an expression reads (string literals and attributes left out)."""
    return set(NAME.findall(re.sub(r"'[^']*'|\"[^\"]*\"", "''", expr)))


def _strings(node, key=None):
    if isinstance(node, dict):
        for k, v in node.items():
            for pair in _strings(v, k):
                yield pair
    elif isinstance(node, list):
        for v in node:
            for pair in _strings(v, key):
                yield pair
    elif isinstance(node, str):
        yield key, node


def reads_of_text(text, is_yaml):
    out = set()
    if not is_yaml:
        for m in EXPR.finditer(text):
            out |= names(m.group(1) or m.group(2))
        return out
    for key, value in _strings(role_yaml.load(text)):
        if key in BARE and '{{' not in value:
            out |= names(value)
        for m in EXPR.finditer(value):
            out |= names(m.group(1) or m.group(2))
    return out


def _role_files(role):
    for sub in ('tasks', 'handlers', 'templates', 'vars', 'defaults'):
        for path in sorted(glob.glob(os.path.join(REPO, 'roles', role, sub, '**', '*'), recursive=True)):
            if os.path.isfile(path):
                yield path


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            for task in _tasks(item):
                yield task
    elif isinstance(node, dict):
        yield node
        for key in ('block', 'rescue', 'always'):
            for task in _tasks(node.get(key)):
                yield task


def published(role):
    """What a role publishes: the public names its tasks set, and the names its argument specs document."""
    sets = set()
    for path in glob.glob(os.path.join(REPO, 'roles', role, 'tasks', '*.yml')):
        with open(path) as handle:
            for task in _tasks(role_yaml.load(handle)):
                facts = task.get('ansible.builtin.set_fact') or task.get('set_fact')
                if isinstance(facts, dict):
                    sets |= set(k for k in facts if k != 'cacheable')
                if isinstance(task.get('register'), str):
                    sets.add(task['register'])
    spec = os.path.join(REPO, 'roles', role, 'meta', 'argument_specs.yml')
    documented = open(spec).read() if os.path.exists(spec) else ''
    return set(n for n in sets if not n.startswith('_') or re.search(r'\b%s\b' % re.escape(n), documented))


def cross_reads():
    """{(owner, variable, reader): [files]} of every read of another role's variable."""
    found = {}
    for reader in ROLES:
        for path in _role_files(reader):
            with open(path) as handle:
                text = handle.read()
            for name in reads_of_text(text, path.endswith(('.yml', '.yaml'))):
                own = owner(name)
                if own and own != reader and own not in SHARED:
                    found.setdefault((own, name, reader), []).append(os.path.relpath(path, os.path.join(REPO, 'roles', reader)))
    return found


def drawn(found):
    """The ARCHITECTURE.md block: one line per read, published results first."""
    lines = []
    for kind in ('result', 'INPUT'):
        for own, name, reader in sorted(found):
            is_input = (reader, name) in INPUT_READS or name not in published(own)
            if is_input == (kind == 'INPUT'):
                lines.append('%-16s ── %-36s ──▶ %-14s %s' % (own, name, reader, kind if is_input else ''))
    return [line.rstrip() for line in lines]


def test_the_finder_sees_reads_and_not_writes_or_literals():
    text = ("- name: x\n  ansible.builtin.import_role: {name: dankfleet.llm._common}\n  vars:\n"
            "    _common_units: \"{{ llm_plan.fits and __common_restored is changed }}\"\n"
            "  when: llama_server_port | int > 0 and 'gguf_fetch_token' != ''\n")
    # Jinja's own words (and, is, int) are found too; no role's prefix names them
    assert set(n for n in reads_of_text(text, True) if owner(n)) == {'llm_plan', '__common_restored', 'llama_server_port'}
    assert owner('__common_restored') == '_common' and owner('llm_plan') == 'llm_plan' and owner('llm_plans') is None
    assert owner('llama_rpc_worker_devices') == 'llama_rpc_worker' and owner('dankfleet_settled') == 'dankfleet'
    template = "{% if llm_bench_url %}{{ gguf_fetch_paths.target }}{% endif %}"
    assert set(n for n in reads_of_text(template, False) if owner(n)) == {'llm_bench_url', 'gguf_fetch_paths'}


def test_the_published_results_are_found():
    assert {'llm_plan'} <= published('llm_plan') and 'gguf_fetch_paths' in published('gguf_fetch')
    assert {'_common_units_status', '__common_restored'} <= published('_common')
    assert 'llama_server_result' in published('llama_server') and 'runtime_retire_retired' in published('runtime_retire')
    assert '__common_units_users' not in published('_common')


def test_no_role_reads_another_roles_inputs():
    found = cross_reads()
    inputs = set((reader, name) for own, name, reader in found if name not in published(own))
    new = sorted(inputs - INPUT_READS)
    assert new == [], ('a role reads another role\'s inputs (take its published result, or have the caller pass it): '
                       + ', '.join('%s reads %s' % pair for pair in new))
    gone = sorted(INPUT_READS - inputs)
    assert gone == [], 'no longer read - take off INPUT_READS: %s' % gone


def test_architecture_draws_the_role_to_role_reads():
    with open(DOC) as handle:
        text = handle.read()
    assert BEGIN in text and END in text, 'docs/ARCHITECTURE.md has no role-to-role block'
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip().splitlines()
    block = [line.rstrip() for line in block if not line.startswith('```')]
    expect = drawn(cross_reads())
    assert block == expect, 'replace the block in docs/ARCHITECTURE.md with:\n' + '\n'.join(expect)


def _spec_options():
    out = set()
    for path in glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')):
        with open(path) as handle:
            for entry in ((role_yaml.load(handle) or {}).get('argument_specs') or {}).values():
                out |= set((entry or {}).get('options') or {})
    return out


def _playbook_sets():
    """The names the playbooks set: play, task and role vars, set_fact, register."""
    out = set()
    for path in glob.glob(os.path.join(REPO, 'playbooks', '**', '*.yml'), recursive=True):
        with open(path) as handle:
            stack = [yaml.safe_load(handle)]
        while stack:
            node = stack.pop()
            if isinstance(node, list):
                stack.extend(node)
            elif isinstance(node, dict):
                for key in ('vars', 'ansible.builtin.set_fact', 'set_fact'):
                    if isinstance(node.get(key), dict):
                        out |= set(node[key])
                if isinstance(node.get('register'), str):
                    out.add(node['register'])
                stack.extend(node.values())
    return out


def test_the_settle_step_knows_what_the_roles_publish():
    """The settle step reads no task file: its PUBLISHED (known names an inventory does not set) is what the roles'
    tasks publish under a governed prefix and the play variables the playbooks pass, that no spec documents as an
    option. A new result (or a play variable) fails here until settle.PUBLISHED names it."""
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan import settle
    options = _spec_options()
    sets = set(n for role in ROLES for n in published(role)) | _playbook_sets()
    found = set(n for n in sets if settle.governed(n) and n not in options and n not in settle.DANKFLEET_NAMES)
    assert found == set(settle.PUBLISHED)
