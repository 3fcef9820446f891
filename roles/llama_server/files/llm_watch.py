# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""python3 llm_watch.py --unit U --identifier ID --state FILE --textfile FILE: the faults the runbook
says to watch, counted from the journal into node-exporter textfile metrics.

One run reads every journal entry after the last run's cursor - the unit's own lines
(SYSLOG_IDENTIFIER=ID, what the unit's SyslogIdentifier= stamps on its output) and the kernel's
(_TRANSPORT=kernel) - counts the lines below, reads the unit's NRestarts, and writes:

  llm_watch_gpu_page_faults_total{unit,kind}   amdgpu page faults / UTCL2 client lines (kernel),
                                               "illegal memory access" and ggml_abort (the unit)
  llm_watch_prompt_cache_refused_total{unit}   "prompt state size ... exceeds cache size limit ..., skipping"
  llm_watch_full_reprocess_total{unit}         "forcing full prompt re-processing"
  llm_watch_unit_restarts{unit}                systemd's NRestarts of the unit (automatic restarts)
  llm_watch_last_run_timestamp_seconds{unit}   when this ran
  llm_watch_journal_up{unit}                   1 when journalctl answered, 0 when it did not

The totals and the cursor live in ONE state file, replaced atomically with the textfile after it, so
a count is a total across runs and no line is counted twice. A cursor the journal no longer has
(rotated, vacuumed) falls back to the time of the last counted entry. --import FILE counts a
recorded journal export (journalctl -o json) once - kernel lines saved from another boot, or a
container without a kernel ring - and remembers its sha256 so a second import adds nothing.

Python 3 standard library only: it runs on the endpoint host from a systemd timer.
"""
import argparse
import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

STATE_VERSION = 1

# (metric, kind, transport, pattern): the first rule whose transport and pattern match counts a line once.
# transport 'kernel' matches only _TRANSPORT=kernel entries, 'unit' only the unit's own lines.
RULES = (
    ('llm_watch_gpu_page_faults_total', 'page_fault', 'kernel', re.compile(r'amdgpu.*page fault', re.I)),
    ('llm_watch_gpu_page_faults_total', 'utcl2', 'kernel', re.compile(r'UTCL2', re.I)),
    ('llm_watch_gpu_page_faults_total', 'illegal_memory_access', 'unit', re.compile(r'illegal memory access', re.I)),
    ('llm_watch_gpu_page_faults_total', 'ggml_abort', 'unit', re.compile(r'ggml_abort')),
    ('llm_watch_prompt_cache_refused_total', '', 'unit',
     re.compile(r'prompt state size .* exceeds cache size limit .*skipping')),
    ('llm_watch_full_reprocess_total', '', 'unit', re.compile(r'forcing full prompt re-processing')),
)
FAULT_KINDS = tuple(kind for metric, kind, _t, _p in RULES if metric == 'llm_watch_gpu_page_faults_total')
COUNTERS = ('llm_watch_gpu_page_faults_total', 'llm_watch_prompt_cache_refused_total', 'llm_watch_full_reprocess_total')
HELP = {
    'llm_watch_gpu_page_faults_total': 'GPU faults in the kernel log (amdgpu page fault, UTCL2) and the unit '
                                       '(illegal memory access, ggml_abort): a fault in the cross-card copy, not an OOM.',
    'llm_watch_prompt_cache_refused_total': 'Prompt states larger than the whole --cache-ram cap, refused and lost.',
    'llm_watch_full_reprocess_total': 'Prompts re-prefilled in full for lack of cache data.',
    'llm_watch_unit_restarts': 'systemd NRestarts of the unit: restarts Restart=on-failure made unseen.',
    'llm_watch_last_run_timestamp_seconds': 'When the watch last ran.',
    'llm_watch_journal_up': '1 when journalctl answered on the last run.',
}


class WatchError(Exception):
    pass


def empty_state():
    return {'version': STATE_VERSION, 'cursor': None, 'realtime_usec': 0, 'imported': {},
            'counts': dict((key_of(m, k), 0) for m, k, _t, _p in RULES)}


def key_of(metric, kind):
    return metric + ('/' + kind if kind else '')


def load_state(path):
    try:
        with open(path) as handle:
            state = json.load(handle)
    except FileNotFoundError:
        return empty_state()
    except (OSError, ValueError) as exc:
        raise WatchError('the state file %s cannot be read (%s): move it aside (the totals restart from the '
                         'journal) or restore it' % (path, exc))
    if not isinstance(state, dict) or state.get('version') != STATE_VERSION or not isinstance(state.get('counts'), dict):
        raise WatchError('the state file %s is not a version %d watch state: move it aside' % (path, STATE_VERSION))
    fresh = empty_state()
    fresh.update(state)
    for key, value in empty_state()['counts'].items():
        fresh['counts'].setdefault(key, value)
    return fresh


def transport_of(entry, identifier):
    if entry.get('_TRANSPORT') == 'kernel':
        return 'kernel'
    if entry.get('SYSLOG_IDENTIFIER') == identifier:
        return 'unit'
    return None


def message_of(entry):
    msg = entry.get('MESSAGE', '')
    if isinstance(msg, list):  # journalctl -o json writes a non-UTF-8 message as a byte array
        msg = bytes(b & 0xff for b in msg if isinstance(b, int)).decode('utf-8', 'replace')
    return msg if isinstance(msg, str) else ''


def classify(entry, identifier):
    """The counter key a journal entry adds one to, or None."""
    transport = transport_of(entry, identifier)
    if transport is None:
        return None
    msg = message_of(entry)
    for metric, kind, where, pattern in RULES:
        if where == transport and pattern.search(msg):
            return key_of(metric, kind)
    return None


def count(entries, state, identifier, move_cursor=True):
    """Add the entries' matches to state['counts']; move the cursor to the last entry. Returns lines counted."""
    added = 0
    for entry in entries:
        key = classify(entry, identifier)
        if key is not None:
            state['counts'][key] = state['counts'].get(key, 0) + 1
            added += 1
        if move_cursor:
            if entry.get('__CURSOR'):
                state['cursor'] = entry['__CURSOR']
            try:
                state['realtime_usec'] = max(state['realtime_usec'], int(entry.get('__REALTIME_TIMESTAMP', 0)))
            except (TypeError, ValueError):
                pass
    return added


def parse_lines(lines):
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            yield entry


def journal_cmd(journalctl, identifier, cursor=None, since_usec=0):
    cmd = [journalctl, '--output=json', '--no-pager', '--quiet']
    if cursor:
        cmd.append('--after-cursor=' + cursor)
    elif since_usec:
        cmd.append('--since=@%d.%06d' % divmod(since_usec, 1000000))
    return cmd + ['SYSLOG_IDENTIFIER=' + identifier, '+', '_TRANSPORT=kernel']


def read_journal(journalctl, identifier, state):
    """Count what came after the cursor, streamed (a first run reads the whole journal). True when journalctl answered.

    A line is counted as it is read and the cursor moves with it, so a journalctl that fails half way leaves
    counts and cursor in step."""
    for attempt in ('cursor', 'since'):
        if attempt == 'since' and not state['cursor']:
            break
        since = state['realtime_usec'] if attempt == 'since' else None
        cmd = (journal_cmd(journalctl, identifier, cursor=state['cursor']) if attempt == 'cursor'
               else journal_cmd(journalctl, identifier, since_usec=since))
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                    errors='replace')
        except OSError as exc:
            sys.stderr.write('llm_watch: %s did not answer: %s\n' % (journalctl, exc))
            return False
        with proc:
            count((e for e in parse_lines(proc.stdout) if since is None or _usec(e) > since), state, identifier)
            err = proc.stderr.read()
        if proc.returncode == 0:
            return True
        sys.stderr.write('llm_watch: %s failed (%d): %s\n' % (' '.join(cmd), proc.returncode, err.strip()))
    return False


def _usec(entry):
    try:
        return int(entry.get('__REALTIME_TIMESTAMP', 0))
    except (TypeError, ValueError):
        return 0


def import_export(path, state, identifier):
    """Count a recorded journal export once (by sha256). Returns the lines counted (0 when seen before)."""
    with open(path, 'rb') as handle:
        data = handle.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest in state['imported']:
        return 0
    added = count(parse_lines(data.decode('utf-8', 'replace').splitlines()), state, identifier, move_cursor=False)
    state['imported'][digest] = {'path': path, 'lines': added}
    return added


def unit_restarts(systemctl, unit):
    try:
        proc = subprocess.run([systemctl, 'show', '--property=NRestarts', '--value', unit], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = proc.stdout.strip()
    return int(value) if proc.returncode == 0 and value.isdigit() else None


def _label(value):
    return value.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


def render(state, unit, restarts, journal_up, now):
    """The textfile: every series, zeros included, so an alert's increase() starts from 0."""
    u = 'unit="%s"' % _label(unit)
    out = []

    def head(metric, kind):
        out.append('# HELP %s %s' % (metric, HELP[metric]))
        out.append('# TYPE %s %s' % (metric, kind))

    head('llm_watch_gpu_page_faults_total', 'counter')
    for kind in FAULT_KINDS:
        out.append('llm_watch_gpu_page_faults_total{%s,kind="%s"} %d'
                   % (u, kind, state['counts'].get(key_of('llm_watch_gpu_page_faults_total', kind), 0)))
    for metric in COUNTERS[1:]:
        head(metric, 'counter')
        out.append('%s{%s} %d' % (metric, u, state['counts'].get(metric, 0)))
    if restarts is not None:
        head('llm_watch_unit_restarts', 'gauge')
        out.append('llm_watch_unit_restarts{%s} %d' % (u, restarts))
    head('llm_watch_journal_up', 'gauge')
    out.append('llm_watch_journal_up{%s} %d' % (u, 1 if journal_up else 0))
    head('llm_watch_last_run_timestamp_seconds', 'gauge')
    out.append('llm_watch_last_run_timestamp_seconds{%s} %d' % (u, int(now)))
    return '\n'.join(out) + '\n'


def write_atomic(path, text, mode=0o644):
    """Write beside the target, fsync, rename over it: a reader sees the old file or the new one, never half."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', dir=directory)
    try:
        with os.fdopen(fd, 'w') as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--unit', required=True, help='the systemd unit, e.g. frank-medium.service')
    parser.add_argument('--identifier', required=True, help="the unit's SyslogIdentifier")
    parser.add_argument('--state', required=True, help='the state file (cursor + totals)')
    parser.add_argument('--textfile', required=True, help="node-exporter textfile (its directory must exist)")
    parser.add_argument('--import', dest='imports', action='append', default=[], metavar='FILE',
                        help='a recorded journal export (journalctl -o json) to count once')
    parser.add_argument('--journalctl', default='journalctl')
    parser.add_argument('--systemctl', default='systemctl')
    args = parser.parse_args(argv)
    try:
        # one run at a time on a state file (the timer's and a manual --import): no update is lost
        lock = open(args.state + '.lock', 'a')
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = load_state(args.state)
        up = read_journal(args.journalctl, args.identifier, state)
        for path in args.imports:
            import_export(path, state, args.identifier)
        restarts = unit_restarts(args.systemctl, args.unit)
        write_atomic(args.state, json.dumps(state, indent=1, sort_keys=True) + '\n', mode=0o600)
        text = render(state, args.unit, restarts, up, time.time())
        if os.path.isdir(os.path.dirname(os.path.abspath(args.textfile))):
            write_atomic(args.textfile, text)
        else:
            sys.stderr.write('llm_watch: %s does not exist (no node-exporter textfile collector here): '
                             'counted into %s only\n' % (os.path.dirname(args.textfile), args.state))
    except (WatchError, OSError) as exc:
        sys.stderr.write('llm_watch: %s\n' % exc)
        return 1
    return 0 if up else 2


if __name__ == '__main__':
    sys.exit(main())
