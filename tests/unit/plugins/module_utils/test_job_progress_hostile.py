"""job_progress against hostile shapes (issue 33): async_wrapper's real results records with any JSON value at any
position, log lines with hostile text in every number slot, and hostile timing options. Each run ends in the
answer the record or line means, or in a named refusal (ProgressError), within a short deadline: never another
exception, never "finished" for a record that does not say so, never a control character on the terminal.
Also the results file that is no file: a FIFO, a link to /dev/zero, a huge one."""
import json
import math
import os
import re
import time
from unittest import mock

import pytest
from ansible.errors import AnsibleActionFail
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.action import job_progress as action
from ansible_collections.dankfleet.llm.plugins.module_utils.host import job_progress as jp
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

SETTINGS = dict(max_examples=250, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DEADLINE_S = 5.0
CONTROL = re.compile(u'[\x00-\x1f\x7f-\x9f]')

# What ansible-core 2.19's async_wrapper writes: its record while the job runs, then the module's result.
RUNNING = {'started': True, 'finished': False, 'ansible_job_id': 'j866.4242'}
RUNNING_OLD = {'started': 1, 'finished': 0, 'ansible_job_id': 'j866.4242'}
DONE = {'changed': True, 'msg': 'built llama-server b11434', 'invocation': {'module_args': {'action': 'build'}},
        'warnings': []}
TIMED_OUT = {'msg': 'Timeout exceeded', 'failed': True, 'child_pid': 4242}
STATES = [(True, bool), (False, bool), (1, int), (0, int)]


def _clean(value):
    """Whether JSON text of value is a document the reader may take: finite numbers, int64 integers."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, float) and not math.isfinite(v):
            return False
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) > 2 ** 63 - 1:
            return False
    return True


def _state(value):
    return any(value == s and type(value) is t for s, t in STATES)


def _meaning(record):
    """What the record says, by async_status's rule: 'refuse' for a record that says nothing readable."""
    if not isinstance(record, dict):
        return 'refuse'
    if ('started' in record and not _state(record['started'])) or \
            ('finished' in record and not _state(record['finished'])):
        return 'refuse'             # "finished": "no" is no state, with or without started
    if 'started' not in record:
        return True
    return bool(record.get('finished', False))


def _poll(path, **kw):
    started = time.monotonic()
    try:
        out = jp.progress(None, 'build', results_file=str(path), **kw)
        answer = out['finished']
    except jp.ProgressError as exc:
        assert 'results file' in str(exc) and not CONTROL.search(str(exc))
        answer = 'refuse'
    assert time.monotonic() - started < DEADLINE_S
    return answer


@pytest.mark.parametrize('record', [RUNNING, RUNNING_OLD, DONE, TIMED_OUT],
                         ids=['running', 'running-1.x', 'done', 'timed-out'])
def test_the_real_records_read_as_async_status_reads_them(tmp_path, record):
    (tmp_path / 'jid').write_text(json.dumps(record))
    assert _poll(tmp_path / 'jid') is _meaning(record)


@settings(**SETTINGS)
@given(st.sampled_from([RUNNING, RUNNING_OLD, DONE, TIMED_OUT]).flatmap(hostile.hostile_answers))
def test_any_value_anywhere_in_a_results_record(tmp_path, drawn):
    _, record = drawn
    path = tmp_path / 'jid'
    path.write_text(hostile.dumps(record), encoding='utf-8', errors='surrogatepass')
    answer = _poll(path)
    expected = _meaning(record)
    if answer == 'refuse' and expected != 'refuse':
        assert not _clean(record), 'refused a clean record that says %r' % (expected,)
    else:
        assert answer == expected


@pytest.mark.parametrize('finished', ['no', 'false', '0', 0.5, 2, -1, None, [], {}, 'yes'])
def test_finished_that_is_no_state_is_refused_never_finished(tmp_path, finished):
    for record in (dict(RUNNING, finished=finished), {'finished': finished}):
        (tmp_path / 'jid').write_text(json.dumps(record))
        with pytest.raises(jp.ProgressError, match='finished'):
            jp.job_finished(str(tmp_path / 'jid'))


def test_a_results_file_that_is_no_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / 'fifo'
    os.mkfifo(str(fifo))
    zero = tmp_path / 'zero'
    os.symlink('/dev/zero', str(zero))
    huge = tmp_path / 'huge'
    with open(str(huge), 'wb') as handle:
        handle.truncate(jp.RESULTS_MAX_BYTES + 1)       # sparse: no disk spent
    for path, cause in ((fifo, 'FIFO'), (zero, 'character device'), (huge, 'bytes'), (tmp_path, 'directory')):
        started = time.monotonic()
        with pytest.raises(jp.ProgressError, match=cause):
            jp.wait(str(path), 30, sleep=lambda s: pytest.fail('slept on a refused results file'))
        assert time.monotonic() - started < DEADLINE_S


def test_a_log_that_is_no_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / 'fifo.log'
    os.mkfifo(str(fifo))
    zero = tmp_path / 'zero.log'
    os.symlink('/dev/zero', str(zero))
    for path, cause in ((fifo, 'FIFO'), (zero, 'symbolic link'), (tmp_path, 'directory')):
        started = time.monotonic()
        with pytest.raises(jp.ProgressError, match=cause):
            jp.progress(str(path), 'build')
        assert time.monotonic() - started < DEADLINE_S


def test_a_results_file_not_yet_written_is_not_finished(tmp_path):
    assert jp.job_finished(str(tmp_path / 'absent')) is False
    (tmp_path / 'jid').write_bytes(b'\xff\xfe{}')
    with pytest.raises(jp.ProgressError, match='not UTF-8'):
        jp.job_finished(str(tmp_path / 'jid'))


# --- log lines ---------------------------------------------------------------------------------------------------

BUILD = ['$ cmake --build /b -j 2', '[57/120] Building CXX object llama.cpp.o']
DIGITS = re.compile(r'[0-9]{1,20}\Z')
DECIMAL = re.compile(r'(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\Z')


def _digits(text):
    return int(text) if DIGITS.match(text) else None


@settings(**SETTINGS)
@given(st.sampled_from(['done', 'total', 'make']), hostile.hostile_text())
def test_hostile_text_in_a_build_line_is_read_by_its_grammar_or_skipped(slot, text):
    line = {'done': '[%s/120] x.o', 'total': '[57/%s] x.o', 'make': '[%s%%] x.o'}[slot] % text
    out = jp.build_progress(BUILD + [line])
    number = _digits(text.lstrip(' ') if slot == 'make' else text)
    if slot == 'done' and number is not None and number <= 120:
        assert (out['done'], out['total']) == (number, 120)
    elif slot == 'total' and number is not None and 57 <= number <= 2 ** 63 - 1:
        assert (out['done'], out['total']) == (57, number)
    elif slot == 'make' and number is not None and number <= 100:
        assert (out['done'], out['percent']) == (None, float(number))
    else:       # no progress line: the one before it counts
        assert (out['done'], out['total'], out['percent']) == (57, 120, 47.5)


FETCH = ('2026-12-04T10:00:00Z m.gguf start http://m/m.gguf -> /m/m.gguf (1000 bytes, sha256 x)',
         '2026-12-04T10:00:01Z m.gguf progress 400/1000 bytes (40.0%) 1.00 KiB/s eta 1s')
FETCH_SLOTS = {'done': '%s/1000 bytes (50.0%%) 2.00 KiB/s eta 2s', 'total': '500/%s bytes (50.0%%) 2.00 KiB/s eta 2s',
               'pct': '500/1000 bytes (%s%%) 2.00 KiB/s eta 2s', 'rate': '500/1000 bytes (50.0%%) %s KiB/s eta 2s',
               'eta': '500/1000 bytes (50.0%%) 2.00 KiB/s eta %ss'}
GOOD = {'done': 500, 'total': 1000, 'percent': 50.0, 'rate': '2.00 KiB/s', 'eta_s': 2}
EARLIER = {'done': 400, 'total': 1000, 'percent': 40.0, 'rate': '1.00 KiB/s', 'eta_s': 1}


def _fetch_expected(slot, text):
    number = _digits(text)
    decimal = DECIMAL.match(text) and len(text) <= 64 and float(text)
    if slot == 'done' and number is not None and number <= 1000:
        return dict(GOOD, done=number)
    if slot == 'total' and number is not None and 500 <= number <= 2 ** 63 - 1:
        return dict(GOOD, total=number)
    if slot == 'pct' and decimal is not False and decimal is not None and 0 <= decimal <= 100:
        return dict(GOOD, percent=decimal)
    if slot == 'rate' and decimal is not False and decimal is not None and decimal <= 2 ** 63 - 1:
        return dict(GOOD, rate='%s KiB/s' % text)
    if slot == 'eta' and number is not None and number <= 2 ** 63 - 1:
        return dict(GOOD, eta_s=number)
    return EARLIER


@settings(**SETTINGS)
@given(st.sampled_from(sorted(FETCH_SLOTS)), hostile.hostile_text())
def test_hostile_text_in_a_fetch_line_is_read_by_its_grammar_or_skipped(slot, text):
    line = '2026-12-04T10:00:02Z m.gguf progress ' + FETCH_SLOTS[slot] % text
    out = jp.fetch_progress(list(FETCH) + [line], 'm.gguf')
    assert dict((k, out[k]) for k in GOOD) == _fetch_expected(slot, text)


@settings(**SETTINGS)
@given(st.lists(hostile.hostile_text(), max_size=6), st.sampled_from(['build', 'fetch']))
def test_any_log_text_ends_in_a_printable_answer(tmp_path, texts, fmt):
    log = tmp_path / 'job.log'
    head = BUILD if fmt == 'build' else list(FETCH)
    lines = head + ['2026-12-04T10:00:03Z m.gguf ' + t if fmt == 'fetch' else t for t in texts]
    log.write_bytes('\n'.join(lines).encode('utf-8', 'surrogatepass'))
    started = time.monotonic()
    out = jp.progress(str(log), fmt, label='m.gguf')
    assert time.monotonic() - started < DEADLINE_S
    assert not CONTROL.search(out['msg']) and len(out['msg']) <= jp.MSG_MAX
    if out['done'] is not None:
        assert 0 <= out['done'] <= out['total'] <= 2 ** 63 - 1
    if out['percent'] is not None:
        assert 0.0 <= out['percent'] <= 100.0


def test_the_issue_s_log_lines_are_skipped_not_raised_on():
    assert jp.build_progress(BUILD + ['[%s/%s] x' % ('9' * 5000, '9' * 5000)])['done'] == 57
    out = jp.fetch_progress(list(FETCH) + ['t m.gguf progress 5/10 bytes (1.2.3%) 1 B/s eta 1s'], 'm.gguf')
    assert out['done'] == 400


def test_escape_sequences_of_the_log_never_reach_the_terminal(tmp_path):
    log = tmp_path / 'f.log'
    log.write_text('t m.gguf start x\nt m.gguf FAILED \x1b[2J\x1b]0;owned\x07 \x9b31m\n')
    out = jp.progress(str(log), 'fetch', label='m.gguf')
    assert out['msg'] == 'm.gguf: FAILED \\x1b[2J\\x1b]0;owned\\x07 \\x9b31m'


# --- timing options ----------------------------------------------------------------------------------------------

def _timing_ok(name, value):
    if value is None:
        return name == 'delay'      # no delay: one read
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    hi = jp.TIMEOUT_MAX if name == 'timeout' else jp.WAIT_MAX
    return (0 < value if name == 'delay' else 0 <= value) and value <= hi


def _action_run(args, answers):
    task = mock.MagicMock()
    task.args = args
    task.async_val = 0
    task.check_mode = False
    plugin = action.ActionModule(task, mock.MagicMock(), mock.MagicMock(), loader=None, templar=None,
                                 shared_loader_obj=None)
    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append(module_args)
        return dict(answers[min(len(calls), len(answers)) - 1])
    plugin._execute_module = execute
    with mock.patch.object(action.display, 'display'):
        return plugin.run(task_vars={}), calls


@settings(**SETTINGS)
@given(st.sampled_from(['timeout', 'wait', 'delay']),
       st.one_of(hostile.json_values(max_leaves=2), st.floats(), st.sampled_from(['nan', '.nan', 'inf', '-1', '1e400'])))
def test_hostile_timing_options_are_refused_by_name_before_any_poll(name, value):
    assert _timing_ok(name, 30) and _timing_ok(name, 1.5)
    args = {'log': '/b.log', 'format': 'build', 'results_file': '/r/j', 'delay': 5, name: value}
    try:
        result, calls = _action_run(args, [{'msg': 'built 1 of 2 objects (50%)', 'finished': True}])
    except AnsibleActionFail as exc:        # not a number at all: the argument spec names the option
        assert name in str(exc)
        return
    # what the argument spec makes of it (type float: "nan" and true are floats by then), then the bounds
    checked = float(value) if isinstance(value, (str, int)) else value
    if _timing_ok(name, checked):
        assert not result.get('failed') and len(calls) == 1
    else:
        assert result['failed'] and name in result['msg'] and calls == []


@pytest.mark.parametrize('name, value', [('timeout', float('nan')), ('timeout', float('inf')), ('delay', float('nan')),
                                         ('wait', -1.0), ('timeout', -5.0), ('delay', 0.0), ('wait', 1e9)])
def test_the_issue_s_timing_values_are_named(name, value):
    with pytest.raises(jp.ProgressError, match='^%s is ' % name):
        jp.check_timing({name: value})
    with pytest.raises(jp.ProgressError, match=name):
        jp.progress(None, 'build', wait_s=value) if name == 'wait' else jp.check_timing({name: value})
