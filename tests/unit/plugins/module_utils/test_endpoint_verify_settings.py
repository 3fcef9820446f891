# -*- coding: utf-8 -*-
"""endpoint_verify's ``settings`` check (issue 35 item 6): flash-attn, the K/V cache types, ngram-mod's window
from this start's journal and the reasoning budget from llama-server's argv, against the env file.

The journal fixtures are b11434's own lines: the llama_context / llama_kv_cache lines recorded from a real
b11434 start (tests/fixtures/llamacpp/b11434-cuda-h200-27b), the draft-load and ngram-mod lines in the format
the source prints them (common/speculative.cpp: LOG_INF "%s: loading draft model '%s'", SPC_TRC "- n_match=%d,
n_max=%d, n_min=%d", with common_log's "M.SS.mmm.uuu I " prefix)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import endpoint_verify as ev
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

HERE = os.path.dirname(os.path.abspath(__file__))
RECORDED = os.path.join(HERE, '..', '..', '..', 'fixtures', 'llamacpp', 'b11434-cuda-h200-27b',
                        'qwen35_27b-c65536-np2-ub512-f16-mtp3-cuda.json')
CONTROL = re.compile(u'[\x00-\x08\x0b-\x1f\x7f-\x9f]')
INVOCATION = '7f3c2a9e5b1d4c8fa0e6b2d9c4f1a8e3'
SERVICE = 'frank-medium.service'

ENV = {'ALIAS': 'frank-medium', 'MODEL_PATH': '/m.gguf', 'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': '7770',
       'PARALLEL': '2', 'CTX_SIZE': '8192', 'SPEC_TYPE': 'draft-dflash,ngram-mod', 'VISION': 'off',
       'LOG_VERBOSITY': '4', 'FLASH_ATTN': 'on', 'CACHE_TYPE_K': 'f16', 'CACHE_TYPE_V': 'f16',
       'SPEC_DRAFT_TYPE_K': 'q8_0', 'SPEC_DRAFT_TYPE_V': 'q8_0', 'SPEC_NGRAM_MOD_N_MATCH': '24',
       'SPEC_NGRAM_MOD_N_MIN': '48', 'SPEC_NGRAM_MOD_N_MAX': '64', 'REASONING_BUDGET': '-1'}

# this start at -lv 4: the target's context and KV cache, the drafter's load line, its context and KV cache, then
# the speculative implementations (the first two context lines are recorded b11434 lines, verbatim)
TARGET = ("0.04.062.862 I llama_context: constructing llama_context\n"
          "0.04.062.876 I llama_context: flash_attn            = enabled\n"
          "0.04.062.876 I llama_context: kv_unified            = false\n"
          "0.04.065.192 I llama_kv_cache:      CUDA0 KV buffer size =  4096.00 MiB\n"
          "0.04.066.193 I llama_kv_cache: size = 4096.00 MiB ( 32768 cells,  16 layers,  2/2 seqs), "
          "K (f16): 2048.00 MiB, V (f16): 2048.00 MiB\n"
          "0.04.066.712 I llama_memory_recurrent: size = 1197.00 MiB (     2 cells,  64 layers,  2 seqs  3 rs_seq), "
          "R (f32):   45.00 MiB, S (f32): 1152.00 MiB, P (f32):    0.00 MiB\n")
DRAFT = ("0.04.100.118 I common_speculative_init_result: loading draft model '/srv/models/qwen35-dflash.gguf'\n"
         "0.04.111.341 I llama_context: flash_attn            = enabled\n"
         "0.03.835.447 I llama_kv_cache: size =   68.00 MiB ( 32768 cells,   2 layers,  1/1 seqs), "
         "K (q8_0):   34.00 MiB, V (q8_0):   34.00 MiB\n")
SPEC = ("0.04.200.001 I spec common_specu: adding speculative implementation 'draft-dflash'\n"
        "0.04.200.002 I spec common_specu: adding speculative implementation 'ngram-mod'\n"
        "0.04.200.002 I spec common_specu: - n_match=24, n_max=64, n_min=48\n"
        "0.04.200.003 I spec common_specu: - mod size=4194304 (16.000 MB)\n")
JOURNAL = TARGET + DRAFT + SPEC
ARGV = ['/opt/llama/b11434/llama-server', '--model', '/m.gguf', '--flash-attn', 'on', '--reasoning-budget', '-1',
        '--spec-type', 'draft-dflash,ngram-mod']


def host(journal=JOURNAL, argv=None, pid='4242\n', calls=None):
    """systemctl show InvocationID / MainPID, journalctl of that invocation, cat /proc/<pid>/cmdline."""
    args = ARGV if argv is None else argv

    def run(argv_):
        if calls is not None:
            calls.append(argv_)
        if argv_[0] == 'systemctl' and argv_[2] == '--property=InvocationID':
            return 0, INVOCATION + '\n', ''
        if argv_[0] == 'systemctl' and argv_[2] == '--property=MainPID':
            return 0, pid, ''
        if argv_[0] == 'journalctl':
            assert argv_[-1] == '_SYSTEMD_INVOCATION_ID=' + INVOCATION, argv_
            return 0, journal, ''
        assert argv_ == ['cat', '/proc/4242/cmdline'], argv_
        return 0, args if isinstance(args, str) else '\x00'.join(args) + '\x00', ''
    return run


def run_settings(env=None, **kw):
    res = ev.run_verify(ev.features(dict(ENV, **(env or {}))), '', {'checks': ['settings'], 'request_timeout': 5},
                        run_command=host(**kw), service=SERVICE)
    return res, next(c for c in res['checks'] if c['name'] == 'settings')


def test_the_recorded_b11434_lines_are_read():
    with open(RECORDED) as f:
        lines = json.load(f)['measured']['raw_lines']
    served = ev.served_settings('\n'.join(lines))
    # target and MTP context both logged flash_attn; no draft-load line among the recorded ones
    assert served['flash_attn'] == ['enabled', 'enabled'] and served['target_flash_attn'] == 2
    assert served['target_kv'] == [('f16', 'f16'), ('f16', 'f16')] and served['draft_kv'] == []
    assert served['ngram'] == [] and served['draft_loaded'] is False


def test_the_target_and_the_drafter_are_told_apart_by_the_load_line():
    served = ev.served_settings(JOURNAL)
    assert served == {'flash_attn': ['enabled', 'enabled'], 'target_flash_attn': 1, 'target_kv': [('f16', 'f16')],
                      'draft_kv': [('q8_0', 'q8_0')], 'ngram': [(24, 64, 48)], 'draft_loaded': True}
    mtp = JOURNAL.replace("loading draft model '/srv/models/qwen35-dflash.gguf'",
                          "creating MTP draft context against the target model '/m.gguf'")
    assert ev.served_settings(mtp)['draft_kv'] == [('q8_0', 'q8_0')]


def test_settings_as_the_env_file_sets_them_pass_with_each_figure():
    res, c = run_settings()
    assert res['passed'] and c['status'] == 'pass', c
    rows = c['figures']['settings']
    assert rows['FLASH_ATTN'] == {'configured': 'enabled', 'served': ['enabled', 'enabled'], 'status': 'pass', 'why': ''}
    assert rows['SPEC_DRAFT_TYPE_V']['served'] == ['q8_0'] and rows['CACHE_TYPE_K']['served'] == ['f16']
    assert (rows['SPEC_NGRAM_MOD_N_MATCH']['served'], rows['SPEC_NGRAM_MOD_N_MAX']['served'],
            rows['SPEC_NGRAM_MOD_N_MIN']['served']) == ([24], [64], [48])
    assert rows['REASONING_BUDGET'] == {'configured': -1, 'served': [-1], 'status': 'pass', 'why': ''}
    assert c['figures']['journal'] == '%d line(s)' % len(JOURNAL.splitlines())


@pytest.mark.parametrize('env, var, served', [
    ({'FLASH_ATTN': 'off'}, 'llama_server_flash_attn', 'enabled, enabled'),
    ({'CACHE_TYPE_K': 'q8_0'}, 'llama_server_cache_type_k', 'f16'),
    ({'CACHE_TYPE_V': 'q4_0'}, 'llama_server_cache_type_v', 'f16'),
    ({'SPEC_DRAFT_TYPE_K': 'f16'}, 'llama_server_spec_draft_cache_type_k', 'q8_0'),
    ({'SPEC_DRAFT_TYPE_V': 'f16'}, 'llama_server_spec_draft_cache_type_v', 'q8_0'),
    ({'SPEC_NGRAM_MOD_N_MATCH': '32'}, 'llama_server_spec_ngram_mod_n_match', '24'),
    ({'SPEC_NGRAM_MOD_N_MIN': '16'}, 'llama_server_spec_ngram_mod_n_min', '48'),
    ({'SPEC_NGRAM_MOD_N_MAX': '96'}, 'llama_server_spec_ngram_mod_n_max', '64'),
    ({'REASONING_BUDGET': '0'}, 'llama_server_reasoning_budget', '-1'),
])
def test_a_setting_other_than_the_env_file_fails_naming_its_variable(env, var, served):
    res, c = run_settings(env)
    (name, value), = env.items()
    assert not res['passed'] and c['status'] == 'fail' and c['fatal'], c
    assert res['findings'][0].startswith('verify settings: ')
    assert '%s: served %s, the env file sets %s=' % (name, served, name) in c['reason'] and var in c['reason'], c['reason']
    assert c['figures']['settings'][name]['status'] == 'fail'
    assert [n for n, r in c['figures']['settings'].items() if r['status'] == 'fail'] == [name]


def test_flash_attn_auto_accepts_what_llama_cpp_resolved():
    res, c = run_settings({'FLASH_ATTN': 'auto'})
    assert c['status'] == 'pass' and c['figures']['settings']['FLASH_ATTN']['served'] == ['enabled', 'enabled'], c


def test_the_last_reasoning_budget_on_the_argv_is_the_one_served():
    # EXTRA_ARGS comes after the launcher's own flags: llama-server takes the last
    res, c = run_settings(argv=ARGV + ['--reasoning-budget=4096'])
    assert c['status'] == 'fail' and 'REASONING_BUDGET: served 4096' in c['reason'], c
    res, c = run_settings(argv=[a for a in ARGV if a not in ('--reasoning-budget', '-1')])
    assert c['status'] == 'fail' and "llama-server's argv has no --reasoning-budget" in c['reason'], c
    assert 'llama_server_reasoning_budget' in c['reason']


def test_below_trace_verbosity_the_journal_values_are_not_logged_not_passed():
    calls = []
    res = ev.run_verify(ev.features(dict(ENV, LOG_VERBOSITY='')), '', {'checks': ['settings']},
                        run_command=host(journal='', calls=calls), service=SERVICE)
    c = next(c for c in res['checks'] if c['name'] == 'settings')
    assert res['passed'] and c['status'] == 'pass', c
    rows = c['figures']['settings']
    assert rows['FLASH_ATTN'] == {'configured': 'enabled', 'served': None, 'status': 'skip',
                                  'why': 'not logged at verbosity 3'}
    assert [n for n, r in rows.items() if r['status'] == 'pass'] == ['REASONING_BUDGET']
    assert 'not logged at verbosity 3' in c['reason'] and 'REASONING_BUDGET=-1 as served' in c['reason']
    assert not any(a[0] == 'journalctl' for a in calls)          # nothing to read there at -lv 3
    # with only journal values configured the check is skipped with that reason, nothing read
    f = ev.features(dict(ENV, LOG_VERBOSITY='3', REASONING_BUDGET=''))
    assert 'not logged at verbosity 3' in ev.skip_reason('settings', f, dict(ev.DEFAULTS))
    unset = dict((n, '') for n, _, _ in ev.SETTINGS)
    assert 'sets none of FLASH_ATTN' in ev.skip_reason('settings', ev.features(dict(ENV, **unset)), dict(ev.DEFAULTS))


@pytest.mark.parametrize('journal, needle', [
    (TARGET + DRAFT, "no ngram-mod '- n_match=N, n_max=N, n_min=N' line"),
    (TARGET.replace('flash_attn', 'flash-attn') + DRAFT + SPEC, "no 'llama_context: flash_attn' line"),
    (TARGET + SPEC, 'no drafter load line'),
    (DRAFT + SPEC, "no 'llama_kv_cache: size' line of the target"),
])
def test_a_line_missing_from_this_starts_journal_fails_naming_it(journal, needle):
    res, c = run_settings(journal=journal)
    assert c['status'] == 'fail' and needle in c['reason'], c['reason']


def test_only_what_the_launcher_passes_is_compared():
    f = ev.features(dict(ENV, SPEC_TYPE='ngram-simple'))
    assert not any(n.startswith(('SPEC_DRAFT_', 'SPEC_NGRAM_MOD_')) for n in f['settings'])
    assert ev.features(dict(ENV, FLASH_ATTN='Enabled'))['settings']['FLASH_ATTN'] == 'enabled'
    with pytest.raises(ev.VerifyError, match="FLASH_ATTN='maybe'.*llama_server_flash_attn"):
        ev.features(dict(ENV, FLASH_ATTN='maybe'))
    with pytest.raises(ev.VerifyError, match="REASONING_BUDGET='lots'"):
        ev.features(dict(ENV, REASONING_BUDGET='lots'))


def test_would_send_names_the_journal_and_the_argv():
    text = [line for line in ev.would_send(ev.features(ENV), {}) if line.startswith('settings: ')][0]
    assert 'journalctl _SYSTEMD_INVOCATION_ID' in text and 'FLASH_ATTN=enabled' in text
    assert '/proc/<MainPID>/cmdline: --reasoning-budget -1' in text


@pytest.mark.parametrize('pid, needle', [
    ('0\n', 'MainPID 0'), ('42x\n', 'systemctl show --property=MainPID'), ('9' * 30 + '\n', 'MainPID'),
])
def test_a_main_pid_that_is_no_process_is_named(pid, needle):
    res, c = run_settings(pid=pid)
    assert c['status'] == 'fail' and "argv cannot be read" in c['reason'] and needle in c['reason'], c['reason']
    assert c['figures']['settings']['REASONING_BUDGET']['why'] == 'the argv was not read'


QUIET = [HealthCheck.too_slow]


@settings(max_examples=150, deadline=None, suppress_health_check=QUIET)
@given(st.lists(hostile.hostile_text(), max_size=6), st.integers(0, 14))
def test_hostile_journal_lines_never_break_the_check(lines, at):
    """Any lines among this start's (a terminal escape, a NUL, 5000 digits, a bracket bomb): the reader never
    raises, every reason is printable, and b11434's own lines still decide - unless a hostile line is itself one
    of them (then its value is compared like any other)."""
    real = JOURNAL.splitlines()
    journal = '\n'.join(real[:at] + lines + real[at:]) + '\n'
    served = ev.served_settings(journal)
    assert set(served) == {'flash_attn', 'target_flash_attn', 'target_kv', 'draft_kv', 'ngram', 'draft_loaded'}
    res, c = run_settings(journal=journal)
    assert c['status'] in ('pass', 'fail') and not CONTROL.search(c['reason']), c['reason']
    if not any(re.search(r'flash_attn|llama_kv_cache|n_match|draft model|MTP draft', line) for line in lines):
        assert c['status'] == 'pass', c['reason']


@settings(max_examples=100, deadline=None, suppress_health_check=QUIET)
@given(hostile.hostile_text(), hostile.hostile_text())
def test_a_hostile_argv_or_main_pid_never_breaks_the_check(argv, pid):
    res, c = run_settings(argv=argv, pid=pid)
    assert c['status'] in ('pass', 'fail') and not CONTROL.search(c['reason']), c['reason']
    served = c['figures']['settings']['REASONING_BUDGET']['served']
    assert served is None or all(not isinstance(v, str) or not CONTROL.search(v) for v in served)
