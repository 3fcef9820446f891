# -*- coding: utf-8 -*-
"""The last Jinja logic of the roles' tasks and vars (issue 32, item 1) - the serve preflight's missing inputs, user
and port messages, the plan's payload paths, headers and RPC workers, the facts' pinned rule - moved into filters
over module_utils: each gives what the Jinja it replaced gave. The replaced YAML is kept here verbatim (faffa54) and
rendered by ansible-core's own Templar against the tasks and vars as they are now (the collection's filters by
their FQCN), on generated inputs. One difference is chosen, and pinned: a manifest dest_dir ending in `/` gives
`<dest_dir><file>` (shape.payload_path's one `/`), where the plan's Jinja and gguf_fetch's gave `//`."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import re

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.filter.fetch_entries import fetch_entries
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import payload_path
from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import render_expr, role_file

# --- the YAML each filter replaced, verbatim ----------------------------------------------------------------------
OLD_USER_TASK = yaml.safe_load(r"""
- name: Refuse an existing service user without the device groups, or a missing one we may not create
  ansible.builtin.assert:
    that:
      - _llama_server_user_exists or llama_server_create_user
      - _llama_server_user_lacking | length == 0
    fail_msg: >-
      {% if not _llama_server_user_exists %}the service user {{ llama_server_user }} does not exist on
      {{ inventory_hostname }} and llama_server_create_user is false: create it, or set llama_server_create_user
      true to have a system user made.{% else %}the service user {{ llama_server_user }} exists and is not in
      group(s) {{ _llama_server_user_lacking | join(', ') }}, which the {{ llama_server_backend }} backend needs for
      its device nodes. An existing account is never modified by this role (it may be the operator's own login):
      run `usermod -aG {{ _llama_server_user_lacking | join(',') }} {{ llama_server_user }}` once, or set
      llama_server_user_groups to what the unit really needs.{% endif %} Nothing was changed.
    quiet: true
""")
OLD_MISSING_TASK = yaml.safe_load(r"""
- name: Refuse a missing binary or payload
  vars:
    _missing: >-
      {%- set out = [] -%}
      {%- for i in _llama_server_inputs -%}
      {%-   set s = _llama_server_paths_now[i.path] | default({'exists': false}) -%}
      {%-   set x = s.target_exists | default(false) if s.type | default('') == 'link'
                    else (s.mode | default('0000') | string)[-3:] | list | map('int') | select('odd') | list | length > 0 -%}
      {%-   if not s.exists or (i.what == 'llama-server binary' and not x) -%}{%- set _ = out.append(i) -%}{%- endif -%}
      {%- endfor -%}
      {{ out }}
  ansible.builtin.assert:
    that: _missing | length == 0 or ansible_check_mode
    fail_msg: >-
      {% for r in _missing %}the {{ r.what }} {{ r.path or '(empty path)' }} is missing{{ ' or not executable'
      if r.what == 'llama-server binary' else '' }}: {{ r.fix }}. {% endfor %}Nothing was changed.
    success_msg: >-
      {% if _missing | length > 0 %}check mode: {% for r in _missing %}the {{ r.what }} {{ r.path }} is missing
      (a real run refuses unless the build/fetch roles provide it). {% endfor %}{% else %}binary and payload present{% endif %}
    quiet: "{{ _missing | length == 0 }}"
""")
OLD_PORT_TASK = yaml.safe_load(r"""
- name: Refuse a port held by something that is neither this service nor handed over
  vars:
    _kept: >-
      {{ __llama_server_port_cgroups.results | default([])
         | rejectattr('stdout', 'search', '/(' ~ (llama_server_port_handover_units | map('regex_escape') | join('|') or '$^') ~ ')(/|$)')
         | map(attribute='item') | list }}
    _handed: "{{ _llama_server_port_foreign | difference(_kept) }}"
  ansible.builtin.assert:
    that: _kept | length == 0 or ansible_check_mode
    fail_msg: >-
      port {{ llama_server_port }} is held by {{ _llama_server_port_ss }}, not by
      {{ llama_server_service_name }}.service (MainPID {{ _llama_server_main_pid }}) nor by a
      unit the retire stage stops ({{ llama_server_port_handover_units | join(', ') or 'none declared' }}). Declare that
      runtime in runtime_retire_runtimes (its units or quadlets, with the port) or choose another llama_server_port.
      Nothing was changed.
    success_msg: >-
      {% if _kept | length > 0 %}port {{ llama_server_port }} is held now by
      {{ _llama_server_port_ss }}, which no unit the retire stage stops explains: a deploy (not --check)
      refuses here. Declare that runtime in runtime_retire_runtimes or choose another
      llama_server_port.{% elif _handed | length > 0 %}port {{ llama_server_port }} is held by pid(s) {{ _handed | join(', ') }}
      of {{ llama_server_port_handover_units | join(', ') }}, which the retire stage stops before the restart{% else %}port
      {{ llama_server_port }} is free or this service's{% endif %}
    quiet: "{{ _kept | length == 0 and _handed | length == 0 }}"
""")
OLD_PAYLOAD_VARS = yaml.safe_load(r"""
_llm_plan_payload_paths: >-
  {%- set out = dict(dankfleet_settled.payload_paths | default({})) -%}
  {%- for item in llm_plan_manifest -%}
  {%-   set _ = out.update({item.role: (item.dest_dir | default(llm_plan_models_dir ~ '/' ~ item.name, true)) ~ '/' ~ item.file}) -%}
  {%- endfor -%}
  {{ out }}
""")
OLD_RPC_VARS = yaml.safe_load(r"""
_llm_plan_rpc_worker_facts: >-
  {%- set out = [] -%}
  {%- for h in llm_plan_rpc_workers -%}
  {%-   set hv = hostvars[h] -%}
  {%-   set _ = out.append({'inventory_hostname': h, 'dankfleet_private_address': hv.dankfleet_private_address | default(none),
                            'llama_rpc_worker_devices': hv.llama_rpc_worker_devices | default(none),
                            'llama_rpc_worker_backend': hv.llama_rpc_worker_backend | default('cpu'),
                            'ansible_facts': {'memtotal_mb': hv.ansible_facts.memtotal_mb | default(none)},
                            'gpu_facts': hv.llm_plan.gpu_facts | default(hv.gpu_facts | default(none))}) -%}
  {%- endfor -%}
  {{ out }}
""")
OLD_PLAN_TASK = yaml.safe_load(r"""
- name: Plan the split, the context and the cache-ram
  vars:
    _reads: "{{ llm_plan_reads or llm_plan.reads }}"
    _headers: >-
      {%- set out = {} -%}
      {%- if _reads == 'recorded' -%}
      {%-   for role, path in llm_plan.recorded_headers.items() -%}
      {%-     set _ = out.update({role: lookup('ansible.builtin.file', path) | from_json}) -%}
      {%-   endfor -%}
      {%-   set _ = out.update(llm_plan.url_headers | default({})) -%}
      {%- elif __llm_plan_payload_facts is skipped -%}
      {%-   set _ = out.update(_llm_plan_headers_on_host) -%}
      {%- else -%}
      {%-   for r in __llm_plan_payload_facts.results | selectattr('item', 'defined') -%}
      {%-     set _ = out.update({r.item.key: r}) -%}
      {%-   endfor -%}
      {%- endif -%}
      {{ out }}
""")
OLD_PINNED_VARS = yaml.safe_load(r"""
_pinned_split: "{{ llm_plan_serve.tensor_split | length > 0 }}"
_pinned_ctx: "{{ llm_plan_serve.ctx_size | int > 0 }}"
_pinned_cache: "{{ llm_plan_serve.cache_ram | string != 'auto' }}"
""")


# --- rendering ----------------------------------------------------------------------------------------------------

def task(path, name):
    with open(path) as handle:
        return [t for t in yaml.safe_load(handle) if t.get('name') == name][0]


def role_vars(role):
    with open(role_file(role, 'vars', 'main.yml')) as handle:
        return yaml.safe_load(handle)


PREFLIGHT = role_file('llama_server', 'tasks', 'preflight.yml')
PLAN = role_file('llm_plan', 'tasks', 'plan.yml')
FACTS = role_file('llm_plan', 'tasks', 'facts.yml')
NAME = st.text('abcxyz-_.0', min_size=1, max_size=8)

# --- the serve preflight: missing binary and payload -------------------------------------------------------------
WHAT = st.sampled_from(['llama-server binary', 'model', 'drafter', 'mmproj', 'chat template'])
PATH = st.sampled_from(['/opt/llama/bin/llama-server', '/m/q/q.gguf', '/m/d.gguf', '', 'rel/x', '/srv/t.jinja'])
INPUT = st.fixed_dictionaries({'what': WHAT, 'path': PATH, 'fix': st.sampled_from(['run the build role', 'set it'])})
ENTRY = st.fixed_dictionaries({'exists': st.booleans()}, optional={
    'type': st.sampled_from(['file', 'link', 'directory', '']),
    'target_exists': st.booleans(), 'mode': st.sampled_from(['0755', '0644', '0600', '0710', '0001', '644', 'x7', None])})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=st.lists(INPUT, max_size=5), entries=st.dictionaries(PATH, ENTRY, max_size=6))
def test_missing_inputs_is_the_loop_and_messages_it_replaced(inputs, entries):
    variables = {'_llama_server_inputs': inputs, '_llama_server_paths_now': entries}
    before, now = OLD_MISSING_TASK[0], task(PREFLIGHT, 'Refuse a missing binary or payload')
    old_missing = render_expr(before['vars']['_missing'], variables)
    new_missing = render_expr(now['vars']['_missing'], variables)
    assert [dict((k, v) for k, v in m.items() if k not in ('refusal', 'note')) for m in new_missing] == old_missing
    # the fail_msg shows only when something is missing
    for key in ('fail_msg', 'success_msg', 'quiet')[0 if old_missing else 1:]:
        assert render_expr(now['ansible.builtin.assert'][key], variables, now['vars']) == \
            render_expr(before['ansible.builtin.assert'][key], variables, before['vars']), key


@pytest.mark.parametrize('entry', [
    {'exists': True, 'type': 'file', 'mode': '0710'}, {'exists': True, 'type': 'file', 'mode': '0644'},
    {'exists': True, 'type': 'file', 'mode': '0001'}, {'exists': True, 'type': 'link', 'target_exists': False, 'mode': '0777'},
    {'exists': True, 'type': 'link', 'target_exists': True}, {'exists': True}, {'exists': False, 'mode': '0755'}])
def test_the_binary_is_executable_as_the_loop_said(entry):
    variables = {'_llama_server_inputs': [{'what': 'llama-server binary', 'path': '/b', 'fix': 'build'}],
                 '_llama_server_paths_now': {'/b': entry}}
    new = render_expr(task(PREFLIGHT, 'Refuse a missing binary or payload')['vars']['_missing'], variables)
    assert len(new) == len(render_expr(OLD_MISSING_TASK[0]['vars']['_missing'], variables))
    assert len(new) == (0 if entry['exists'] and (entry.get('target_exists') or entry.get('mode', '')[-3:] in ('710', '001'))
                        else 1)


def test_missing_inputs_recorded():
    inputs = [{'what': 'llama-server binary', 'path': '/b', 'fix': 'build it'}, {'what': 'model', 'path': '', 'fix': 'fetch'}]
    now = task(PREFLIGHT, 'Refuse a missing binary or payload')
    variables = {'_llama_server_inputs': inputs, '_llama_server_paths_now': {'/b': {'exists': True, 'mode': '0644'}}}
    assert render_expr(now['ansible.builtin.assert']['fail_msg'], variables, now['vars']) == (
        'the llama-server binary /b is missing or not executable: build it. the model (empty path) is missing: fetch. '
        'Nothing was changed.')


# --- the serve preflight: the service user and the port ----------------------------------------------------------
def _outcome(tasks, variables):
    """The message of the first assert that fails, or None: what the play shows."""
    for one in tasks:
        that = one['ansible.builtin.assert']['that']
        that = that if isinstance(that, list) else [that]
        if not all(render_expr('{{ %s }}' % cond, variables) for cond in that):
            return render_expr(one['ansible.builtin.assert']['fail_msg'], variables, one.get('vars'))
    return None


@settings(max_examples=40, deadline=None)
@given(exists=st.booleans(), create=st.booleans(), lacking=st.sampled_from([[], ['video'], ['video', 'render']]))
def test_the_user_refusals_are_the_message_they_replaced(exists, create, lacking):
    variables = {'_llama_server_user_exists': exists, 'llama_server_create_user': create,
                 '_llama_server_user_lacking': lacking if exists else [], 'llama_server_user': 'llama',
                 'inventory_hostname': 'h1', 'llama_server_backend': 'rocm'}
    now = [task(PREFLIGHT, 'Refuse a missing service user we may not create'),
           task(PREFLIGHT, 'Refuse an existing service user without the device groups')]
    assert _outcome(now, variables) == _outcome(OLD_USER_TASK, variables)


PORT_CHECK = role_file('llama_server', 'tasks', 'port_check.yml')
CGROUP_UNITS = {'/system.slice/ollama.service': ['system.slice', 'ollama.service'],
                '/system.slice/other.service': ['system.slice', 'other.service'], '/user.slice': ['user.slice'], '': None}


@settings(max_examples=60, deadline=None)
@given(foreign=st.lists(st.sampled_from(['11', '12', '13']), unique=True, max_size=3),
       handover=st.lists(st.sampled_from(['ollama.service', 'vllm.service']), unique=True, max_size=2),
       cgroup=st.sampled_from(sorted(CGROUP_UNITS)), main_pid=st.sampled_from([0, 12]))
def test_the_port_messages_are_the_ones_they_replaced(foreign, handover, cgroup, main_pid):
    """port_check.yml over dankfleet.llm.port_holders says what the Jinja over `cat /proc/<pid>/cgroup` said: the
    host's holders now carry their units (host_state_info), `''` the cgroup text cat could not read (unknown)."""
    ss = 'LISTEN 0 4096 *:8080 users:(("ollama",pid=11))'
    holders = [{'pid': int(pid), 'name': 'ollama', 'units': CGROUP_UNITS[cgroup]} for pid in foreign]
    if main_pid:
        holders.append({'pid': main_pid, 'name': 'llama-server', 'units': ['system.slice', 'llama-server.service']})
    read = {'ports': {'8080': {'listening': bool(holders), 'holders': holders, 'lines': [ss]}},
            'units': {'llama-server.service': {'MainPID': main_pid}}}
    others = [pid for pid in foreign if pid != str(main_pid)]
    old_vars = {'_llama_server_port_foreign': others, 'llama_server_port_handover_units': handover,
                '__llama_server_port_cgroups': {'results': [{'item': pid, 'stdout': '0::' + cgroup if cgroup else ''}
                                                            for pid in others]},
                'llama_server_port': 8080, '_llama_server_port_ss': ss,
                'llama_server_service_name': 'llama-server', '_llama_server_main_pid': str(main_pid)}
    new_vars = {'_llama_server_port_read': read, 'llama_server_port_handover_units': handover,
                'llama_server_port': 8080, 'llama_server_service_name': 'llama-server', 'llama_server_port_check': 'refuse'}
    judge = task(PORT_CHECK, 'Sort the port\'s holders into this service\'s, handed over and kept (dankfleet.llm.port_holders)')
    new_vars['_llama_server_port_holders'] = render_expr(
        judge['ansible.builtin.set_fact']['_llama_server_port_holders'], new_vars, judge['vars'])
    before = OLD_PORT_TASK[0]
    now = task(PORT_CHECK, 'Refuse a port held by something that is neither this service nor handed over')
    passes = render_expr('{{ %s }}' % before['ansible.builtin.assert']['that'], dict(old_vars, ansible_check_mode=False),
                         before['vars'])
    assert render_expr('{{ %s }}' % now['ansible.builtin.assert']['that'], dict(new_vars, ansible_check_mode=False)) == passes
    assert render_expr('{{ %s }}' % now['ansible.builtin.assert']['that'], dict(new_vars, ansible_check_mode=True))
    # plan.yml's report: what the deploy would refuse is said, and the run goes on
    assert render_expr('{{ %s }}' % now['ansible.builtin.assert']['that'],
                       dict(new_vars, ansible_check_mode=False, llama_server_port_check='report'))
    # the fail_msg shows only when the port is refused
    for key in ('fail_msg', 'success_msg', 'quiet')[1 if passes else 0:]:
        assert render_expr(now['ansible.builtin.assert'][key], new_vars) == \
            _pids_sorted(render_expr(before['ansible.builtin.assert'][key], old_vars, before['vars'])), key


def _pids_sorted(message):
    """The old message's handed pids (Jinja's `difference`, a set: any order) in the order the filter says them."""
    return re.sub(r'pid\(s\) ([0-9, ]+) of', lambda m: 'pid(s) %s of' % ', '.join(sorted(m.group(1).split(', '), key=int)),
                  message) if isinstance(message, str) else message


# --- the plan: payload paths, RPC workers, headers, the pinned rule ----------------------------------------------
MANIFEST_ENTRY = st.fixed_dictionaries(
    {'name': NAME, 'file': NAME.map(lambda n: n + '.gguf'), 'role': st.sampled_from(['target', 'drafter', 'mmproj'])},
    optional={'dest_dir': st.one_of(st.none(), st.just(''), st.just('/srv/m/'), st.just('/srv/x'))})
SETTLED = st.dictionaries(st.sampled_from(['target', 'drafter', 'mmproj']), st.sampled_from(['/by/hand.gguf', '/x/y.gguf']))


@settings(max_examples=40, deadline=None)
@given(manifest=st.lists(MANIFEST_ENTRY, max_size=4), models_dir=st.sampled_from(['/var/lib/dankfleet/models', '/m/']),
       settled=st.one_of(st.none(), SETTLED))
def test_payload_paths_is_the_loop_it_replaced_with_one_slash(manifest, models_dir, settled):
    variables = {'llm_plan_manifest': manifest, 'llm_plan_models_dir': models_dir}
    if settled is not None:
        variables['dankfleet_settled'] = {'payload_paths': settled}
    old = render_expr(OLD_PAYLOAD_VARS['_llm_plan_payload_paths'], variables)
    new = render_expr(role_vars('llm_plan')['_llm_plan_payload_paths'], variables)
    assert new == dict((role, path.replace('/srv/m//', '/srv/m/')) for role, path in old.items())


@settings(max_examples=40, deadline=None)
@given(manifest=st.lists(MANIFEST_ENTRY, max_size=4), models_dir=st.sampled_from(['/var/lib/dankfleet/models', '/m/']))
def test_the_fetch_and_the_plan_place_each_file_alike(manifest, models_dir):
    """gguf_fetch's dest and the plan's path of one entry are one string (the trailing-/ drift is gone)."""
    variables = {'llm_plan_manifest': manifest, 'llm_plan_models_dir': models_dir}
    paths = render_expr(role_vars('llm_plan')['_llm_plan_payload_paths'], variables)
    last = dict((e['role'], e['dest']) for e in fetch_entries(manifest, models_dir))
    assert paths == last
    assert payload_path({'name': 'q', 'file': 'q.gguf', 'dest_dir': '/srv/m/'}, '/m') == '/srv/m/q.gguf'


HOSTVARS = st.fixed_dictionaries({}, optional={
    'dankfleet_private_address': st.sampled_from(['10.0.0.2', None]),
    'llama_rpc_worker_devices': st.just([{'device': 'ROCm0', 'port': 50052}]),
    'llama_rpc_worker_backend': st.sampled_from(['cpu', 'rocm']),
    'ansible_facts': st.fixed_dictionaries({}, optional={'memtotal_mb': st.integers(0, 10 ** 6)}),
    'gpu_facts': st.sampled_from([{'gpus': []}, None]),
    'llm_plan': st.fixed_dictionaries({}, optional={'gpu_facts': st.sampled_from([{'gpus': [{'name': 'ROCm0'}]}, None])})})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hosts=st.dictionaries(NAME, HOSTVARS, max_size=3))
def test_rpc_worker_facts_is_the_loop_it_replaced(hosts):
    variables = {'llm_plan_rpc_workers': sorted(hosts), 'hostvars': hosts}
    assert render_expr(role_vars('llm_plan')['_llm_plan_rpc_worker_facts'], variables) == \
        render_expr(OLD_RPC_VARS['_llm_plan_rpc_worker_facts'], variables)


HEADER = st.fixed_dictionaries({'n_layers': st.integers(1, 99), 'arch': st.sampled_from(['qwen3', 'llama'])})
ROLES = st.sampled_from(['target', 'drafter', 'mmproj'])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(reads=st.sampled_from(['recorded', 'host']), records=st.dictionaries(ROLES, HEADER, max_size=3),
       urls=st.one_of(st.none(), st.dictionaries(ROLES, HEADER, max_size=2)), on_host=st.dictionaries(ROLES, HEADER, max_size=3),
       read=st.one_of(st.just({'skipped': True, 'results': []}),
                      st.lists(st.tuples(ROLES, HEADER), max_size=3).map(
                          lambda rs: {'changed': False, 'results': [dict(h, item={'key': r, 'value': '/m/x'}) for r, h in rs]
                                      + [{'skipped': True}]})))
def test_plan_headers_is_the_loop_it_replaced(tmp_path, reads, records, urls, on_host, read):
    recorded = {}
    for role, header in records.items():
        path = tmp_path / (role + '.json')
        path.write_text(json.dumps(header))
        recorded[role] = str(path)
    plan = {'recorded_headers': recorded, 'payload_paths': {}}
    if urls is not None:
        plan['url_headers'] = urls
    variables = {'llm_plan_reads': reads, 'llm_plan': plan, '_llm_plan_headers_on_host': on_host,
                 '__llm_plan_payload_facts': read}
    # no collection loader runs here: the lookup by its short name, in both
    before, now = [dict((k, v.replace("'ansible.builtin.file'", "'file'")) for k, v in t['vars'].items())
                   for t in (OLD_PLAN_TASK[0], task(PLAN, 'Plan the split, the context and the cache-ram'))]
    assert render_expr(now['_headers'], variables, now) == render_expr(before['_headers'], variables, before)


SERVE = st.fixed_dictionaries({'tensor_split': st.one_of(st.just([]), st.lists(st.integers(1, 9), min_size=1, max_size=3)),
                               'ctx_size': st.sampled_from([0, 4096, 65536]),
                               'cache_ram': st.sampled_from(['auto', 0, 8192]), 'n_cpu_moe': st.sampled_from(['auto', 0, 3])})


@settings(max_examples=40, deadline=None)
@given(serve=SERVE)
def test_the_facts_origin_is_the_pinned_rule_it_replaced(serve):
    """On the settled serve settings (typed by the settle step) the one rule says what the facts' Jinja said."""
    variables = {'llm_plan_serve': serve}
    now = task(FACTS, 'Publish the facts (llm_plan; the plan fills in the rest)')
    new = render_expr(now['ansible.builtin.set_fact']['llm_plan']['origin'], variables, now['vars'])
    pinned = render_expr(OLD_PINNED_VARS, variables)
    assert new == dict((key, 'pinned' if pinned['_pinned_' + short] else 'planned')
                       for key, short in (('tensor_split', 'split'), ('ctx_size', 'ctx'), ('cache_ram', 'cache')))
