"""Playbooks talk to roles through their inputs and their ONE published result (issue 26): no playbook
reads a role's private variables (`_<role>_*`, `__<role>_*`), none imports `_common` itself, and no
play's hosts are retargeted by a variable (a hosts line is a visible pattern of groups)."""
import glob
import os
import re

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, 'roles', '*')) if os.path.isdir(p))
PRIVATE = re.compile(r'(?<![\w.])_{1,2}(%s)_\w+' % '|'.join(re.escape(r.lstrip('_')) for r in ROLES))
PLAYBOOKS = sorted(glob.glob(os.path.join(REPO, 'playbooks', '**', '*.yml'), recursive=True)
                   + glob.glob(os.path.join(REPO, '*.yml')))


def _rel(path):
    return os.path.relpath(path, REPO)


def _strip_comments(text):
    return '\n'.join(re.sub(r'(^|\s)#.*$', '', line) for line in text.splitlines())


def test_the_roles_and_playbooks_are_found():
    assert {'llama_server', 'runtime_retire', 'llm_plan', '_common'} <= set(ROLES)
    assert os.path.join(REPO, 'playbooks', 'deploy_endpoints.yml') in PLAYBOOKS


def test_the_pattern_finds_what_it_looks_for():
    found = [m.group(0) for m in PRIVATE.finditer(
        "{{ _llama_server_rolled_back }} {{ __llama_server_verify.x }} _common_off_boot_unit: x "
        "{{ llama_server_result.rolled_back }} {{ llm_plan.fits }} {{ __deploy_finding }}")]
    assert found == ['_llama_server_rolled_back', '__llama_server_verify', '_common_off_boot_unit']


def test_no_playbook_reads_a_roles_private_variables():
    found = []
    for path in PLAYBOOKS:
        with open(path) as handle:
            text = _strip_comments(handle.read())
        found += ['%s: %s' % (_rel(path), m.group(0)) for m in PRIVATE.finditer(text)]
    assert found == []


def _walk(node, found, path):
    if isinstance(node, list):
        for item in node:
            _walk(item, found, path)
    elif isinstance(node, dict):
        for key in ('ansible.builtin.import_role', 'ansible.builtin.include_role', 'import_role', 'include_role'):
            call = node.get(key)
            if isinstance(call, dict) and str(call.get('name', '')).split('.')[-1] == '_common':
                found.append(_rel(path))
        for value in node.values():
            _walk(value, found, path)


def test_no_playbook_imports_common():
    found = []
    for path in PLAYBOOKS:
        with open(path) as handle:
            _walk(yaml.safe_load(handle), found, path)
    assert found == []


def test_no_play_is_retargeted_by_a_hidden_variable():
    """A hosts line is a pattern of groups, or one public variable the playbook's header names (-e VAR=GROUP)."""
    hosts, hidden = {}, {}
    for path in PLAYBOOKS:
        with open(path) as handle:
            text = handle.read()
        header = text.split('\n- ', 1)[0]
        doc = yaml.safe_load(text)
        for play in doc if isinstance(doc, list) else []:
            if not (isinstance(play, dict) and 'hosts' in play):
                continue
            where, line = '%s: %s' % (_rel(path), play.get('name')), str(play['hosts'])
            hosts[where] = line
            names = re.findall(r'\b([A-Za-z_]\w*)\s*\|', line) if '{{' in line or '{%' in line else []
            if ('{{' in line or '{%' in line) and (len(names) != 1 or names[0].startswith('_')
                                                   or '-e %s=' % names[0] not in header):
                hidden[where] = line
    assert hosts, 'no play found'
    assert hidden == {}
