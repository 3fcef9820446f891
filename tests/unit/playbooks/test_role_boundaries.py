"""Playbooks talk to roles through their inputs and their ONE published result (issue 26): no playbook
reads a role's private variables (`_<role>_*`, `__<role>_*`), none imports `_common` itself, and no
play's hosts are retargeted by a variable (a hosts line is a visible pattern of groups)."""
import glob
import os
import re

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, 'roles', '*')) if os.path.isdir(p))
# a role's private state is what its tasks or vars set: the defaults-only role dankfleet has none, and the
# playbooks' own _dankfleet_* names are theirs
STATEFUL = [r for r in ROLES if any(os.path.isdir(os.path.join(REPO, 'roles', r, d)) for d in ('tasks', 'vars'))]
PRIVATE = re.compile(r'(?<![\w.])_{1,2}(%s)_\w+' % '|'.join(re.escape(r.lstrip('_')) for r in STATEFUL))
PLAYBOOKS = sorted(glob.glob(os.path.join(REPO, 'playbooks', '**', '*.yml'), recursive=True)
                   + glob.glob(os.path.join(REPO, '*.yml')))


def _rel(path):
    return os.path.relpath(path, REPO)


def _strip_comments(text):
    return '\n'.join(re.sub(r'(^|\s)#.*$', '', line) for line in text.splitlines())


def test_the_roles_and_playbooks_are_found():
    assert {'llama_server', 'runtime_retire', 'llm_plan', '_common', 'dankfleet'} <= set(ROLES)
    assert {'llama_server', 'runtime_retire', 'llm_plan', '_common'} <= set(STATEFUL) and 'dankfleet' not in STATEFUL
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


JINJA_WORDS = {'if', 'else', 'in', 'not', 'and', 'or', 'default', 'groups'}


def _hidden_names(line, header):
    """The variables a templated hosts line reads besides the inventory's groups and one public variable that
    the playbook's header names (-e VAR=GROUP)."""
    if '{{' not in line and '{%' not in line:
        return []
    code = re.sub(r"'[^']*'|\"[^\"]*\"", "''", line)
    names = set(re.findall(r'\b([A-Za-z_]\w*)\b', code)) - JINJA_WORDS
    return sorted(n for n in names if n.startswith('_') or '-e %s=' % n not in header)


def test_the_hidden_name_check_can_fail():
    header = '# ansible-playbook x.yml [-e llm_bench_hosts=GROUP]'
    assert _hidden_names("{{ __deploy_hosts | default('llm_endpoints') }}", header) == ['__deploy_hosts']
    assert _hidden_names("{{ other_hosts | default('all') }}", header) == ['other_hosts']
    assert _hidden_names("{{ llm_bench_hosts | default('llm_endpoints') }}", header) == []
    assert _hidden_names("{{ 'a:!b' if 'b' in groups else 'a' }}", header) == []
    assert _hidden_names("llm_endpoints", header) == []


def test_no_play_is_retargeted_by_a_hidden_variable():
    """A hosts line is a pattern of groups (templated on the inventory's groups at most), or one public
    variable the playbook's header names."""
    hosts, hidden = {}, {}
    for path in PLAYBOOKS:
        with open(path) as handle:
            text = handle.read()
        header = text.split('\n- ', 1)[0]
        doc = yaml.safe_load(text)
        for play in doc if isinstance(doc, list) else []:
            if not (isinstance(play, dict) and 'hosts' in play):
                continue
            where = '%s: %s' % (_rel(path), play.get('name'))
            hosts[where] = str(play['hosts'])
            if _hidden_names(hosts[where], header):
                hidden[where] = hosts[where]
    assert hosts, 'no play found'
    assert hidden == {}
