# -*- coding: utf-8 -*-
"""The filters that took the Jinja loops out of the roles' tasks and vars (issue 32, item 5): each gives what the
Jinja it replaced gave. The replaced expressions are kept here verbatim (main at 87cdd5f) and rendered by
ansible-core's own Templar against the filter, on recorded shapes and on generated ones; a wrong input is a named
AnsibleFilterError, never a traceback."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.filter.fetch_entries import fetch_entries
from ansible_collections.dankfleet.llm.plugins.filter.fetch_report import fetch_report
from ansible_collections.dankfleet.llm.plugins.filter.plan_fleet_summary import plan_fleet_summary
from ansible_collections.dankfleet.llm.plugins.filter.restore_units import restore_units
from ansible_collections.dankfleet.llm.plugins.filter.runtime_units import runtime_units
from ansible_collections.dankfleet.llm.plugins.filter.unit_states import unit_states
from ansible_collections.dankfleet.llm.plugins.module_utils.host.systemd_units import quadlet_service
from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import plain, render_expr

RUNNING = ['active', 'activating', 'reloading', 'deactivating', 'refreshing']
QUADLET_SUFFIX = {'.container': '', '.kube': '', '.pod': '-pod', '.network': '-network', '.volume': '-volume',
                  '.build': '-build', '.image': '-image'}

# --- the Jinja each filter replaced, verbatim -------------------------------------------------------------------
OLD_UNIT_STATES = """
      {%- set out = [] -%}
      {%- for r in __common_units_system.results | default([]) + __common_units_user.results | default([]) -%}
      {%-   set s = r.status | default({}) -%}
      {%-   set _ = out.append({'unit': r.item.name, 'scope': r.item.scope, 'user': r.item.user | default(none),
                                'load_state': s.LoadState | default('unknown'),
                                'active_state': s.ActiveState | default('unknown'),
                                'unit_file_state': s.UnitFileState | default('') or 'unknown',
                                'sub_state': s.SubState | default('unknown'),
                                'running': s.ActiveState | default('') in _common_units_running_states}) -%}
      {%- endfor -%}
      {{ out }}"""
OLD_FETCH_ENTRIES = """
  {%- set out = [] -%}
  {%- for e in gguf_fetch_manifest -%}
  {%-   set d = e.dest_dir | default(gguf_fetch_models_dir ~ '/' ~ e.name, true) -%}
  {%-   set _ = out.append(e | combine({'dest_dir': d, 'dest': d ~ '/' ~ e.file})) -%}
  {%- endfor -%}
  {{ out }}"""
OLD_FETCH_REPORT = ("{{ _file.role }} {{ _file.dest }}: {{ item.status }}, {{ _detail[item.status] | default(item.msg) }}"
                    "{{ _trash }}{{ _dirs }}")
OLD_FETCH_REPORT_VARS = {
    '_file': "{{ item._gguf_fetch_entry }}",
    '_detail': {
        'verified': "by {{ item.verified_by | default('') }}, {{ item.bytes_hashed }} bytes hashed",
        'downloaded': "{{ item.bytes_downloaded }} bytes in {{ item.attempts }} attempt(s) at {{ item.rate_bytes_per_s }} B/s, "
                      "{{ item.bytes_hashed }} bytes hashed",
        'resumed': "from byte {{ item.resumed_from }}: {{ item.bytes_downloaded }} bytes in {{ item.attempts }} attempt(s) "
                   "at {{ item.rate_bytes_per_s }} B/s, {{ item.bytes_hashed }} bytes hashed"},
    '_trash': "{{ '; moved to the trash: ' ~ (item.trashed | map(attribute='path') | join(', ')) if item.trashed else '' }}",
    '_dirs': """{%- set made = item.directories | default([]) | selectattr('changed') | list -%}
      {{ ('; directories ' ~ (made | map(attribute='path') | zip(made | map(attribute='state')) | map('join', ' ') | join(', ')))
         if made else '' }}"""}
OLD_FLEET_VARS = {
    '_rows': """
      {%- set out = [] -%}
      {%- for h in ansible_play_hosts_all -%}
      {%-   set p = hostvars[h].llm_plan | default({}) -%}
      {%-   if p.planned | default(false) -%}
      {%-     set _ = out.append(p.capacity.summary | trim) -%}
      {%-   elif p.cannot_plan | default('') | length > 0 -%}
      {%-     set _ = out.append(h ~ ': cannot plan: ' ~ p.cannot_plan | trim) -%}
      {%-   elif p.payload_present is defined and not p.payload_present -%}
      {%-     set _ = out.append(h ~ ': plans after the fetch') -%}
      {%-   else -%}
      {%-     set _ = out.append(h ~ ': stopped before the plan (see its failed task above)') -%}
      {%-   endif -%}
      {%- endfor -%}
      {{ out }}""",
    '_planned': """{{ ansible_play_hosts_all | map('extract', hostvars) | selectattr('llm_plan', 'defined')
         | map(attribute='llm_plan') | selectattr('planned') | list }}"""}
OLD_FLEET = """{{ ['fleet: ' ~ ansible_play_hosts_all | length ~ ' host(s), '
          ~ _planned | selectattr('fits') | list | length ~ ' fit, '
          ~ _planned | rejectattr('fits') | list | length ~ ' do not fit, '
          ~ (ansible_play_hosts_all | length - _planned | length) ~ ' not planned']
         + _rows }}"""
OLD_RUNTIME_UNITS = """
      {%- set out = [] -%}
      {%- for u in _runtime_retire_runtime.units | default([]) -%}
      {%-   set _ = out.append({'name': u.name, 'scope': u.scope | default('system'), 'user': u.user | default(none)}) -%}
      {%- endfor -%}
      {%- for q in _runtime_retire_runtime.quadlets | default([]) -%}
      {%-   set parts = q.path | basename | splitext -%}
      {%-   set _ = out.append({'name': parts[0] ~ _runtime_retire_quadlet_service_suffix[parts[1]] ~ '.service',
                                'scope': q.scope | default('system'), 'user': q.user | default(none)}) -%}
      {%- endfor -%}
      {{ out }}"""
OLD_RESTORE_UNITS = """
      {%- set out = [] -%}
      {%- for u in __runtime_retire_restored.units -%}
      {%-   set _ = out.append({'name': u.unit, 'scope': u.scope, 'user': u.user,
                              'start': runtime_retire_restore_start | bool and u.active_state in _runtime_retire_running_states}) -%}
      {%- endfor -%}
      {{ out }}"""


# --- shapes ------------------------------------------------------------------------------------------------------
NAME = st.text('abcxyz-_.0', min_size=1, max_size=8)
STATE = st.sampled_from(RUNNING + ['inactive', 'failed', ''])
STATUS = st.fixed_dictionaries({}, optional={'LoadState': st.sampled_from(['loaded', 'not-found', '']),
                                             'ActiveState': STATE,
                                             'UnitFileState': st.sampled_from(['enabled', 'disabled', '', 'static']),
                                             'SubState': st.sampled_from(['running', 'dead', 'exited'])})
UNIT_ITEM = st.fixed_dictionaries({'name': NAME.map(lambda n: n + '.service'), 'scope': st.sampled_from(['system', 'user'])},
                                  optional={'user': st.one_of(st.none(), NAME)})
READ = st.fixed_dictionaries({'item': UNIT_ITEM, 'changed': st.booleans()},
                             optional={'status': st.one_of(STATUS, st.none()), 'failed': st.booleans()})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(system=st.lists(READ, max_size=4), user=st.lists(READ, max_size=4), absent=st.sampled_from(['', 'system', 'user']))
def test_unit_states_is_the_loop_it_replaced(system, user, absent):
    variables = {'_common_units_running_states': RUNNING}
    if absent != 'system':
        variables['__common_units_system'] = {'results': system}
    if absent != 'user':
        variables['__common_units_user'] = {'results': user}
    results = variables.get('__common_units_system', {}).get('results', []) + \
        variables.get('__common_units_user', {}).get('results', [])
    assert unit_states(results, RUNNING) == (render_expr(OLD_UNIT_STATES, variables))


ENTRY = st.fixed_dictionaries({'name': NAME, 'file': NAME.map(lambda n: n + '.gguf'),
                               'role': st.sampled_from(['target', 'drafter', 'mmproj']), 'size': st.integers(0, 10 ** 12)},
                              optional={'dest_dir': st.one_of(st.none(), st.just(''), st.just('/srv/m/'), st.just('/srv/x')),
                                        'sha256': st.just('0' * 64)})


@settings(max_examples=60, deadline=None)
@given(manifest=st.lists(ENTRY, max_size=4), models_dir=st.sampled_from(['/var/lib/dankfleet/models', '/m/', '']))
def test_fetch_entries_is_the_loop_it_replaced(manifest, models_dir):
    old = (render_expr(OLD_FETCH_ENTRIES, {'gguf_fetch_manifest': manifest, 'gguf_fetch_models_dir': models_dir}))
    # one change, chosen: a dest_dir ending in / gives one / (shape.payload_path, the settle step's and the plan's)
    for entry in old:
        entry['dest'] = entry['dest'].replace('/srv/m//', '/srv/m/')
    assert fetch_entries(manifest, models_dir) == old


def test_fetch_entries_recorded():
    manifest = [{'name': 'qwen', 'file': 'q.gguf', 'role': 'target'},
                {'name': 'mm', 'file': 'mm.gguf', 'role': 'mmproj', 'dest_dir': '/srv/mm'}]
    assert [e['dest'] for e in fetch_entries(manifest, '/var/lib/dankfleet/models')] == [
        '/var/lib/dankfleet/models/qwen/q.gguf', '/srv/mm/mm.gguf']
    assert manifest[0] == {'name': 'qwen', 'file': 'q.gguf', 'role': 'target'}, 'the manifest itself is left as it is'


NUM = st.one_of(st.integers(0, 10 ** 12), st.floats(0, 1e9, allow_nan=False))
DIRECTORY = st.fixed_dictionaries({'path': st.sampled_from(['/m', '/m/q', '/m/.trash']), 'changed': st.booleans(),
                                   'state': st.sampled_from(['present', 'created', 'updated'])})
FETCHED = st.fixed_dictionaries(
    {'status': st.sampled_from(['verified', 'downloaded', 'resumed', 'would_download', 'would_resume', 'mismatch']),
     'msg': st.text('abc .', max_size=10), 'bytes_hashed': NUM, 'bytes_downloaded': NUM, 'attempts': st.integers(1, 9),
     'rate_bytes_per_s': NUM, 'resumed_from': NUM,
     'trashed': st.lists(st.fixed_dictionaries({'path': st.sampled_from(['/m/q/a.part', '/m/q/a.gguf'])}), max_size=2),
     '_gguf_fetch_entry': st.fixed_dictionaries({'role': st.sampled_from(['target', 'mmproj']), 'dest': st.just('/m/q/a.gguf')})},
    optional={'verified_by': st.sampled_from(['sha256', 'stamp']), 'directories': st.lists(DIRECTORY, max_size=3)})


@settings(max_examples=80, deadline=None)
@given(result=FETCHED)
def test_fetch_report_is_the_line_it_replaced(result):
    variables = dict(item=result)
    assert fetch_report(result) == render_expr(OLD_FETCH_REPORT, variables, OLD_FETCH_REPORT_VARS)


def test_fetch_report_recorded():
    line = fetch_report({'status': 'resumed', 'resumed_from': 100, 'bytes_downloaded': 900, 'attempts': 2,
                         'rate_bytes_per_s': 50.5, 'bytes_hashed': 1000, 'trashed': [{'path': '/m/.trash/x'}],
                         'directories': [{'path': '/m', 'changed': False, 'state': 'present'},
                                         {'path': '/m/q', 'changed': True, 'state': 'created'}],
                         '_gguf_fetch_entry': {'role': 'target', 'dest': '/m/q/q.gguf'}})
    assert line == ('target /m/q/q.gguf: resumed, from byte 100: 900 bytes in 2 attempt(s) at 50.5 B/s, 1000 bytes hashed'
                    '; moved to the trash: /m/.trash/x; directories /m/q created')


# what llm_plan publishes always says planned (facts.yml's false, plan_result's true) and fits
PLAN = st.fixed_dictionaries({'planned': st.booleans(), 'fits': st.booleans()}, optional={
    'cannot_plan': st.sampled_from(['', ' no header record ']),
    'payload_present': st.booleans(), 'capacity': st.just({'summary': '  h: fits 2 cards \n'})})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=st.lists(st.one_of(st.none(), PLAN), min_size=1, max_size=4))
def test_plan_fleet_summary_is_the_summary_it_replaced(plans):
    hosts = ['h%d' % i for i in range(len(plans))]
    hostvars = {}
    for host, plan in zip(hosts, plans):
        hostvars[host] = {} if plan is None else {'llm_plan': plan}
        if plan is not None and plan.get('planned') and 'capacity' not in plan:
            plan['capacity'] = {'summary': host + ': planned'}
    variables = dict(ansible_play_hosts_all=hosts, hostvars=hostvars)
    assert plan_fleet_summary(hosts, hostvars) == render_expr(OLD_FLEET, variables, OLD_FLEET_VARS)


def test_plan_fleet_summary_recorded():
    hostvars = {'a': {'llm_plan': {'planned': True, 'fits': True, 'capacity': {'summary': 'a: fits\n'}}},
                'b': {'llm_plan': {'planned': False, 'cannot_plan': 'placeholder sha256'}}, 'c': {}}
    assert plan_fleet_summary(['a', 'b', 'c'], hostvars) == [
        'fleet: 3 host(s), 1 fit, 0 do not fit, 2 not planned', 'a: fits', 'b: cannot plan: placeholder sha256',
        'c: stopped before the plan (see its failed task above)']


QUADLET_PATH = st.tuples(st.sampled_from(['/etc/containers/systemd/', '/home/u/.config/x/']),
                         st.sampled_from(['ollama', 'vllm.x']), st.sampled_from(sorted(QUADLET_SUFFIX))).map(''.join)
QUADLET = st.fixed_dictionaries({'path': QUADLET_PATH},
                                optional={'scope': st.sampled_from(['system', 'user']), 'user': NAME})
RUNTIME = st.fixed_dictionaries({'name': NAME}, optional={
    'units': st.lists(st.fixed_dictionaries({'name': NAME.map(lambda n: n + '.service')},
                                            optional={'scope': st.sampled_from(['system', 'user']), 'user': NAME}), max_size=3),
    'quadlets': st.lists(QUADLET, max_size=3)})


@settings(max_examples=80, deadline=None)
@given(runtime=RUNTIME)
def test_runtime_units_is_the_loop_it_replaced(runtime):
    old = render_expr(OLD_RUNTIME_UNITS, {'_runtime_retire_runtime': runtime, '_runtime_retire_quadlet_service_suffix': QUADLET_SUFFIX})
    assert runtime_units(runtime) == plain(old)


def test_quadlet_services_recorded():
    assert [quadlet_service(p) for p in ('/etc/containers/systemd/ollama.container', '/x/a.kube', '/x/web.pod',
                                         '/x/n.network')] == ['ollama.service', 'a.service', 'web-pod.service',
                                                              'n-network.service']
    with pytest.raises(AnsibleFilterError, match=r"runtime_units: quadlet '/x/a.service': '.service' is not a quadlet type"):
        runtime_units({'name': 'x', 'quadlets': [{'path': '/x/a.service'}]})


MANIFEST_UNIT = st.fixed_dictionaries({'unit': NAME, 'scope': st.sampled_from(['system', 'user']),
                                       'user': st.one_of(st.none(), NAME), 'active_state': STATE})


@settings(max_examples=60, deadline=None)
@given(units=st.lists(MANIFEST_UNIT, max_size=4), start=st.sampled_from([True, False, 'yes', 'no', 'true']))
def test_restore_units_is_the_loop_it_replaced(units, start):
    from ansible.module_utils.parsing.convert_bool import boolean
    old = render_expr(OLD_RESTORE_UNITS, {'__runtime_retire_restored': {'units': units},
                                          'runtime_retire_restore_start': start, '_runtime_retire_running_states': RUNNING})
    assert restore_units(units, boolean(start), RUNNING) == plain(old)


@pytest.mark.parametrize('call, match', [
    (lambda: unit_states([{'status': {}}], RUNNING), "unit_states: .* has no key 'item'"),
    (lambda: fetch_entries([{'file': 'f'}], '/m'), "fetch_entries: .* has no key 'name'"),
    (lambda: fetch_entries('not a list', '/m'), 'fetch_entries: '),
    (lambda: fetch_report({'status': 'verified'}), "fetch_report: .* has no key '_gguf_fetch_entry'"),
    (lambda: runtime_units({'units': [{'scope': 'user'}]}), "runtime_units: .* has no key 'name'"),
    (lambda: restore_units([{'unit': 'a'}], True, RUNNING), "restore_units: .* has no key 'scope'"),
    (lambda: plan_fleet_summary(['a'], {}), "plan_fleet_summary: .* has no key 'a'"),
])
def test_a_wrong_shape_is_a_named_filter_error(call, match):
    with pytest.raises(AnsibleFilterError, match=match):
        call()
