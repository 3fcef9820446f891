# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How far a long async job has got, read from its log on the host, for a progress line on the controller.

Plain Python (stdlib only); plugins/modules/job_progress.py is the thin module. Two log formats:

* ``build``: the llama.cpp build log (llama_cpp_release.run_logged: a ``$ argv`` line before each
  command, then its output). Only the lines after the last ``$`` line count (the log is appended to
  across attempts); ninja prints ``[N/M]`` per finished edge, make ``[ P%]``.
* ``fetch``: gguf_fetch's progress log (``<UTC time> <file> progress D/T bytes (P%) R/s eta Ns``), one
  file's lines after its last ``start``/``resume`` line (the log holds every earlier download too).

wait() sleeps until the async job's results file says it finished, or the poll delay passes: a job
that ends between polls is collected at once, never a whole delay later.

Everything here comes from the host and is read as hostile: the results file through the file layer (a regular
file of bounded size; a FIFO, a device or a link to one is refused by kind) and a shape (``finished`` is
async_wrapper's boolean or 0/1, nothing else); each number of a log line by typed_reader's bounded grammar (a
malformed progress line is skipped, never raised on); the message through typed_reader.printable, so no escape
sequence from the host's log reaches the controller's terminal.
"""
import errno
import math
import os
import re
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import FileRefused, open_regular, read_bytes

# The options of dankfleet.llm.job_progress, one copy for the action (which polls with delay and timeout) and
# the module (one read; a direct module run ignores delay and timeout).
ARGUMENT_SPEC = dict(
    log=dict(type='path'),
    format=dict(type='str', required=True, choices=['build', 'fetch']),
    label=dict(type='str'),
    results_file=dict(type='path'),
    wait=dict(type='float', default=0.0),
    delay=dict(type='float'),
    timeout=dict(type='float', default=86400.0),
)
TAIL_BYTES = 256 * 1024
# async_wrapper's record is a few dozen bytes, the module's result it is replaced with rarely more than a few KiB;
# anything past the typed reader's JSON cap is not a results file.
RESULTS_MAX_BYTES = tr.JSON_BYTES
MSG_MAX = 1000              # characters of the progress line: one terminal line, not a log
# The timing options: finite, not negative, and no longer than a real job (a build is hours, not weeks).
WAIT_MAX = 3600.0           # one poll's wait on the host (wait, delay)
TIMEOUT_MAX = 7 * 86400.0
# ASCII digits only (\d would take any script's digits); each number is read by typed_reader's bounded grammar.
NINJA = re.compile(r'\[([0-9]+)/([0-9]+)\]', re.ASCII)
MAKE = re.compile(r'\[ *([0-9]+)%\]', re.ASCII)
FETCH = re.compile(r'(?P<stamp>\S+) (?P<label>\S+) (?P<what>.*)\Z', re.ASCII)
FETCH_PROGRESS = re.compile(r'progress (?P<done>[0-9]+)/(?P<total>[0-9]+) bytes \((?P<pct>[0-9.]+)%\) '
                            r'(?P<rate>(?P<rate_n>[0-9.]+) ?[KMGT]?i?B)/s eta (?:(?P<eta>[0-9]+)s|\?)\Z', re.ASCII)
COUNT_MAX = tr.INT_LIMIT    # objects or bytes


class ProgressError(Exception):
    """A refusal: the message names the file or option and the cause, already printable."""

    def __init__(self, msg):
        Exception.__init__(self, tr.printable(msg, limit=MSG_MAX))


def check_timing(options):
    """Refuse wait, delay or timeout that is not a finite number in its range, naming the option (NaN would poll
    forever: every comparison with it is false). Only delay may be null (one read); a null wait or timeout given
    explicitly is refused, not read as its default."""
    bounds = (('wait', 0.0, WAIT_MAX, False), ('delay', 0.0, WAIT_MAX, True), ('timeout', 0.0, TIMEOUT_MAX, False))
    for name, lo, hi, positive in bounds:
        if name not in options or (name == 'delay' and options[name] is None):
            continue
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ProgressError('%s is %s: give a finite number of seconds' % (name, tr.quote(value)))
        if value < lo or value > hi or (positive and value <= lo):
            raise ProgressError('%s is %s: give seconds %s %g and at most %g' % (
                name, tr.quote(value), 'above' if positive else 'from', lo, hi))


def tail_lines(path, max_bytes=TAIL_BYTES):
    """The log's last max_bytes as lines; [] when there is no log yet. A log that is not a regular file
    (a link, a FIFO) is refused by open_regular."""
    try:
        with open_regular(path, what='log', follow=False) as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - max_bytes))
            data = handle.read(max_bytes)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return []
        raise ProgressError('cannot read the log %s: %s' % (path, exc))
    lines = data.decode('utf-8', 'replace').splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]   # the first one is cut
    return lines


def human_bytes(n):
    n = float(n)
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if abs(n) < 1024 or unit == 'TiB':
            return ('%d %s' % (n, unit)) if unit == 'B' else ('%.2f %s' % (n, unit))
        n /= 1024.0
    return str(n)   # pragma: no cover


def human_seconds(s):
    s = int(s)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return '%dh%02dm' % (h, m)
    if m:
        return '%dm%02ds' % (m, sec)
    return '%ds' % sec


def _count(text, source):
    """A count from a log line, or None when it is no count (5000 digits, past int64)."""
    try:
        return tr.int_text(text, source, 0, COUNT_MAX)
    except tr.ShapeError:
        return None


def _ninja(line):
    """(done, total) of a ninja ``[N/M]`` line; None when it is not one or its numbers cannot be real."""
    m = NINJA.match(line)
    if not m:
        return None
    done, total = _count(m.group(1), 'ninja'), _count(m.group(2), 'ninja')
    if done is None or total is None or done > total:
        return None
    return done, total


def _make(line):
    m = MAKE.match(line)
    if not m:
        return None
    percent = _count(m.group(1), 'make')
    return None if percent is None or percent > 100 else float(percent)


def build_progress(lines):
    """{'done', 'total', 'percent', 'msg'} from a build log's lines (build_progress([]) says nothing yet). A
    progress line whose numbers cannot be real (``[5/3]``, ``[ 250%]``, 5000 digits) is skipped."""
    start = max([i for i, line in enumerate(lines) if line.startswith('$ ')] or [-1])
    current = lines[start + 1:]
    command = lines[start][2:] if start >= 0 else ''
    done = total = percent = None
    for line in reversed(current):
        counted = _ninja(line)
        if counted:
            done, total = counted
            percent = round(100.0 * done / total, 1) if total else 100.0
            break
        percent = _make(line)
        if percent is not None:
            break
    if done is not None:
        msg = 'built %d of %d objects (%.0f%%)' % (done, total, percent)
    elif percent is not None:
        msg = 'built %.0f%% of the objects' % percent
    elif start < 0:
        msg = 'not started yet'
    elif any('ninja: no work to do' in line for line in current):
        msg = 'built 0 objects: ninja had no work to do'
    elif ' --build ' in ' %s ' % command:
        msg = 'built 0 objects yet (the build has started)'
    else:
        msg = 'configuring (cmake)'
    return {'done': done, 'total': total, 'percent': percent, 'msg': msg}


def _fetch_line(what):
    """{'done', 'total', 'percent', 'rate', 'eta_s'} of a ``progress`` line; None when it is not one or its
    numbers cannot be real (``1.2.3%``, more done than total, 5000 digits)."""
    m = FETCH_PROGRESS.match(what)
    if not m:
        return None
    done, total = _count(m.group('done'), 'fetch'), _count(m.group('total'), 'fetch')
    eta = m.group('eta')
    eta_s = _count(eta, 'fetch') if eta is not None else None
    try:
        percent = float(tr.num_text(m.group('pct'), 'fetch', 0.0, 100.0))
        tr.num_text(m.group('rate_n'), 'fetch', 0.0, float(COUNT_MAX))
    except tr.ShapeError:
        return None
    if done is None or total is None or done > total or (eta is not None and eta_s is None):
        return None
    return {'done': done, 'total': total, 'percent': percent, 'rate': m.group('rate') + '/s', 'eta_s': eta_s}


def fetch_progress(lines, label):
    """{'done', 'total', 'percent', 'rate', 'eta_s', 'msg'} for one file (label: its base name)."""
    mine = []
    for line in lines:
        m = FETCH.match(line)
        if m and m.group('label') == label:
            what = m.group('what')
            if what.startswith('start ') or what.startswith('resume from byte '):
                mine = []
            mine.append(what)
    out = {'done': None, 'total': None, 'percent': None, 'rate': None, 'eta_s': None}
    if not mine:
        out['msg'] = '%s: waiting for its first progress line' % label
        return out
    note = ''
    for what in reversed(mine):
        found = _fetch_line(what)
        if found:
            out.update(found)
            break
        if not note and (what.startswith('attempt ') or what.startswith('restart ') or what.startswith('FAILED')):
            note = what
    if out['done'] is None:
        out['msg'] = '%s: %s' % (label, note or mine[-1])
        return out
    out['msg'] = '%s: %s of %s (%.1f%%), %s, ETA %s%s' % (
        label, human_bytes(out['done']), human_bytes(out['total']), out['percent'], out['rate'],
        human_seconds(out['eta_s']) if out['eta_s'] is not None else '?', ('; ' + note) if note else '')
    return out


# async_wrapper's record while the job runs: {"started": true, "finished": false, "ansible_job_id": ...} (1 and 0
# before ansible-core 2.19); once the job ends, the module's own result, which has no "started" (async_status
# reads the file so). Enum compares with the type: "no", 0.5, [] and {} are not a state.
_STATE = tr.Enum(True, False, 1, 0)
RESULTS_RECORD = tr.Obj({'started': _STATE, 'finished': _STATE})


def job_finished(results_file):
    """True once the async job's results file holds its result (async_wrapper writes ``started`` first); False
    while it does not exist yet. ProgressError for a file that is no results file: not a regular file (a FIFO,
    a device, a link to /dev/zero), past the size cap, not JSON, or a record whose state is not a boolean."""
    if not results_file:
        return False
    source = 'the results file %s' % results_file
    try:
        data = read_bytes(results_file, what='async results file', max_bytes=RESULTS_MAX_BYTES)
    except FileRefused as exc:
        if exc.errno == errno.ENOENT:
            return False    # not written yet
        raise ProgressError('the results file %s' % exc)
    try:
        record = tr.load_json(data, source)
        state = tr.read(RESULTS_RECORD, record, source)    # an object whose started and finished are states
        if 'started' not in state:
            return True     # the module's result (async_status reads it as finished, whatever else it holds)
        return bool(state.get('finished', False))
    except tr.ShapeError as exc:
        raise ProgressError('%s (async_wrapper writes a JSON object with started and finished as booleans)' % exc)


def wait(results_file, seconds, interval=0.5, clock=time.monotonic, sleep=time.sleep):
    """Sleep up to seconds (finite, at most WAIT_MAX), returning early (True) when the job has finished."""
    check_timing({'wait': seconds})
    end = clock() + float(seconds)
    while True:
        if job_finished(results_file):
            return True
        left = end - clock()
        if left <= 0:
            return False
        sleep(min(interval, left))


def progress(log, fmt, label=None, results_file=None, wait_s=0.0):
    """One poll: {'msg' (printable), 'finished', the counts}; ProgressError names what was refused."""
    finished = wait(results_file, wait_s)
    lines = tail_lines(log) if log else []
    if fmt == 'build':
        out = build_progress(lines)
    elif fmt == 'fetch':
        if not label:
            raise ProgressError('format fetch needs label (the file name the progress log names)')
        out = fetch_progress(lines, label) if log else {'msg': '%s: downloading (no progress log)' % label}
    else:
        raise ProgressError('format must be build or fetch, not %s' % tr.quote(fmt))
    out['msg'] = tr.printable(out['msg'], limit=MSG_MAX)
    if out.get('rate') is not None:
        out['rate'] = tr.printable(out['rate'], limit=MSG_MAX)
    out['finished'] = finished
    return out
