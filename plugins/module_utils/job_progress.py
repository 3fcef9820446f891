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
"""
import errno
import json
import os
import re
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.regular_file import open_regular

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
NINJA = re.compile(r'^\[(\d+)/(\d+)\]')
MAKE = re.compile(r'^\[\s*(\d+)%\]')
FETCH = re.compile(r'^\S+ (?P<label>\S+) (?P<what>.*)$')
FETCH_PROGRESS = re.compile(r'^progress (?P<done>\d+)/(?P<total>\d+) bytes \((?P<pct>[\d.]+)%\) '
                            r'(?P<rate>[\d.]+ ?[KMGT]?i?B)/s eta (?P<eta>\d+s|\?)$')


class ProgressError(Exception):
    pass


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


def build_progress(lines):
    """{'done', 'total', 'percent', 'msg'} from a build log's lines (build_progress([]) says nothing yet)."""
    start = max([i for i, line in enumerate(lines) if line.startswith('$ ')] or [-1])
    current = lines[start + 1:]
    command = lines[start][2:] if start >= 0 else ''
    done = total = percent = None
    for line in reversed(current):
        m = NINJA.match(line)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
            percent = round(100.0 * done / total, 1) if total else 100.0
            break
        m = MAKE.match(line)
        if m:
            percent = float(m.group(1))
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
        m = FETCH_PROGRESS.match(what)
        if m:
            done, total = int(m.group('done')), int(m.group('total'))
            eta = m.group('eta')
            out.update(done=done, total=total, percent=float(m.group('pct')), rate=m.group('rate') + '/s',
                       eta_s=int(eta[:-1]) if eta != '?' else None)
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


def job_finished(results_file):
    """True once the async job's results file holds its result (async_wrapper writes ``started`` first)."""
    if not results_file:
        return False
    try:
        with open(results_file, 'r') as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False    # not written yet, or being rewritten
    return isinstance(data, dict) and ('started' not in data or bool(data.get('finished')))


def wait(results_file, seconds, interval=0.5, clock=time.monotonic, sleep=time.sleep):
    """Sleep up to seconds, returning early (True) when the job has finished."""
    end = clock() + max(0.0, float(seconds))
    while True:
        if job_finished(results_file):
            return True
        left = end - clock()
        if left <= 0:
            return False
        sleep(min(interval, left))


def progress(log, fmt, label=None, results_file=None, wait_s=0.0):
    finished = wait(results_file, wait_s)
    lines = tail_lines(log) if log else []
    if fmt == 'build':
        out = build_progress(lines)
    elif fmt == 'fetch':
        if not label:
            raise ProgressError('format fetch needs label (the file name the progress log names)')
        out = fetch_progress(lines, label) if log else {'msg': '%s: downloading (no progress log)' % label}
    else:
        raise ProgressError('format must be build or fetch, not %r' % (fmt,))
    out['finished'] = finished
    return out
