# -*- coding: utf-8 -*-
"""A role reads another role's published result, never its inputs (issue 32, item 5; the playbook side is
tests/unit/playbooks/test_role_boundaries.py). Every variable a role's tasks, handlers, templates, vars and defaults
read (inside {{ }} / {% %}, and the bare expressions of when/that/changed_when/failed_when/until) that is named with
another role's prefix (`<role>_*`, `_<role>_*`, `__<role>_*`, or the role's own name) must be one that role
publishes: a name its tasks set (set_fact or register) that is public, or that its meta/argument_specs.yml names.
The fleet-wide `dankfleet_*` settings (the dankfleet role, the settle step's result) are everyone's.

No role reads another role's input: a read of one fails (the self-test below proves the finder sees one). What a
role needs of another's inputs comes through the settle step's result (dankfleet_settled: llm_plan takes the fetch's
manifest as `payload`, llm_bench finds the served env file through `service`) or from its caller.
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


def role_texts():
    """(reader, file relative to the role, text) of every file of every role the finder reads."""
    for reader in ROLES:
        for path in _role_files(reader):
            with open(path) as handle:
                yield reader, os.path.relpath(path, os.path.join(REPO, 'roles', reader)), handle.read()


def cross_reads(texts=None):
    """{(owner, variable, reader): [files]} of every read of another role's variable (texts: role_texts())."""
    found = {}
    for reader, rel, text in (role_texts() if texts is None else texts):
        for name in reads_of_text(text, rel.endswith(('.yml', '.yaml'))):
            own = owner(name)
            if own and own != reader and own not in SHARED:
                found.setdefault((own, name, reader), []).append(rel)
    return found


def input_reads(found):
    """[(reader, variable)] of the reads of another role's input (a name its owner does not publish)."""
    return sorted(set((reader, name) for own, name, reader in found if name not in published(own)))


def drawn(found):
    """The ARCHITECTURE.md block: one line per read, published results first (an INPUT line fails the test above)."""
    lines = []
    for kind in ('result', 'INPUT'):
        for own, name, reader in sorted(found):
            is_input = name not in published(own)
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
    new = input_reads(cross_reads())
    assert new == [], ('a role reads another role\'s inputs (take its published result, the settle step\'s '
                       'dankfleet_settled, or have the caller pass it): ' + ', '.join('%s reads %s' % pair for pair in new))


def test_a_read_of_another_roles_input_is_found_where_the_roles_keep_it():
    """The check above can fail: the repo's roles with the reads paid off in issue 32 put back (llm_plan's defaults
    taking the fetch role's manifest and token) and a serve-role template reading a plan input, as a role's own files
    would hold them; a read of a published result (llm_plan, gguf_fetch_paths) or of the settle step's result is none."""
    planted = [
        ('llm_plan', 'defaults/main.yml', 'llm_plan_url_token: "{{ gguf_fetch_token | default(\'\') }}"\n'
                                          'llm_plan_manifest: "{{ gguf_fetch_manifest | default([]) }}"\n'),
        ('llama_server', 'templates/planted.j2', '{% if llm_plan_floor_bytes > 0 %}{{ llm_plan.ctx_size }}{% endif %}'),
        ('llm_bench', 'tasks/planted.yml', '- name: x\n  ansible.builtin.debug: {msg: "{{ gguf_fetch_paths.target }}"}\n'
                                           '  when: dankfleet_settled.payload.manifest | length > 0\n'),
    ]
    found = cross_reads(list(role_texts()) + planted)
    assert input_reads(found) == [('llama_server', 'llm_plan_floor_bytes'), ('llm_plan', 'gguf_fetch_manifest'),
                                  ('llm_plan', 'gguf_fetch_token')]
    assert found[('gguf_fetch', 'gguf_fetch_manifest', 'llm_plan')] == ['defaults/main.yml']
    assert 'llm_plan_floor_bytes                 ──▶ llama_server   INPUT' in '\n'.join(drawn(found))


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
