# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""python3 llm_watch.py --unit U --identifier ID --state FILE --textfile FILE: the faults the runbook
says to watch, counted from the journal into node-exporter textfile metrics.

One run reads every journal entry after the last run's cursor - the unit's own lines
(_SYSTEMD_UNIT=U, which journald sets from the sender's cgroup: no other process can claim it, as
any local user can claim a SYSLOG_IDENTIFIER with `logger -t`) and the kernel's (_TRANSPORT=kernel,
which only the kernel's ring gets) - counts the lines below, reads the unit's NRestarts, and writes:

  llm_watch_gpu_page_faults_total{unit,kind}   amdgpu page faults / UTCL2 client lines (kernel),
                                               "illegal memory access" and ggml_abort (the unit)
  llm_watch_prompt_cache_refused_total{unit}   "prompt state size ... exceeds cache size limit ..., skipping"
  llm_watch_full_reprocess_total{unit}         "forcing full prompt re-processing"
  llm_watch_unit_restarts{unit}                systemd's NRestarts of the unit (automatic restarts)
  llm_watch_last_run_timestamp_seconds{unit}   when this ran
  llm_watch_journal_up{unit}                   1 when journalctl answered, 0 when it did not

The totals and the cursor live in ONE state file, replaced atomically with the textfile after it, so
a count is a total across runs and no line is counted twice. The state file is read through its shape: one
that is not (string counts, a foreign cursor) is moved aside by name and the count starts again, so the
watch keeps watching. A cursor the journal no longer has
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
import stat
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


STATE_MAX_BYTES = 16 * 1024 * 1024
COUNT_MAX = 2 ** 53           # a count a float-reading Prometheus still holds exactly
USEC_MAX = 2 ** 63 - 1
_CONTROL = re.compile('[\x00-\x1f\x7f-\x9f]')
_SHA256 = re.compile('[0-9a-f]{64}\\Z')


class StateError(WatchError):
    """A state file that is not of the watch state's shape: the message names the file and the field."""


def _int(value, lo, hi, where):
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise StateError('%s: expected an integer from %d to %d, got %s' % (where, lo, hi, _shown(value)))
    return value


def _text(value, where, limit=4096):
    if not isinstance(value, str) or len(value) > limit or _CONTROL.search(value):
        raise StateError('%s: expected text of at most %d characters without control characters, got %s'
                         % (where, limit, _shown(value)))
    return value


def _shown(value):
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return _CONTROL.sub(lambda m: '\\x%02x' % ord(m.group(0)), text[:60])


def read_state(data, path):
    """The watch state of a parsed state file, every field typed and bounded (the one shape this script reads;
    it cannot import module_utils), or StateError naming the field."""
    if not isinstance(data, dict):
        raise StateError('%s: expected an object, got %s' % (path, _shown(data)))
    if data.get('version') != STATE_VERSION or isinstance(data.get('version'), bool):
        raise StateError('%s version: expected %d, got %s' % (path, STATE_VERSION, _shown(data.get('version'))))
    state = empty_state()
    cursor = data.get('cursor')
    state['cursor'] = None if cursor is None else _text(cursor, '%s cursor' % path)
    state['realtime_usec'] = _int(data.get('realtime_usec', 0), 0, USEC_MAX, '%s realtime_usec' % path)
    imported = data.get('imported', {})
    if not isinstance(imported, dict) or len(imported) > 10000:
        raise StateError('%s imported: expected an object of at most 10000 exports, got %s' % (path, _shown(imported)))
    for digest, seen in imported.items():
        where = '%s imported.%s' % (path, _shown(digest))
        if not _SHA256.match(digest) or not isinstance(seen, dict):
            raise StateError('%s: expected a sha256 naming {path, lines}' % where)
        state['imported'][digest] = {'path': _text(seen.get('path'), where + '.path'),
                                     'lines': _int(seen.get('lines'), 0, COUNT_MAX, where + '.lines')}
    counts = data.get('counts')
    if not isinstance(counts, dict):
        raise StateError('%s counts: expected an object, got %s' % (path, _shown(counts)))
    for key, value in counts.items():
        if key not in state['counts']:
            raise StateError('%s counts: %s is not a counter of this watch (%s)'
                             % (path, _shown(key), ', '.join(sorted(state['counts']))))
        state['counts'][key] = _int(value, 0, COUNT_MAX, '%s counts.%s' % (path, key))
    return state


def load_state(path):
    """The state at path; empty when absent. A file that is unreadable or not of the state's shape raises
    StateError naming it and the field (main() moves it aside and starts again)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return empty_state()
    except OSError as exc:
        raise StateError('%s cannot be opened: %s' % (path, exc.strerror or exc))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError('%s is not a regular file' % path)
        data = os.read(fd, STATE_MAX_BYTES + 1)
    except OSError as exc:
        raise StateError('%s cannot be read: %s' % (path, exc.strerror or exc))
    finally:
        os.close(fd)
    if len(data) > STATE_MAX_BYTES:
        raise StateError('%s holds more than %d bytes: not a watch state' % (path, STATE_MAX_BYTES))
    try:
        parsed = json.loads(data.decode('utf-8'), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:    # UnicodeDecodeError is a ValueError
        raise StateError('%s is not JSON: %s' % (path, _shown(str(exc))))
    return read_state(parsed, path)


def _no_constant(name):
    raise ValueError('%s is not a number JSON allows' % name)


def set_aside(path, now):
    """Move a state file that is not of its shape to <path>.bad-<time> (kept for a person to look at)."""
    aside = '%s.bad-%d' % (path, int(now))
    os.replace(path, aside)
    return aside


def transport_of(entry, unit):
    """'kernel' for the kernel's own lines, 'unit' for the unit's processes' lines, None for anyone else's.

    Both are journald's trusted fields (a leading '_': no client can set them); SYSLOG_IDENTIFIER is not, and
    any local user's `logger -t <unit>` writes it."""
    if entry.get('_TRANSPORT') == 'kernel':
        return 'kernel'
    if entry.get('_SYSTEMD_UNIT') == unit:
        return 'unit'
    return None


def message_of(entry):
    msg = entry.get('MESSAGE', '')
    if isinstance(msg, list):  # journalctl -o json writes a non-UTF-8 message as a byte array
        msg = bytes(b & 0xff for b in msg if isinstance(b, int)).decode('utf-8', 'replace')
    return msg if isinstance(msg, str) else ''


def classify(entry, unit):
    """The counter key a journal entry adds one to, or None."""
    transport = transport_of(entry, unit)
    if transport is None:
        return None
    msg = message_of(entry)
    for metric, kind, where, pattern in RULES:
        if where == transport and pattern.search(msg):
            return key_of(metric, kind)
    return None


def count(entries, state, unit, move_cursor=True):
    """Add the entries' matches to state['counts']; move the cursor to the last entry. Returns lines counted."""
    added = 0
    for entry in entries:
        if not isinstance(entry, dict):
            continue     # parse_lines yields objects; anything else is no journal entry
        key = classify(entry, unit)
        if key is not None:
            state['counts'][key] = state['counts'].get(key, 0) + 1
            added += 1
        if move_cursor:
            cursor = entry.get('__CURSOR')
            if isinstance(cursor, str) and cursor and len(cursor) <= 4096 and not _CONTROL.search(cursor):
                state['cursor'] = cursor
            state['realtime_usec'] = max(state['realtime_usec'], _usec(entry))
    return added


def parse_lines(lines):
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict):
            yield entry


def journal_cmd(journalctl, unit, cursor=None, since_usec=0):
    cmd = [journalctl, '--output=json', '--no-pager', '--quiet']
    if cursor:
        cmd.append('--after-cursor=' + cursor)
    elif since_usec:
        cmd.append('--since=@%d.%06d' % divmod(since_usec, 1000000))
    return cmd + ['_SYSTEMD_UNIT=' + unit, '+', '_TRANSPORT=kernel']


def read_journal(journalctl, unit, state):
    """Count what came after the cursor, streamed (a first run reads the whole journal). True when journalctl answered.

    A line is counted as it is read and the cursor moves with it, so a journalctl that fails half way leaves
    counts and cursor in step."""
    for attempt in ('cursor', 'since'):
        if attempt == 'since' and not state['cursor']:
            break
        since = state['realtime_usec'] if attempt == 'since' else None
        cmd = (journal_cmd(journalctl, unit, cursor=state['cursor']) if attempt == 'cursor'
               else journal_cmd(journalctl, unit, since_usec=since))
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                                    errors='replace')
        except OSError as exc:
            sys.stderr.write('llm_watch: %s did not answer: %s\n' % (journalctl, exc))
            return False
        with proc:
            count((e for e in parse_lines(proc.stdout) if since is None or _usec(e) > since), state, unit)
            err = proc.stderr.read()
        if proc.returncode == 0:
            return True
        sys.stderr.write('llm_watch: %s failed (%d): %s\n' % (' '.join(cmd), proc.returncode, err.strip()))
    return False


def _usec(entry):
    value = entry.get('__REALTIME_TIMESTAMP', 0)
    if isinstance(value, str) and re.match(r'[0-9]{1,19}\Z', value):
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= USEC_MAX else 0


def import_export(path, state, unit):
    """Count a recorded journal export once (by sha256). Returns the lines counted (0 when seen before)."""
    with open(path, 'rb') as handle:
        data = handle.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest in state['imported']:
        return 0
    added = count(parse_lines(data.decode('utf-8', 'replace').splitlines()), state, unit, move_cursor=False)
    state['imported'][digest] = {'path': path, 'lines': added}
    return added


def unit_restarts(systemctl, unit):
    try:
        proc = subprocess.run([systemctl, 'show', '--property=NRestarts', '--value', unit], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    value = proc.stdout.strip()
    return int(value) if proc.returncode == 0 and re.match(r'[0-9]{1,9}\Z', value) else None


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
    parser.add_argument('--unit', required=True, help='the systemd unit, e.g. llama-server.service')
    parser.add_argument('--identifier', required=True,
                        help="the unit's SyslogIdentifier (kept for older units; lines are the unit's by _SYSTEMD_UNIT)")
    parser.add_argument('--state', required=True, help='the state file (cursor + totals)')
    parser.add_argument('--textfile', required=True, help="node-exporter textfile (its directory must exist)")
    parser.add_argument('--import', dest='imports', action='append', default=[], metavar='FILE',
                        help='a recorded journal export (journalctl -o json) to count once')
    parser.add_argument('--journalctl', default='journalctl')
    parser.add_argument('--systemctl', default='systemctl')
    args = parser.parse_args(argv)
    lock = None
    bad = False
    try:
        # one run at a time on a state file (the timer's and a manual --import): no update is lost
        lock = open(args.state + '.lock', 'a')
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = load_state(args.state)
        except StateError as exc:    # reported by name and set aside: the watch keeps watching from a new state
            bad = True
            aside = set_aside(args.state, time.time()) if os.path.lexists(args.state) else None
            sys.stderr.write('llm_watch: the state file %s; moved aside to %s, the totals restart from the journal\n'
                             % (exc, aside))
            state = empty_state()
        up = read_journal(args.journalctl, args.unit, state)
        for path in args.imports:
            import_export(path, state, args.unit)
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
    finally:
        if lock is not None:
            lock.close()     # the flock goes with it, now (not when a collector finds the frame)
    if bad:
        return 1         # counted and written; the unit shows once that a state was set aside
    return 0 if up else 2


if __name__ == '__main__':
    sys.exit(main())
