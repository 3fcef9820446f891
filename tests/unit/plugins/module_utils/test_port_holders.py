# -*- coding: utf-8 -*-
"""Who holds the serve port (issue 32): the host names each holder's units from /proc/<pid>/cgroup
(host_state.cgroup_units / holder_units, run on the host), the controller judges them once (serve/port_holders.judge,
the filter dankfleet.llm.port_holders). Hostile cgroup files are an unknown unit, a hostile answer a named refusal."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible.errors import AnsibleFilterError

from ansible_collections.dankfleet.llm.plugins.filter.port_holders import port_holders
from ansible_collections.dankfleet.llm.plugins.module_utils.host import host_state as hs
from ansible_collections.dankfleet.llm.plugins.module_utils.serve.port_holders import PortHoldersError, judge
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile
from ansible_collections.dankfleet.llm.tests.unit.http_testlib import listening_ss

# Recorded /proc/<pid>/cgroup texts: cgroup v2 (a system service, a quadlet's container under its service, a user's
# session), and a v1/hybrid host whose systemd line is one of many.
V2_SERVICE = '0::/system.slice/ollama.service\n'
V2_QUADLET = '0::/system.slice/vllm.service/libpod-payload-3f2a9c/init.scope\n'
V2_USER = '0::/user.slice/user-1000.slice/user@1000.service/app.slice/app-gnome-x\\x2dterm-1234.scope\n'
V1_HYBRID = ('12:pids:/system.slice/ollama.service\n11:memory:/system.slice/ollama.service\n'
             '1:name=systemd:/system.slice/ollama.service\n0::/system.slice/ollama.service\n')
SS = 'LISTEN 0 4096 *:8080 *:* users:(("ollama",pid=4242,fd=3))'


def entry(*holders, **kw):
    return {'listening': bool(holders) or kw.get('lines') is not None, 'holders': list(holders),
            'lines': kw.get('lines', [SS] if holders else [])}


def ollama(units=('system.slice', 'ollama.service'), pid=4242):
    return {'pid': pid, 'name': 'ollama', 'units': list(units) if units is not None else None}


# --- on the host: the units of a holder --------------------------------------------------------------------------
@pytest.mark.parametrize('text, units', [
    (V2_SERVICE, ['system.slice', 'ollama.service']),
    (V2_QUADLET, ['system.slice', 'vllm.service', 'init.scope']),
    (V2_USER, ['user.slice', 'user-1000.slice', 'user@1000.service', 'app.slice', 'app-gnome-x\\x2dterm-1234.scope']),
    (V1_HYBRID, ['system.slice', 'ollama.service']),
    ('0::/\n', []),                           # the root cgroup: known, in no unit
    ('', None), ('garbage\n', None), ('0::relative/x.service\n', None), ('x::/a.service\n', None),
    ('0::/a.service\x1b[2J\n', None),        # a control character: not a kernel line
])
def test_cgroup_units_from_recorded_texts(text, units):
    assert hs.cgroup_units(text) == units


def test_holder_units_reads_this_process_and_refuses_what_is_not_there(tmp_path):
    mine = hs.holder_units(os.getpid())
    if os.path.exists('/proc/self/cgroup'):
        assert isinstance(mine, list)
    assert hs.holder_units(2 ** 22 + 7) is None               # no such process: unknown, not an exception
    (tmp_path / '5').mkdir()
    (tmp_path / '5' / 'cgroup').write_bytes(b'\xff\xfe not utf-8')
    (tmp_path / '6').mkdir()
    (tmp_path / '6' / 'cgroup').write_text('0::/system.slice/x.service\n' * 10000)  # more than 64 KiB
    (tmp_path / '7').mkdir()
    (tmp_path / '7' / 'cgroup').mkdir()                       # not a regular file
    (tmp_path / '8').mkdir()
    (tmp_path / '8' / 'cgroup').write_text(V2_SERVICE)
    assert [hs.holder_units(pid, proc=str(tmp_path)) for pid in (5, 6, 7, 8)] == [
        None, None, None, ['system.slice', 'ollama.service']]


def test_add_holder_units_adds_only_units():
    ports = hs.parse_ports(SS + '\n', [8080, 9])
    hs.add_holder_units(ports, reader=lambda pid: ['system.slice', 'ollama.service'] if pid == 4242 else None)
    assert ports == {'8080': {'listening': True, 'lines': [SS], 'holders': [
        {'pid': 4242, 'name': 'ollama', 'units': ['system.slice', 'ollama.service']}]},
        '9': {'listening': False, 'holders': [], 'lines': []}}


@pytest.mark.skipif(not shutil.which('ss'), reason='iproute2 ss is not installed')
def test_a_real_listener_is_named_with_its_units():
    with listening_ss() as (port, out):
        ports = hs.add_holder_units(hs.parse_ports(out, [port]))
    holders = ports[str(port)]['holders']
    mine = [h for h in holders if h['pid'] == os.getpid()]
    if not mine:
        pytest.skip('ss names no process here (not the socket owner, or no CAP_SYS_PTRACE)')
    assert mine[0]['units'] == hs.holder_units(os.getpid())
    verdict = judge(ports[str(port)], 0, [], port, 'llm')
    assert [h['pid'] for h in verdict['kept']] == [os.getpid()] and verdict['refusal'].startswith('port %d is held by' % port)


# --- on the controller: the judgement ----------------------------------------------------------------------------
def test_a_free_port_and_one_held_by_this_service():
    assert judge(entry(), 0, [], 8080, 'llm') == {
        'kept': [], 'handed': [], 'free': True, 'unnamed': False, 'lines': '', 'refusal': '',
        'note': "port 8080 is free or this service's"}
    mine = judge(entry({'pid': 77, 'name': 'llama-server', 'units': ['system.slice', 'llm.service']}), '77', [], 8080, 'llm')
    assert mine['free'] and not mine['kept'] and not mine['handed']


def test_a_handed_over_holder_is_named_and_passes():
    verdict = judge(entry(ollama(), ollama(pid=17)), 0, ['ollama.service'], 8080, 'llm')
    assert [h['pid'] for h in verdict['handed']] == [4242, 17] and verdict['kept'] == [] and not verdict['free']
    assert verdict['note'] == ('port 8080 is held by pid(s) 17, 4242 of ollama.service, which the retire stage stops '
                               'before the restart')
    assert verdict['refusal'] == ''


def test_a_quadlet_container_is_handed_over_by_its_service():
    verdict = judge(entry(ollama(['system.slice', 'vllm.service', 'init.scope'])), 0, ['vllm.service'], 8080, 'llm')
    assert [h['pid'] for h in verdict['handed']] == [4242]


@pytest.mark.parametrize('units', [['system.slice', 'other.service'], None, []])
def test_anything_else_is_kept_with_the_cause_and_the_fix(units):
    verdict = judge(entry(ollama(units)), 0, ['ollama.service'], 8080, 'llm')
    assert verdict['kept'] == [{'pid': 4242, 'name': 'ollama', 'units': units}]
    assert verdict['refusal'] == (
        'port 8080 is held by %s, not by llm.service (MainPID 0) nor by a unit the retire stage stops (ollama.service). '
        'Declare that runtime in runtime_retire_runtimes (its units or quadlets, with the port) or choose another '
        'llama_server_port. Nothing was changed.' % SS)
    assert verdict['note'] == (
        'port 8080 is held now by %s, which no unit the retire stage stops explains: a deploy (not --check) refuses '
        'here. Declare that runtime in runtime_retire_runtimes or choose another llama_server_port.' % SS)


def test_a_unit_named_like_a_handover_unit_only_in_part_is_kept():
    verdict = judge(entry(ollama(['system.slice', 'ollama.service-old.scope'])), 0, ['ollama.service'], 8080, 'llm')
    assert len(verdict['kept']) == 1
    assert 'none declared' in judge(entry(ollama()), 0, [], 8080, 'llm')['refusal']


def test_a_listener_without_a_process_is_unnamed_not_refused():
    verdict = judge(entry(lines=[SS]), 0, [], 8080, 'llm')
    assert verdict['unnamed'] and verdict['free'] and verdict['refusal'] == ''


def test_control_characters_from_the_host_are_escaped():
    verdict = judge({'listening': True, 'holders': [{'pid': 5, 'name': 'x\x1b[2J'}],
                     'lines': ['LISTEN users:(("x\x1b[2J",pid=5))']}, 0, [], 8080, 'llm')
    assert '\x1b' not in verdict['refusal'] and '\\x1b[2J' in verdict['refusal']
    assert verdict['kept'][0]['name'] == 'x\\x1b[2J' and verdict['kept'][0]['units'] is None


@pytest.mark.parametrize('args, where', [
    (({'holders': [{'pid': 'x'}], 'lines': []}, 0, []), "ports entry holders[0].pid"),
    (({'holders': [], 'lines': []}, -1, []), 'MainPID'),
    (({'holders': [], 'lines': []}, 0, ['a.service\n']), 'llama_server_port_handover_units'),
    (({'holders': [{'pid': 4, 'units': 'system.slice'}], 'lines': []}, 0, []), 'units'),
    (({'lines': []}, 0, []), 'no holders'),
])
def test_a_wrong_shape_is_a_named_refusal(args, where):
    with pytest.raises(PortHoldersError, match=r'.*%s' % where.replace('[', r'\[').replace(']', r'\]')):
        judge(*(args + (8080, 'llm')))
    with pytest.raises(AnsibleFilterError, match='dankfleet.llm.port_holders: .* nothing was changed'):
        port_holders(*(args + (8080, 'llm')))


# --- hostile shapes ------------------------------------------------------------------------------------------------
RECORDED = {'listening': True, 'lines': [SS],
            'holders': [ollama(), {'pid': 77, 'name': 'llama-server', 'units': ['system.slice', 'llm.service']}]}


def test_the_recorded_answer_judges_as_it_should():
    verdict = judge(RECORDED, 77, ['ollama.service'], 8080, 'llm')
    assert [h['pid'] for h in verdict['handed']] == [4242] and verdict['kept'] == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=hostile.hostile_answers(RECORDED), main_pid=hostile.json_values(), handover=st.one_of(
    st.just(['ollama.service']), hostile.json_values()))
def test_any_answer_is_a_judgement_or_a_named_refusal(case, main_pid, handover):
    _, answer = case
    try:
        verdict = judge(answer, main_pid, handover, 8080, 'llm')
    except PortHoldersError as exc:
        assert str(exc)
        return
    assert set(verdict) == {'kept', 'handed', 'free', 'unnamed', 'lines', 'refusal', 'note'}
    assert bool(verdict['refusal']) == bool(verdict['kept'])
    assert all(isinstance(h['pid'], int) for h in verdict['kept'] + verdict['handed'])


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(hostile.hostile_text(400), st.lists(hostile.hostile_text(60), max_size=8).map('\n'.join),
                      st.builds(lambda a, b: '0::/' + a + '/' + b, hostile.hostile_text(40), hostile.hostile_text(40))))
def test_any_cgroup_text_is_units_or_unknown(text):
    units = hs.cgroup_units(text)
    assert units is None or all(hs.CGROUP_UNIT.match(u) and '/' not in u for u in units)
    if units is not None:  # what the host names, the controller's shape reads
        judge({'holders': [{'pid': 3, 'units': units}], 'lines': []}, 0, [], 8080, 'llm')


def test_the_host_names_no_more_units_than_the_controller_reads():
    units = hs.cgroup_units('0::/' + '/'.join('u%d.slice' % i for i in range(200)) + '\n')
    assert len(units) == hs.CGROUP_MAX_UNITS
    judge({'holders': [{'pid': 3, 'units': units}], 'lines': []}, 0, [], 8080, 'llm')
