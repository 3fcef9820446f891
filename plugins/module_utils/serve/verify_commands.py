# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operator's battery: commands run on the controller after the verify stage's own checks, stdlib only.

The runbook's acceptance after each deploy was the fleet's own e2e crawl (32/32; it flaked once, 1/31, while
the service stayed healthy). The collection cannot ship that suite; it runs the operator's commands instead,
each with the endpoint in its environment (``LLM_ENDPOINT_URL``, ``LLM_ENDPOINT_ALIAS``,
``LLM_ENDPOINT_API_KEY``, and ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``OPENAI_MODEL`` for a suite built on an
OpenAI SDK), a timeout and a retry count. A command that still exits non-zero after its retries (or outlives
its timeout) is a finding, which the role turns into a rollback exactly like a failed gate. Each command's
output tail is in the result with its control characters escaped and the API key blanked; the key itself is
never returned.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import shlex
import signal
import subprocess
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr

TAIL_CHARS = 2000          # characters of a command's output kept in the result
TIMEOUT_DEFAULT = 600
TIMEOUT_MAX = 86400
RETRIES_MAX = 10
KEYS = ('command', 'timeout', 'retries', 'name')
SECRET_MASK = '********'


class CommandsError(Exception):
    """A battery the stage cannot run (a bad entry): named before anything runs."""


def normalize(commands, var='llama_server_verify_commands'):
    """The battery as [{'name', 'argv', 'timeout', 'retries'}]; CommandsError naming every bad entry."""
    if not isinstance(commands, list):
        raise CommandsError('%s is %s: a list of {command, timeout, retries, name}' % (var, tr.kind(commands)))
    out, problems = [], []
    for i, entry in enumerate(commands):
        where = '%s[%d]' % (var, i)
        if isinstance(entry, (str, list)):
            entry = {'command': entry}
        if not isinstance(entry, dict):
            problems.append('%s is %s: a dict with command (an argv list or a string)' % (where, tr.kind(entry)))
            continue
        unknown = sorted(str(k) for k in entry if k not in KEYS)
        if unknown:
            problems.append('%s has %s: the keys are %s' % (where, ', '.join(unknown), ', '.join(KEYS)))
        command = entry.get('command')
        argv = None
        if isinstance(command, str):
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                problems.append('%s.command %s does not split into words: %s' % (where, tr.quote(command), exc))
                continue
        elif isinstance(command, list) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                               for a in command):
            argv = [str(a) for a in command]
        if not argv or not argv[0]:
            problems.append('%s.command is %s: an argv list or a string naming the program' % (where, tr.quote(command)))
            continue
        numbers = {}
        for key, default, lo, hi in (('timeout', TIMEOUT_DEFAULT, 1, TIMEOUT_MAX), ('retries', 0, 0, RETRIES_MAX)):
            value = entry.get(key, default)
            if isinstance(value, str) and value.strip().isdigit():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                problems.append('%s.%s is %s: an integer from %d to %d' % (where, key, tr.quote(value), lo, hi))
            numbers[key] = value
        name = entry.get('name') or os.path.basename(argv[0])
        if not isinstance(name, str):
            problems.append('%s.name is %s: a string' % (where, tr.kind(name)))
            name = str(name)
        out.append({'name': tr.printable(name, limit=120), 'argv': argv, 'timeout': numbers.get('timeout'),
                    'retries': numbers.get('retries')})
    if problems:
        raise CommandsError('; '.join(problems))
    return out


def endpoint_env(url, alias, api_key, base=None):
    """The environment each command runs with: the controller's own plus the endpoint's."""
    env = dict(os.environ if base is None else base)
    env.update(LLM_ENDPOINT_URL=url, LLM_ENDPOINT_ALIAS=alias, LLM_ENDPOINT_API_KEY=api_key,
               OPENAI_BASE_URL=url, OPENAI_API_KEY=api_key or 'none', OPENAI_MODEL=alias)
    return env


def run_once(argv, env, timeout):
    """(exit status or None when it timed out or could not start, combined output, seconds). The command runs in
    its own session; on a timeout that whole process group is killed."""
    start = time.time()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    except OSError as exc:
        return None, 'cannot start %s: %s' % (argv[0], exc), 0.0
    try:
        output, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        output, _ = proc.communicate()
        rc = None
        output = (output or b'') + (b'\n[killed after %d s]' % int(timeout))
    return rc, (output or b'').decode('utf-8', 'replace'), round(time.time() - start, 2)


def tail(text, secret=''):
    """The last TAIL_CHARS of a command's output, the key blanked, control characters escaped (newlines kept)."""
    if secret:
        text = text.replace(secret, SECRET_MASK)
    if len(text) > TAIL_CHARS:
        text = '...' + text[-TAIL_CHARS:]
    return tr.printable(text, lines=True)


def would_run(commands, url):
    return ['%s: %s on the controller against %s (timeout %d s, %d retr%s)'
            % (c['name'], tr.printable(' '.join(shlex.quote(a) for a in c['argv']), limit=300), url or '?',
               c['timeout'], c['retries'], 'y' if c['retries'] == 1 else 'ies') for c in commands]


def run_battery(commands, url, alias, api_key, runner=run_once, sleep=time.sleep, pause=2.0):
    """Every command in order, each retried up to its retries. Returns passed, results (name, rc, attempts,
    seconds, output tail), findings, warnings and message."""
    env = endpoint_env(url, alias, api_key)
    results, findings, warnings = [], [], []
    for c in commands:
        attempts, seconds, rc, output = 0, 0.0, None, ''
        for attempt in range(c['retries'] + 1):
            if attempt:
                sleep(pause)
            attempts += 1
            rc, output, took = runner(c['argv'], env, c['timeout'])
            seconds += took
            if rc == 0:
                break
        row = {'name': c['name'], 'rc': rc, 'attempts': attempts, 'seconds': round(seconds, 2),
               'output_tail': tail(output, api_key)}
        results.append(row)
        if rc != 0:
            findings.append('verify command %s: %s after %d attempt(s) - the operator\'s battery fails this shape; '
                            'its output ends: %s' % (c['name'], 'exit %d' % rc if rc is not None else
                                                     'no exit within %d s (or it could not start)' % c['timeout'],
                                                     attempts, row['output_tail'][-400:]))
        elif attempts > 1:
            warnings.append('verify command %s passed on attempt %d of %d (a flake: the earlier attempts failed)'
                            % (c['name'], attempts, c['retries'] + 1))
    passed = not findings
    head = 'verify commands %s: %d of %d passed' % ('passed' if passed else 'FAILED',
                                                    sum(1 for r in results if r['rc'] == 0), len(results))
    lines = [head] + ['  %-20s %s, %d attempt(s), %.1f s' % (r['name'], 'exit %s' % r['rc'] if r['rc'] is not None
                                                             else 'timed out', r['attempts'], r['seconds'])
                      for r in results]
    return {'passed': passed, 'results': results, 'findings': findings, 'warnings': warnings,
            'message': '\n'.join(lines + findings)}
