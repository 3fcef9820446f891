# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_server gate: what a live llama-server shape must prove after a (re)start, stdlib only.

Its expectations come from the live env file (so the same checks prove a rolled-back shape):

- before: the unit's NRestarts, MainPID and ActiveState;
- step 1: ``/health`` answers 200 within a timeout derived from the payload the load reads
  (:func:`health_timeout`, the one home of that formula);
- step 1b (RPC set): this start's journal shows every RPC worker as a device with free memory;
- step 2: a real chat completion with the alias returns at least one token;
- step 3: ``/v1/models`` lists the alias, ``/props`` has PARALLEL slots of CTX_SIZE / PARALLEL and
  the vision modality the env file asks for;
- step 4 (SPEC_TYPE set): after a generation on a prompt a drafter can match,
  ``llamacpp:spec_decode_num_drafts_total`` on ``/metrics`` is above 0;
- step 5: the same process served every step (NRestarts and MainPID unchanged, still active).

The first failing step of 1-4 ends the HTTP checks; step 5 is read after a failing step too, so a
finding says when the service also died on it. ``run_gate`` returns ``passed`` and the findings;
it never raises for a failing shape, only (GateError) for input it cannot gate.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import math
import os
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_server_answers as answers
from ansible_collections.dankfleet.llm.plugins.module_utils.base.strict_values import is_finite_number
from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import (
    METRIC_DRAFTS, BenchError, Endpoint, parse_metrics)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import ShapeError, Str, printable, text_lines
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import read as read_shape
from ansible_collections.dankfleet.llm.plugins.module_utils.host.host_state import parse_show
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_cpp_rules import model_drafters
from ansible_collections.dankfleet.llm.plugins.module_utils.serve.rpc_fleet import missing_devices

MIB = 1048576
ANY_ADDRESS = ('0.0.0.0', '::', '')
UNIT_PROPERTIES = 'NRestarts,MainPID,ActiveState'
HEALTH_REQUEST_TIMEOUT = 10     # seconds for one /health request
INFO_TIMEOUT = 30               # seconds for /v1/models, /props and /metrics
FINDING_TEXT_MAX = 600          # characters of the server's error message in a step-2 finding

DEFAULTS = dict(
    label='new shape',
    host='',
    health_timeout=0,
    health_timeout_base=60,
    load_mib_per_s=200.0,
    prompt='Reply with one word: ready.',
    max_tokens=8,
    spec_prompt=('Repeat this line exactly, twice: the quick brown fox jumps over the lazy dog, the quick brown fox '
                 'jumps over the lazy dog, the quick brown fox jumps over the lazy dog.'),
    spec_max_tokens=64,
    request_timeout=120,
)


class GateError(Exception):
    """Input the gate cannot work from (bad options, an unreadable or incomplete env file)."""


def health_timeout(payload_bytes, override=0, base=60, mib_per_s=200.0):
    """Seconds /health may take to answer 200: ``override`` when > 0, else ``base`` + the payload
    (model + drafter + mmproj bytes) read at ``mib_per_s``, rounded up."""
    if int(override) > 0:
        return int(override)
    if float(mib_per_s) <= 0:
        raise GateError('load_mib_per_s must be above 0, got %r' % (mib_per_s,))
    return int(base) + int(math.ceil(int(payload_bytes) / float(MIB) / float(mib_per_s)))


def validate_options(opts):
    """Problems with the gate's numbers, one sentence each (empty when all are usable)."""
    problems = []
    for name in ('health_timeout', 'health_timeout_base'):
        if opts[name] < 0:
            problems.append('%s=%s: seconds, 0 or more' % (name, opts[name]))
    if opts['load_mib_per_s'] <= 0:
        problems.append('load_mib_per_s=%s: the load rate in MiB/s must be above 0' % opts['load_mib_per_s'])
    for name in ('max_tokens', 'spec_max_tokens', 'request_timeout'):
        if opts[name] < 1:
            problems.append('%s=%s: must be 1 or more' % (name, opts[name]))
    for name in ('prompt', 'spec_prompt', 'label'):
        if not str(opts[name]).strip():
            problems.append('%s is empty' % name)
    return problems


def _integer(env, name, default, env_file):
    raw = env.get(name, '')
    if raw == '':
        if default is None:
            raise GateError('%s in %s is missing or empty: the gate cannot know what to expect without it; '
                            'render the env file with the llama_server role' % (name, env_file))
        return default
    try:
        return int(raw)
    except ValueError:
        raise GateError('%s=%r in %s is not an integer: render the env file with the llama_server role'
                        % (name, raw, env_file))


def gate_url(env, host='', env_file='the env file'):
    """The base URL the gate calls: ``host`` when given, else the bind address (127.0.0.1 when bound
    to every address, brackets around IPv6), and LISTEN_PORT."""
    port = _integer(env, 'LISTEN_PORT', None, env_file)
    if not host:
        if 'BIND_ADDR' not in env:
            raise GateError('BIND_ADDR in %s is missing: set the gate host or render the env file with the '
                            'llama_server role' % env_file)
        bind = env['BIND_ADDR']
        host = '127.0.0.1' if bind in ANY_ADDRESS else bind
    if ':' in host and not host.startswith('['):
        host = '[%s]' % host
    return 'http://%s:%d' % (host, port)


def expectations(env, host='', label=DEFAULTS['label'], env_file='the env file'):
    """What the live shape must show, from its env file's variables (never the API key)."""
    for name in ('ALIAS', 'MODEL_PATH'):
        if not env.get(name):
            raise GateError('%s in %s is missing or empty: the gate cannot know what to expect without it; '
                            'render the env file with the llama_server role' % (name, env_file))
    slots = _integer(env, 'PARALLEL', 1, env_file)
    if slots < 1:
        raise GateError('PARALLEL=%d in %s: at least one slot' % (slots, env_file))
    ctx = _integer(env, 'CTX_SIZE', 0, env_file)
    spec = env.get('SPEC_TYPE', '')
    vision = env.get('VISION', 'off') == 'on'
    backed = model_drafters(spec.split(','))
    payload = [env['MODEL_PATH']]
    if backed:
        payload.append(env.get('DRAFT_MODEL_PATH', ''))
    if vision:
        payload.append(env.get('MMPROJ_PATH', ''))
    return dict(
        label=label,
        base=gate_url(env, host, env_file),
        alias=env['ALIAS'],
        slots=slots,
        slot_ctx=ctx // slots,
        vision=vision,
        spec=spec,
        release=env.get('LLAMA_RELEASE', ''),
        rpc=[e for e in env.get('RPC', '').split(',') if e],
        payload=payload,
    )


def payload_bytes(paths):
    """Total size of the files the load reads; an absent one counts 0 (the launcher refuses it, not the gate)."""
    total = 0
    for path in paths:
        try:
            total += os.stat(path).st_size if path else 0
        except OSError:
            pass
    return total


def error_text(body):
    """The server's error message from an answer body (``{"error": {"message": ...}}``), else the body: one
    line, control characters escaped (llama_server_answers.error_text)."""
    return answers.error_text(body)


def _truncate(text, length=FINDING_TEXT_MAX):
    return text if len(text) <= length else text[:length - 3] + '...'


def _number(value):
    return int(value) if float(value).is_integer() else value


# systemd's invocation ID: 128 bits, written as 32 lowercase hex digits (sd_id128_to_string)
INVOCATION_ID = Str(max_len=32, name=True, pattern='[0-9a-f]{32}', what='a systemd invocation ID (32 hex digits)')


def start_journal(run_command, unit):
    """(the journal of the unit's current start, '') or ('', why not): the lines of its systemd invocation
    (``_SYSTEMD_INVOCATION_ID``, the start ExecMainStartTimestamp dates), so a line from an earlier start never
    counts. Both answers are outside data: the ID is read through its shape, the journal through
    ``text_lines`` (bounded, every line printable). ``run_command(argv) -> (rc, stdout, stderr)``."""
    argv = ['systemctl', 'show', '--property=InvocationID', '--value', unit]
    rc, inv, err = run_command(argv)
    if rc != 0 or not (inv or '').strip():
        why = (': ' + printable((err or '').strip(), limit=200)) if rc != 0 else ' with no InvocationID: is %s running?' % unit
        return '', '%s exited %d%s' % (' '.join(argv), rc, why)
    try:
        inv = read_shape(INVOCATION_ID, (inv or '').strip(), ' '.join(argv))
    except ShapeError as exc:
        return '', str(exc)
    argv = ['journalctl', '--no-pager', '-o', 'cat', '_SYSTEMD_INVOCATION_ID=%s' % inv]
    rc, journal, err = run_command(argv)
    if rc != 0:
        return '', '%s exited %d: %s' % (' '.join(argv), rc, printable((err or '').strip(), limit=200))
    try:
        return '\n'.join(text_lines(journal or '', ' '.join(argv[:2] + argv[-1:]))), ''
    except ShapeError as exc:
        return '', str(exc)


def planned_checks(expect, unit, timeout):
    """The checks a run makes, in words (check mode reports these)."""
    checks = ['before: %s of %s' % (UNIT_PROPERTIES, unit),
              'step 1: %s/health answers 200 within %d s' % (expect['base'], timeout)]
    if expect['rpc']:
        checks.append("step 1b: this start's journal shows RPC worker(s) %s as devices with free memory"
                      % ','.join(expect['rpc']))
    checks.append('step 2: POST /v1/chat/completions (model %s) returns at least one token' % expect['alias'])
    checks.append('step 3: /v1/models lists %s; /props total_slots %d, n_ctx per slot %s, modalities.vision %s'
                  % (expect['alias'], expect['slots'], expect['slot_ctx'] or 'any', expect['vision']))
    if expect['spec']:
        checks.append('step 4: %s > 0 on /metrics after a generation (SPEC_TYPE=%s)' % (METRIC_DRAFTS, expect['spec']))
    checks.append('step 5: NRestarts and MainPID unchanged and %s still active' % unit)
    return checks


def run_gate(expect, api_key, unit, timeout, run_command, opts=None, poll=1.0, clock=time.time, sleep=time.sleep):
    """Run the gate against the live shape. ``run_command(argv) -> (rc, stdout, stderr)`` reads systemd.

    Returns the figures and ``passed`` / ``findings``; a failing shape is a finding, never an exception.
    """
    o = dict(DEFAULTS)
    o.update(opts or {})
    label, base = expect['label'], expect['base']
    ep = Endpoint(base, api_key=api_key, timeout=o['request_timeout'])
    out = dict(passed=False, findings=[], health_seconds=None, completion_tokens=None, drafts=None,
               main_pid=None, n_restarts=None, active_state=None, build_info=None, spec_chat_status=None,
               checked=[])

    def prefix(step):
        return 'gate (%s) step %s: ' % (label, step) if step else 'gate (%s): ' % label

    def unit_state():
        argv = ['systemctl', 'show', '--property=' + UNIT_PROPERTIES, unit]
        rc, stdout, stderr = run_command(argv)
        if rc != 0:
            return None, '%s exited %d: %s' % (' '.join(argv), rc, (stderr or stdout).strip())
        return parse_show(stdout), None

    before, why = unit_state()
    out['checked'].append('before')
    if before is None:
        out['findings'].append(prefix(None) + 'cannot read the unit before the checks - %s. Is %s installed?'
                               % (why, unit))
        return _finish(out, expect)

    failed = _http_steps(ep, expect, unit, timeout, run_command, o, poll, clock, sleep, out, prefix)

    after, why = unit_state()
    out['checked'].append('5')
    if after is None:
        out['findings'].append(prefix(5) + 'cannot read the unit after the checks - %s' % why)
        return _finish(out, expect)
    out['main_pid'], out['n_restarts'] = after.get('MainPID'), after.get('NRestarts')
    out['active_state'] = after.get('ActiveState')
    if (before.get('NRestarts') != after.get('NRestarts') or before.get('MainPID') != after.get('MainPID')
            or after.get('MainPID') == '0' or after.get('ActiveState') != 'active'):
        out['findings'].append(
            prefix(5) + 'the service did not stay up across the gate - NRestarts %s -> %s, MainPID %s -> %s, '
            'ActiveState %s: healthy, then dying on a request is the pattern this catches.'
            % (before.get('NRestarts'), after.get('NRestarts'), before.get('MainPID'), after.get('MainPID'),
               after.get('ActiveState')))
    elif not failed:
        out['passed'] = True
    return _finish(out, expect)


def _http_steps(ep, expect, unit, timeout, run_command, o, poll, clock, sleep, out, prefix):
    """Steps 1-4; True when one failed (its finding is in out['findings'])."""
    base, alias = expect['base'], expect['alias']

    # step 1: /health within the timeout (503 "Loading model" while the weights load is normal)
    out['checked'].append('1')
    start = clock()
    deadline = start + timeout
    while True:
        # one request may not outlast the step: a peer dripping bytes ends with the step's own deadline
        code, body = ep.call('/health', timeout=max(1.0, min(HEALTH_REQUEST_TIMEOUT, deadline - clock())))
        if code == 200:
            out['health_seconds'] = round(clock() - start, 1)
            break
        last = 'HTTP %s %s' % (code, error_text(body))
        now = clock()
        if now >= deadline:
            out['findings'].append(
                prefix(1) + '%s/health did not answer 200 within %d s (last: %s) - llama-server never finished '
                'loading, or it crash-loops.' % (base, timeout, last.strip()))
            return True
        sleep(max(0.0, min(poll, deadline - now)))

    # step 1b: every RPC worker is a device of this start, with memory
    if expect['rpc']:
        out['checked'].append('1b')
        log, _ = start_journal(run_command, unit)
        missing = missing_devices(log, expect['rpc'])
        if missing:
            out['findings'].append(
                prefix('1b') + 'llama-server was started with --rpc %s but %s - a worker is down, unreachable '
                'through its firewall, or reports no memory.' % (','.join(expect['rpc']), missing))
            return True

    # step 2: a real chat completion with the alias
    out['checked'].append('2')
    code, body = ep.call('/v1/chat/completions', _chat(alias, o['prompt'], o['max_tokens']),
                         timeout=o['request_timeout'])
    tokens, problem = 0, None
    if code == 200:
        try:
            tokens = answers.read_answer(body, answers.GATE_CHAT, 'POST /v1/chat/completions')['usage']['completion_tokens']
        except ShapeError as exc:
            problem = str(exc)
    out['completion_tokens'] = tokens
    if code != 200 or tokens < 1 or problem:
        out['findings'].append(
            prefix(2) + 'POST /v1/chat/completions (model %s) answered HTTP %s with %d completion token(s): %s'
            % (alias, code, tokens, _truncate(error_text(body) if code != 200 else
                                              problem or printable(' '.join(body.split())))))
        return True

    # step 3: the alias, the slots, the context per slot and vision
    out['checked'].append('3')
    models_code, models_body = ep.call('/v1/models', timeout=INFO_TIMEOUT)
    props_code, props_body = ep.call('/props', timeout=INFO_TIMEOUT)
    problems = []
    models = _read(models_code, models_body, answers.MODELS, '/v1/models', problems)
    props = _read(props_code, props_body, answers.PROPS, '/props', problems)
    if models is not None:
        ids = [m['id'] for m in models['data']]
        if alias not in ids:
            problems.append('/v1/models lists %s, not the alias %s' % (printable(json.dumps(ids), limit=600), alias))
    if props is not None:
        out['build_info'] = props.get('build_info')
        slots, slot_ctx = props['total_slots'], props['default_generation_settings']['n_ctx']
        vision = props['modalities']['vision']
        if slots != expect['slots']:
            problems.append('/props total_slots %s != PARALLEL %d' % (slots, expect['slots']))
        if expect['slot_ctx'] and slot_ctx != expect['slot_ctx']:
            problems.append('/props n_ctx per slot %s != CTX_SIZE / PARALLEL = %d' % (slot_ctx, expect['slot_ctx']))
        if vision != expect['vision']:
            problems.append('/props modalities.vision %s but VISION is %s'
                            % (vision, 'on' if expect['vision'] else 'off'))
    if problems:
        out['findings'].append(prefix(3) + '; '.join(problems))
        return True

    # step 4: the drafter drafted
    if expect['spec']:
        out['checked'].append('4')
        out['spec_chat_status'] = ep.call('/v1/chat/completions', _chat(alias, o['spec_prompt'], o['spec_max_tokens']),
                                          timeout=o['request_timeout'])[0]
        code, text = ep.call('/metrics', timeout=INFO_TIMEOUT)
        drafts = 0.0
        if code == 200:
            try:
                drafts = parse_metrics(text, 'GET /metrics').get(METRIC_DRAFTS, 0.0)
            except BenchError as exc:
                out['findings'].append(prefix(4) + '%s; the drafts counter cannot be read.' % exc)
                return True
        if not is_finite_number(drafts):
            out['drafts'] = str(drafts)
            out['findings'].append(
                prefix(4) + '%s is %s on /metrics: not a count of drafted tokens (NaN and infinities are refused); '
                'the server or a proxy in front of it is not reporting real metrics.' % (METRIC_DRAFTS, drafts))
            return True
        out['drafts'] = _number(drafts)
        if code != 200 or drafts <= 0:
            out['findings'].append(
                prefix(4) + 'SPEC_TYPE=%s is configured but %s is %s after a generation (/metrics HTTP %s): the '
                'flags can all be right while the drafter does not run - read the journal for the speculative '
                'init lines.' % (expect['spec'], METRIC_DRAFTS, out['drafts'], code))
            return True
    return False


def _read(code, body, shape, path, problems):
    """The answer of a 200 read through shape, or None with the reason appended to problems."""
    if code != 200:
        problems.append('%s answered HTTP %s: %s' % (path, code, _truncate(error_text(body), 200)))
        return None
    try:
        return answers.read_answer(body, shape, path)
    except ShapeError as exc:
        problems.append(str(exc))
        return None


def _chat(alias, prompt, max_tokens):
    return {'model': alias, 'messages': [{'role': 'user', 'content': prompt}], 'max_tokens': int(max_tokens),
            'temperature': 0}


def _finish(out, expect):
    if out['passed']:
        drafts = (', drafts %s (%s)' % (out['drafts'], expect['spec'])) if expect['spec'] else ''
        out['message'] = ('gate (%s) passed: %s alias %s, release %s, %d slot(s) of %d, %s token(s) answered%s, '
                          'MainPID %s, NRestarts %s.'
                          % (expect['label'], expect['base'], expect['alias'], expect['release'] or 'n/a',
                             expect['slots'], expect['slot_ctx'], out['completion_tokens'], drafts, out['main_pid'],
                             out['n_restarts']))
    else:
        out['message'] = '\n'.join(out['findings'])
    return out
