# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The verify stage: the runbook's verification battery against a gated llama-server, stdlib only.

The gate proves health, one completion, ``/props``, one global drafts counter and NRestarts. What the
runbook's operator proved by hand after each deploy is here, one named check each, every one of them
skipped with the reason when the live shape (its env file) does not configure the feature:

- ``stream``: an SSE answer yields chunks and ``[DONE]``;
- ``tools``: one tool definition; 200 and a well-formed message from the server's tool-call parser;
- ``reasoning_effort``: each effort's HTTP status, the map written to the client contract (a change
  against the last record is a finding: the fleet's clients configure from it);
- ``vision`` (``VISION=on``): a PNG drawn here (a few shapes) as an ``image_url`` data URI; 200, content,
  and more prompt tokens than the same request without the image (the image was encoded); then one image
  sized for ``IMAGE_MAX_TOKENS`` (the projector type's own limit when 0: 2048x2048 for Qwen-VL), so the peak
  the plan booked is reached under the gate, and the image tokens it sent are in the figures;
- ``slots``: ``PARALLEL`` concurrent echo requests, one pinned to each slot (``id_slot``); with a
  ``SPEC_TYPE`` every slot's own ``timings.draft_n`` must be above 0 - b11434's ``/slots`` carries only
  ``speculative`` (a bool) and ``/metrics`` only global counters, the per-request ``timings`` are the one
  per-slot draft figure (tools/server/server-common.cpp ``server_slot_stats::to_json``);
- ``prefix_cache``: one prompt, then the same conversation carried on, on one slot; the second
  re-prefills at most a few of the first's tokens (``timings.prompt_n`` against the new tokens);
- ``window``: a prompt filling ``window_fraction`` of one slot's context is accepted and answered; in the deep
  mode (``window_deep``, on demand) one slot is filled to ``window_deep_tokens`` (0: all of it but the template
  and the answer) instead - the runbook's 140,069 tokens through one slot - and the prefill rate and its time
  are the check's figures;
- ``drafter``: this start's journal (its ``_SYSTEMD_INVOCATION_ID``) carries b11434's ``adding speculative
  implementation '<type>'`` line for every ``SPEC_TYPE`` entry logged at the unit's ``LOG_VERBOSITY`` (the
  block-diffusion drafters at info, every other type at trace, -lv 4); with a drafter that runs a model, every
  slot drafts (``timings.draft_n``) on a prompt whose tokens repeat no n-gram of ngram-mod's ``n_match``, kept
  short enough that the lookup window always holds prompt text: the drafter drafts, not the n-gram lookup;
- ``defaults``: ``/props`` ``default_generation_settings.params`` (temperature, top_p, top_k, min_p,
  presence_penalty) equal what the env file sets;
- ``isolation``: on each slot a greedy prompt, another long conversation, the greedy prompt again with and
  without the prompt cache: the three answers are identical (a recurrent state that leaks between requests);
- ``settings``: what llama-server was given, where b11434 reports it nowhere in ``/props``: this start's journal
  carries flash-attn (``llama_context: flash_attn = enabled``, every context), the K and V cache types
  (``llama_kv_cache: size = ... K (f16): ... V (f16): ...``, the target's before the drafter's load line, the
  drafter's after it) and ngram-mod's window (``- n_match=24, n_max=64, n_min=48``), and the main process's argv
  (``/proc/<MainPID>/cmdline``) the ``--reasoning-budget``; each equals what the env file sets. b11434 logs those
  lines at trace (-lv 4): at a lower ``LOG_VERBOSITY`` each is reported "not logged at verbosity N", not compared.

A configured feature that does not work (stream, tools, vision, a slot that never drafts, a refused
window, a drafter missing from the journal, a default or a setting that differs, a slot whose answer changed) is
``fail`` and fatal: the caller rolls back. Figures (prefix-cache reuse, a changed effort map) are ``warn``.
``run_verify`` never raises for a failing endpoint, only (VerifyError) for bad input.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import base64
import json
import random
import re
import struct
import threading
import time
import zlib

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError, Endpoint
from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_cpp_rules as rules
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import image_geometry
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_server_answers import (
    CHAT, CHAT_PREFILL, CHAT_TIMED, CHUNK, DETOKENIZE, PROPS, PROPS_DEFAULTS, TOKENIZE, read_answer)
from ansible_collections.dankfleet.llm.plugins.module_utils.serve.llama_server_gate import (
    GateError, error_text, expectations, start_journal)

CHECKS = ('stream', 'tools', 'reasoning_effort', 'vision', 'slots', 'prefix_cache', 'window', 'drafter', 'defaults',
          'isolation', 'settings')
TEXT_MAX = 500            # characters of a server's error message in a finding
WINDOW_MAX = 1 << 21      # tokens of one slot the window check fills when the env file names no CTX_SIZE
CHAT_PATH = 'POST /v1/chat/completions'

DEFAULTS = dict(
    checks=list(CHECKS),
    reasoning_efforts=['low', 'medium', 'high', 'xhigh'],
    window_fraction=1.0,
    window_warn_seconds=0,
    window_deep=False,
    window_deep_tokens=0,
    prefix_cache_max_reprefill=8,
    slot_prompt=('Repeat this line exactly, four times: the quick brown fox jumps over the lazy dog, the quick brown '
                 'fox jumps over the lazy dog, the quick brown fox jumps over the lazy dog.'),
    slot_max_tokens=64,
    request_timeout=300,
    drafter_max_tokens=32,
    isolation_prompt='Write two sentences about a lighthouse keeper who counts the ships passing in a storm.',
    isolation_max_tokens=32,
    isolation_words=600,
)

# The sampler defaults the defaults check compares: /props params key, the env file's name, the inventory
# variable that sets it, its type. The reasoning budget is not among them: b11434's /props does not carry it.
SAMPLER_DEFAULTS = (
    ('temperature', 'TEMPERATURE', 'llama_server_temperature', float),
    ('top_p', 'TOP_P', 'llama_server_top_p', float),
    ('top_k', 'TOP_K', 'llama_server_top_k', int),
    ('min_p', 'MIN_P', 'llama_server_min_p', float),
    ('presence_penalty', 'PRESENCE_PENALTY', 'llama_server_presence_penalty', float),
)
# The settings check: the env file's name, the inventory variable that sets it, where b11434 shows it served. The
# journal's lines are libllama's LLAMA_LOG_INFO (GGML info, which common_log ranks as trace: common/log.cpp
# common_log_get_verbosity) and ngram-mod's SPC_TRC: seen from --log-verbosity 4 (rules.LOG_VERBOSITY_TRACE) only.
SETTINGS = (
    ('FLASH_ATTN', 'llama_server_flash_attn', 'journal'),
    ('CACHE_TYPE_K', 'llama_server_cache_type_k', 'journal'),
    ('CACHE_TYPE_V', 'llama_server_cache_type_v', 'journal'),
    ('SPEC_DRAFT_TYPE_K', 'llama_server_spec_draft_cache_type_k', 'journal'),
    ('SPEC_DRAFT_TYPE_V', 'llama_server_spec_draft_cache_type_v', 'journal'),
    ('SPEC_NGRAM_MOD_N_MATCH', 'llama_server_spec_ngram_mod_n_match', 'journal'),
    ('SPEC_NGRAM_MOD_N_MIN', 'llama_server_spec_ngram_mod_n_min', 'journal'),
    ('SPEC_NGRAM_MOD_N_MAX', 'llama_server_spec_ngram_mod_n_max', 'journal'),
    ('REASONING_BUDGET', 'llama_server_reasoning_budget', 'argv'),
)
# --flash-attn's words (common/arg.cpp is_truthy / is_falsey / is_autoy) -> what llama_context logs
FLASH_ATTN_LOGGED = dict([(w, 'enabled') for w in ('on', 'enabled', 'true', '1')]
                         + [(w, 'disabled') for w in ('off', 'disabled', 'false', '0')]
                         + [(w, 'auto') for w in ('auto', '-1')])
FLASH_ATTN_LINE = re.compile(r'llama_context: flash_attn +=\s*(\S*)')
KV_CACHE_LINE = re.compile(r'llama_kv_cache: size = .*, K \(([^()]*)\): .*, V \(([^()]*)\):')
NGRAM_MOD_LINE = re.compile(r'- n_match=(-?[0-9]{1,9}), n_max=(-?[0-9]{1,9}), n_min=(-?[0-9]{1,9})\s*$')
# common_speculative_init_result's LOG_INF before the draft context: a drafter's model, or MTP on the target's
DRAFT_LOAD_LINES = ("loading draft model '", 'creating MTP draft context against the target model')
ARGV_MAX = 1 << 20        # characters of /proc/<pid>/cmdline read (Linux caps argv near 2 MiB; ours is far below)
PID_MAX = 1 << 22         # the kernel's pid_max ceiling

# /props keeps the sampler's values as float32: a configured 0.7 is served as 0.699999988...
FLOAT32_TOLERANCE = 1e-6

# One tool, the shape every OpenAI client sends.
TOOL = {'type': 'function', 'function': {
    'name': 'get_weather',
    'description': 'The current weather in a city.',
    'parameters': {'type': 'object', 'properties': {'city': {'type': 'string', 'description': 'the city name'}},
                   'required': ['city']}}}

FILLER_WORDS = ('river stone lantern copper meadow window harbor signal orchard ladder velvet candle thunder '
                'saddle compass pepper marble basket feather anchor glacier tunnel violet engine').split()


class VerifyError(Exception):
    """Input the verify stage cannot work from (bad options, an incomplete env file)."""


# --- the image ----------------------------------------------------------------------------------

def _png_chunk(kind, data):
    body = kind + data
    return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body) & 0xffffffff)


def test_image(width=64, height=32):
    """A small RGB PNG drawn here: a white field, three horizontal red bars on the left, a blue disc and a
    green triangle on the right (the runbook's 64x32 crude glyph, made deterministic). Returns bytes.
    Drawn a span at a time (a 2880x2880 image in well under a second): the bars over the disc over the triangle."""
    if width < 16 or height < 8:
        raise VerifyError('the test image needs at least 16x8 pixels, got %dx%d' % (width, height))
    white, red, blue, green = b'\xff\xff\xff', b'\xc8\x1e\x1e', b'\x1e\x3c\xc8', b'\x1e\xa0\x3c'
    rows = []
    cx, cy, r = width * 5 // 8, height // 2, max(2, height // 4)
    bars_end, tri_x0, stripe = width * 3 // 8, width * 13 // 16, max(1, height // 8)
    for y in range(height):
        row = bytearray(white * width)
        dy = y - height // 4
        if dy >= 0 and tri_x0 < width:                  # the triangle: tri_x0 <= x <= tri_x0 + dy
            hi = min(width, tri_x0 + dy + 1)
            row[3 * tri_x0:3 * hi] = green * (hi - tri_x0)
        reach = r * r - (y - cy) ** 2
        if reach >= 0:                                  # the disc: (x - cx)^2 <= reach
            half = _isqrt(reach)
            lo, hi = max(0, cx - half), min(width, cx + half + 1)
            if hi > lo:
                row[3 * lo:3 * hi] = blue * (hi - lo)
        if (y // stripe) % 2 == 1 and y < height * 7 // 8 and bars_end > 0:
            row[0:3 * bars_end] = red * bars_end
        rows.append(b'\x00' + bytes(row))              # filter type 0 (None) for every scanline
    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)   # 8-bit RGB, no interlace
    return (b'\x89PNG\r\n\x1a\n' + _png_chunk(b'IHDR', header)
            + _png_chunk(b'IDAT', zlib.compress(b''.join(rows), 9)) + _png_chunk(b'IEND', b''))


def _isqrt(n):
    """floor(sqrt(n)) for an int n >= 0, exact (Python 3.8 has math.isqrt; this stays 2.7/3.5-safe)."""
    x = int(n ** 0.5)
    while x * x > n:
        x -= 1
    while (x + 1) * (x + 1) <= n:
        x += 1
    return x


# Text a request holds beside the image (the prompt, the chat template): kept out of the slot's context budget
IMAGE_TEXT_RESERVE = 256


def image_plan(env, slot_ctx, env_file='the env file'):
    """The image the vision check sends to reach the plan's peak: the largest square one the projector admits
    (IMAGE_MAX_TOKENS, or the projector type's own limit), capped to one slot's context. {tokens, px,
    image_max_tokens, projector_type, capped, why}; px None (and why) when it cannot be sized."""
    out = {'tokens': None, 'px': None, 'image_max_tokens': None, 'projector_type': None, 'capped': False, 'why': ''}
    limits = {}
    for name in ('IMAGE_MIN_TOKENS', 'IMAGE_MAX_TOKENS'):
        value = _env_number(env, name, int, env_file, 0)
        if value < 0:
            raise VerifyError('%s=%d in %s: 0 (the projector type\'s own) or a positive number of tokens'
                              % (name, value, env_file))
        limits[name] = value
    path = env.get('MMPROJ_PATH', '')
    try:
        facts = gguf_facts(path, header_only=True)
    except (GGUFError, EnvironmentError, ValueError) as exc:
        out['why'] = 'the projector %s could not be read (%s): the large image is not sized' % (
            path or '(MMPROJ_PATH empty)', _short(str(exc), 200))
        return out
    g = image_geometry(facts, limits['IMAGE_MIN_TOKENS'], limits['IMAGE_MAX_TOKENS'])
    out['projector_type'] = (facts.get('mmproj') or {}).get('projector_type')
    if g is None:
        out['why'] = 'projector type %s: its image tokens are not modelled, so only the small image is sent' % (
            out['projector_type'],)
        return out
    tokens = g['image_max_tokens']
    room = slot_ctx - IMAGE_TEXT_RESERVE          # slot_ctx 0: the model decides the context, nothing to cap by
    if slot_ctx > 0 and tokens > room:
        if room < 1:
            out['why'] = 'one slot (%d tokens) holds no image beside the text' % slot_ctx
            return out
        tokens, out['capped'] = room, True
    side = _isqrt(tokens)
    out.update(tokens=side * side, px=side * g['patch_size'] * g['merge'], image_max_tokens=g['image_max_tokens'])
    return out


def data_uri(png):
    return 'data:image/png;base64,' + base64.b64encode(png).decode('ascii')


# --- what the live shape configures ------------------------------------------------------------

def features(env, host='', env_file='the env file'):
    """The live shape's expectations (the gate's own reading of the env file) plus what the checks need."""
    try:
        expect = expectations(env, host=host, label='verify', env_file=env_file)
    except GateError as exc:
        raise VerifyError(str(exc))
    spec = [t for t in expect['spec'].split(',') if t]
    extra = env.get('EXTRA_ARGS', '')
    expect.update(
        spec_types=spec,
        ngram=[t for t in spec if t.startswith('ngram')],
        model_drafters=[t for t in spec if t in rules.CONTEXT_DRAFT_TYPES],
        ngram_n_match=_env_number(env, 'SPEC_NGRAM_MOD_N_MATCH', int, env_file, rules.NGRAM_MOD_N_MATCH_DEFAULT),
        log_verbosity=_env_number(env, 'LOG_VERBOSITY', int, env_file, rules.LOG_VERBOSITY_DEFAULT),
        sampler=dict((name, _env_number(env, name, kind, env_file, None)) for _, name, _, kind in SAMPLER_DEFAULTS
                     if env.get(name, '') != ''),
        reasoning_budget=env.get('REASONING_BUDGET', ''),
        settings=configured_settings(env, spec, env_file),
        jinja='--no-jinja' not in extra.split(),
        mmproj=env.get('MMPROJ_PATH', ''),
    )
    expect['image'] = image_plan(env, expect['slot_ctx'], env_file) if expect['vision'] else None
    return expect


def configured_settings(env, spec, env_file='the env file'):
    """{env name: value} of the SETTINGS the env file sets and the launcher passes: FLASH_ATTN as the word b11434
    logs (enabled, disabled, auto), cache types lower-case, the drafter's only with a drafter that builds a context,
    ngram-mod's only with ngram-mod in SPEC_TYPE, the numbers as ints. VerifyError naming a value llama-server
    would refuse."""
    out = {}
    for name, _, _ in SETTINGS:
        raw = env.get(name, '')
        if raw == '':
            continue
        if name.startswith('SPEC_DRAFT_TYPE_') and not any(t in rules.CONTEXT_DRAFT_TYPES for t in spec):
            continue
        if name.startswith('SPEC_NGRAM_MOD_') and rules.NGRAM_MOD_TYPE not in spec:
            continue
        if name == 'FLASH_ATTN':
            if raw.lower() not in FLASH_ATTN_LOGGED:
                raise VerifyError('FLASH_ATTN=%s in %s: on, off or auto (llama_server_flash_attn)'
                                  % (tr.quote(raw), env_file))
            out[name] = FLASH_ATTN_LOGGED[raw.lower()]
        elif name.startswith('SPEC_NGRAM_MOD_') or name == 'REASONING_BUDGET':
            out[name] = _env_number(env, name, int, env_file, None)
        else:
            out[name] = raw.lower()
    return out


def _env_number(env, name, kind, env_file, default):
    """An env file value as int or float (``default`` when unset or empty); VerifyError naming it otherwise."""
    raw = env.get(name, '')
    if raw == '':
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or value != value or value in (float('inf'), float('-inf')):
        raise VerifyError('%s=%r in %s is not %s: render the env file with the llama_server role'
                          % (name, raw, env_file, 'an integer' if kind is int else 'a finite number'))
    return value


def validate_options(opts):
    problems = []
    unknown = [c for c in opts['checks'] if c not in CHECKS]
    if unknown:
        problems.append('checks names %s; the checks are %s' % (', '.join(unknown), ', '.join(CHECKS)))
    frac = opts['window_fraction']
    if not isinstance(frac, (int, float)) or isinstance(frac, bool) or not 0 < float(frac) <= 1.0 or frac != frac:
        problems.append('window_fraction=%r: a fraction of one slot\'s context, above 0 and at most 1.0' % (frac,))
    for name in ('slot_max_tokens', 'request_timeout', 'drafter_max_tokens', 'isolation_max_tokens',
                 'isolation_words'):
        if opts[name] < 1:
            problems.append('%s=%s: must be 1 or more' % (name, opts[name]))
    deep = opts['window_deep_tokens']
    if not isinstance(opts['window_deep'], bool):
        problems.append('window_deep=%r: true or false' % (opts['window_deep'],))
    if isinstance(deep, bool) or not isinstance(deep, int) or not 0 <= deep <= WINDOW_MAX:
        problems.append('window_deep_tokens=%r: the prompt tokens the deep window fills, 0 (the whole slot) to %d'
                        % (deep, WINDOW_MAX))
    for name in ('prefix_cache_max_reprefill', 'window_warn_seconds'):
        if opts[name] < 0:
            problems.append('%s=%s: 0 or more' % (name, opts[name]))
    efforts = opts['reasoning_efforts']
    if any(not isinstance(e, str) or not e.strip() for e in efforts) or len(set(efforts)) != len(efforts):
        problems.append('reasoning_efforts=%r: distinct non-empty names (low, medium, high, xhigh ...)' % (efforts,))
    if not str(opts['slot_prompt']).strip():
        problems.append('slot_prompt is empty')
    if not str(opts['isolation_prompt']).strip():
        problems.append('isolation_prompt is empty')
    return problems


def _chat(alias, content, max_tokens, **extra):
    body = {'model': alias, 'messages': [{'role': 'user', 'content': content}], 'max_tokens': int(max_tokens),
            'temperature': 0}
    body.update(extra)
    return body


def _short(text, length=TEXT_MAX):
    text = tr.printable(' '.join((text or '').split()))     # one line: a template's error spans several
    return text if len(text) <= length else text[:length - 3] + '...'


def _chat_answer(body, shape=CHAT, what=''):
    """A 200's chat completion read through its shape (ShapeError names the request and the path)."""
    return read_answer(body, shape, CHAT_PATH + (' (%s)' % what if what else ''))


def _message(answer):
    return answer['choices'][0]['message']


def would_send(expect, opts):
    """Every request the checks would make, in words (check mode lists these)."""
    o = dict(DEFAULTS)
    o.update(opts or {})
    base, alias = expect['base'], expect['alias']
    out = []
    for name in CHECKS:
        why = skip_reason(name, expect, o)
        if why:
            out.append('%s: skipped - %s' % (name, why))
            continue
        out.append('%s: %s' % (name, _describe(name, expect, o, base, alias)))
    return out


def _describe(name, expect, o, base, alias):
    chat = 'POST %s/v1/chat/completions (model %s)' % (base, alias)
    if name == 'stream':
        return chat + ' with stream true: SSE chunks, then data: [DONE]'
    if name == 'tools':
        return chat + ' with one tool (%s): 200 and a well-formed message' % TOOL['function']['name']
    if name == 'reasoning_effort':
        return chat + ' once per reasoning_effort %s: the map effort -> HTTP status' % ', '.join(o['reasoning_efforts'])
    if name == 'vision':
        image = expect.get('image') or {}
        large = (' - then a %dx%d PNG (%d image tokens, IMAGE_MAX_TOKENS %d%s): 200, content, the peak the plan booked'
                 % (image['px'], image['px'], image['tokens'], image['image_max_tokens'],
                    ', capped to one slot' if image['capped'] else '')) if image.get('px') else (
            ' - no large image: %s' % image['why'] if image.get('why') else '')
        return (chat + ' with a generated 64x32 PNG (image_url data URI) and the same text without it: 200, content, '
                'more prompt tokens with the image' + large)
    if name == 'slots':
        return ('%d concurrent %s, id_slot 0..%d, an echo prompt, %d tokens%s'
                % (expect['slots'], chat, expect['slots'] - 1, o['slot_max_tokens'],
                   (': each slot timings.draft_n > 0 (SPEC_TYPE=%s)' % expect['spec']) if expect['spec'] else ''))
    if name == 'prefix_cache':
        return chat + (' twice on slot 0, one prompt then that conversation carried on: the second re-prefills at '
                       'most %d of the first\'s tokens' % o['prefix_cache_max_reprefill'])
    if name == 'drafter':
        logged = [t for t in expect['spec_types'] if rules.spec_init_logged(t, expect['log_verbosity'])]
        text = ("journalctl _SYSTEMD_INVOCATION_ID of the unit's current start: a line %s for %s"
                % (rules.SPEC_INIT_LINE % '<type>', ', '.join(logged))) if logged else (
                    'no journal line to read (LOG_VERBOSITY %s logs no init line of %s)'
                    % (expect['log_verbosity'], expect['spec']))
        if expect['model_drafters']:
            text += ('; %d concurrent %s, id_slot 0..%d, a prompt whose tokens (POST %s/tokenize) repeat no %d-gram, '
                     'at most %d tokens: each slot timings.draft_n > 0 (the %s drafter, not the n-gram lookup)'
                     % (expect['slots'], chat, expect['slots'] - 1, base, expect['ngram_n_match'],
                        o['drafter_max_tokens'], ','.join(expect['model_drafters'])))
        return text
    if name == 'defaults':
        return 'GET %s/props: default_generation_settings.params %s equal the env file' % (
            base, ', '.join('%s=%s' % (k, expect['sampler'][e]) for k, e, _, _ in SAMPLER_DEFAULTS if e in expect['sampler']))
    if name == 'settings':
        wanted = expect['settings']
        logged = expect['log_verbosity'] >= rules.LOG_VERBOSITY_TRACE
        parts = []
        journal = [n for n in wanted if _source(n) == 'journal']
        if journal and logged:
            parts.append("journalctl _SYSTEMD_INVOCATION_ID of the unit's current start: its flash_attn, KV cache and "
                         "ngram-mod lines equal %s" % ', '.join('%s=%s' % (n, wanted[n]) for n in journal))
        elif journal:
            parts.append('%s not logged at verbosity %s' % (', '.join(journal), expect['log_verbosity']))
        if 'REASONING_BUDGET' in wanted:
            parts.append('/proc/<MainPID>/cmdline: --reasoning-budget %s' % wanted['REASONING_BUDGET'])
        return '; '.join(parts)
    if name == 'isolation':
        return ('on each of slot 0..%d: %s greedy (temperature 0, seed fixed), a %d-word conversation, the greedy '
                'prompt again, then again with cache_prompt false: the three answers identical'
                % (expect['slots'] - 1, chat, o['isolation_words']))
    if o['window_deep']:
        return ('POST %s/tokenize to size the prompt, then %s on slot 0 with a prompt of %s (deep): accepted, '
                'answered, the prefill rate and its time recorded'
                % (base, chat, ('%d tokens' % o['window_deep_tokens']) if o['window_deep_tokens'] else
                   'all of one slot (%s tokens) but the template and the answer' % (expect['slot_ctx'] or 'n_ctx from /props')))
    return ('POST %s/tokenize to size the prompt, then %s with a prompt of %s of one slot (%s tokens): accepted and '
            'answered' % (base, chat, o['window_fraction'], expect['slot_ctx'] or 'n_ctx from /props'))


def skip_reason(name, expect, o):
    """Why a check does not apply to this shape ('' when it does)."""
    if name not in o['checks']:
        return 'not in the checks asked for'
    if name == 'vision' and not expect['vision']:
        return 'VISION=off: no mmproj configured (llama_server_vision false)'
    if name == 'tools' and not expect['jinja']:
        return 'EXTRA_ARGS has --no-jinja: the server has no tool-call parser'
    if name == 'drafter' and not expect['spec_types']:
        return 'no SPEC_TYPE: no drafter configured (llama_server_spec_type is empty)'
    if name == 'drafter' and not expect['model_drafters'] and not any(
            rules.spec_init_logged(t, expect['log_verbosity']) for t in expect['spec_types']):
        return ('SPEC_TYPE=%s runs no model drafter and b11434 logs its init line at trace only (LOG_VERBOSITY %s; '
                'llama_server_log_verbosity 4 shows it): the slots check proves it drafts'
                % (expect['spec'], expect['log_verbosity']))
    if name == 'settings':
        wanted = expect.get('settings') or {}
        if not wanted:
            return 'the env file sets none of %s: llama.cpp\'s own apply' % ', '.join(n for n, _, _ in SETTINGS)
        if expect['log_verbosity'] < rules.LOG_VERBOSITY_TRACE and all(_source(n) == 'journal' for n in wanted):
            return '%s not logged at verbosity %s (b11434 logs them at trace; llama_server_log_verbosity 4 shows them)' % (
                ', '.join(sorted(wanted)), expect['log_verbosity'])
    if name == 'defaults' and not expect['sampler']:
        return 'the env file sets no sampler default (%s): llama.cpp\'s own apply' % ', '.join(
            e for _, e, _, _ in SAMPLER_DEFAULTS)
    if name == 'reasoning_effort':
        if not expect['jinja']:
            return 'EXTRA_ARGS has --no-jinja: reasoning_effort reaches only a jinja template'
        if not o['reasoning_efforts']:
            return 'no efforts to ask (llama_server_verify_reasoning_efforts is empty)'
    return ''


# --- the checks ---------------------------------------------------------------------------------

def read_sse(body):
    """(chunks with at least one choice, whether ``data: [DONE]`` closed the stream, malformed events, the first
    malformed event's refusal). Every event is read through the chunk's shape: JSON without ``choices`` (an
    error event), text that is not JSON and anything after [DONE] are malformed; the usage chunk's
    ``"choices": []`` is neither a chunk nor malformed."""
    chunks, done, bad, first = 0, False, 0, ''
    for number, line in enumerate(body.splitlines(), 1):
        if not line.startswith('data:'):
            continue
        data = line[5:].strip()
        problem = ''
        if done:
            problem = 'line %d: an event after data: [DONE]' % number
        elif data == '[DONE]':
            done = True
        else:
            try:
                chunks += 1 if read_answer(data, CHUNK, 'the SSE event on line %d' % number)['choices'] else 0
            except tr.ShapeError as exc:
                problem = str(exc)
        if problem:
            bad += 1
            first = first or problem
    return chunks, done, bad, first


def parse_sse(body):
    """(chunks with choices, whether ``data: [DONE]`` closed the stream, malformed events): read_sse's counts."""
    return read_sse(body)[:3]


def check_stream(ep, expect, o):
    code, body = ep.call('/v1/chat/completions', _chat(expect['alias'], 'Count from one to five.', 8, stream=True),
                         timeout=o['request_timeout'])
    if code != 200:
        return 'fail', 'the stream answered HTTP %s: %s' % (code, _short(error_text(body))), {'status': code}
    chunks, done, bad, first = read_sse(body)
    figures = {'status': code, 'chunks': chunks, 'done': done}
    if chunks < 1 or not done or bad:
        return 'fail', ('the SSE answer had %d chunk(s), %d malformed event(s) and %s: a client that streams gets '
                        'no answer%s' % (chunks, bad, 'data: [DONE]' if done else 'no data: [DONE]',
                                         (' - first: %s' % _short(first, 300)) if first else '')), figures
    return 'pass', '%d chunk(s), then [DONE]' % chunks, figures


def tool_message_problems(msg, tool=TOOL['function']['name']):
    """What is malformed in an answer's message to a request offering one tool ([] when well-formed): each tool
    call names that tool with JSON-object arguments; without a call, the content is a string."""
    calls = msg.get('tool_calls') or []
    problems = []
    if not isinstance(calls, list):
        problems.append('tool_calls is %s, not a list' % tr.kind(calls))
        calls = []
    for i, call in enumerate(calls):
        fn = call.get('function') if isinstance(call, dict) else None
        name = fn.get('name') if isinstance(fn, dict) else None
        if name != tool:
            problems.append('tool_calls[%d] names %s, not the one tool offered' % (i, tr.quote(name)))
            continue
        try:
            args = tr.load_json(fn.get('arguments'), 'tool_calls[%d].function.arguments' % i)
        except tr.ShapeError:
            args = None
        if not isinstance(args, dict):
            problems.append('tool_calls[%d].function.arguments is not a JSON object: %s' % (i, tr.quote(fn.get('arguments'))))
    if not calls and not isinstance(msg.get('content'), str):
        problems.append('neither tool_calls nor a content string')
    return problems


def check_tools(ep, expect, o):
    body = _chat(expect['alias'], 'What is the weather in Oslo right now? Use the tool.', 64, tools=[TOOL])
    code, text = ep.call('/v1/chat/completions', body, timeout=o['request_timeout'])
    figures = {'status': code}
    if code != 200:
        return 'fail', ('a request with one tool definition answered HTTP %s: %s - the chat template or the '
                        'tool-call parser does not take tools' % (code, _short(error_text(text)))), figures
    try:
        answer = _chat_answer(text, what='tools')
    except tr.ShapeError as exc:
        return 'fail', 'HTTP 200 but not a chat completion: %s' % exc, figures
    msg = _message(answer)
    problems = tool_message_problems(msg)
    calls = msg.get('tool_calls') or []
    figures.update(tool_calls=len(calls), finish_reason=answer['choices'][0].get('finish_reason'))
    if problems:
        return 'fail', 'the tool-call parser answered a malformed message: %s' % '; '.join(problems), figures
    return 'pass', ('%d tool call(s)' % len(calls)) if calls else 'a content answer (no call)', figures


def check_reasoning_effort(ep, expect, o):
    efforts = {}
    for effort in o['reasoning_efforts']:
        code, _ = ep.call('/v1/chat/completions', _chat(expect['alias'], 'Say ok.', 4, reasoning_effort=effort),
                          timeout=o['request_timeout'])
        efforts[effort] = code
    figures = {'efforts': efforts}
    refused = [e for e, c in efforts.items() if c != 200]
    text = ', '.join('%s %s' % (e, c) for e, c in efforts.items())
    if refused:
        return 'pass', 'recorded for the client contract: %s (clients must not send %s)' % (text, ', '.join(refused)), figures
    return 'pass', 'recorded for the client contract: %s' % text, figures


def check_vision(ep, expect, o):
    text = 'Describe the shapes and colours in this image in one sentence.'
    png = test_image()
    with_image = [{'type': 'text', 'text': text}, {'type': 'image_url', 'image_url': {'url': data_uri(png)}}]
    code, body = ep.call('/v1/chat/completions', _chat(expect['alias'], with_image, 16), timeout=o['request_timeout'])
    figures = {'status': code, 'image_bytes': len(png)}
    if code != 200:
        return 'fail', ('an image request answered HTTP %s: %s - the projector (MMPROJ_PATH %s) is not serving images'
                        % (code, _short(error_text(body)), expect['mmproj'] or '?')), figures
    answer = _chat_answer(body, what='the image')
    msg = _message(answer)
    content = (msg.get('content') or '') + (msg.get('reasoning_content') or '')
    base_code, base_body = ep.call('/v1/chat/completions', _chat(expect['alias'], text, 16), timeout=o['request_timeout'])
    with_tokens, completion = answer['usage']['prompt_tokens'], answer['usage']['completion_tokens']
    without = _chat_answer(base_body, what='the text alone')['usage']['prompt_tokens'] if base_code == 200 else 0
    figures.update(prompt_tokens_image=with_tokens, prompt_tokens_text=without, content_chars=len(content))
    if not content.strip() or completion < 1:
        return 'fail', 'the image request answered 200 with no content (%d completion token(s))' % completion, figures
    if base_code != 200 or with_tokens <= without:
        return 'fail', ('the image request counted %d prompt tokens, the same text without it %d (HTTP %s): the image '
                        'was not encoded' % (with_tokens, without, base_code)), figures
    small = '%d prompt tokens with the image, %d without; %d characters answered' % (with_tokens, without, len(content))
    figures['image_tokens_small'] = with_tokens - without
    image = expect.get('image') or {}
    if not image.get('px'):
        figures['image_tokens'] = with_tokens - without
        return 'pass', small + ('; %s' % image['why'] if image.get('why') else ''), figures
    # the largest image the limit admits: what grows the projector's compute to the peak the plan booked
    png = test_image(image['px'], image['px'])
    large = [{'type': 'text', 'text': text}, {'type': 'image_url', 'image_url': {'url': data_uri(png)}}]
    code, body = ep.call('/v1/chat/completions', _chat(expect['alias'], large, 16), timeout=o['request_timeout'])
    figures.update(image_px=image['px'], image_tokens_planned=image['tokens'], image_max_tokens=image['image_max_tokens'],
                   image_bytes_large=len(png), status_large=code)
    if code != 200:
        return 'fail', ('the %dx%d image (%d tokens, the most IMAGE_MAX_TOKENS %d admits) answered HTTP %s: %s - the '
                        'projector cannot reach the peak the plan booked; lower llama_server_image_max_tokens or give its '
                        'device room' % (image['px'], image['px'], image['tokens'], image['image_max_tokens'], code,
                                         _short(error_text(body)))), figures
    answer = _chat_answer(body, what='the large image')
    large_tokens = answer['usage']['prompt_tokens']
    figures.update(image_tokens=large_tokens - without, prompt_tokens_large=large_tokens)
    if large_tokens <= with_tokens:
        return 'fail', ('the %dx%d image counted %d prompt tokens, no more than the 64x32 one (%d): it was not encoded '
                        'at its size' % (image['px'], image['px'], large_tokens, with_tokens)), figures
    return 'pass', small + '; the %dx%d image: %d image tokens sent (IMAGE_MAX_TOKENS %d%s)' % (
        image['px'], image['px'], large_tokens - without, image['image_max_tokens'],
        ', capped to one slot' if image['capped'] else ''), figures


def per_slot_drafts(ep, expect, o, prompts, max_tokens, shape, label, problems):
    """One chat request per slot at once (``prompts[i]`` pinned to slot i with id_slot), each answer read through
    shape: a row per slot with its status, completion tokens and its own draft figures (b11434 writes draft_n only
    when the slot drafted: absent is its 0). A slot that answered nothing usable adds its problem and keeps a row
    of None figures."""
    results = [None] * expect['slots']

    def one(i):
        results[i] = ep.call('/v1/chat/completions', _chat(expect['alias'], prompts[i], max_tokens, id_slot=i),
                             timeout=o['request_timeout'])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(expect['slots'])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = []
    for i, result in enumerate(results):
        code, body = result if result is not None else (-1, 'no answer')
        row = {'slot': i, 'status': code, 'completion_tokens': None, 'draft_n': None, 'draft_n_accepted': None}
        rows.append(row)
        if code != 200:
            problems.append('slot %d answered HTTP %s: %s' % (i, code, _short(error_text(body), 160)))
            continue
        try:
            answer = _chat_answer(body, shape, '%sslot %d' % (label, i))
        except tr.ShapeError as exc:
            problems.append('slot %d: %s' % (i, exc))
            continue
        timings = answer.get('timings') or {}
        row.update(completion_tokens=answer['usage']['completion_tokens'], draft_n=timings.get('draft_n', 0),
                   draft_n_accepted=timings.get('draft_n_accepted', 0))
    return rows


def check_slots(ep, expect, o):
    n = expect['slots']
    problems = []
    # with a drafter the per-request timings are the one per-slot draft figure: required then
    per_slot = per_slot_drafts(ep, expect, o, [o['slot_prompt']] * n, o['slot_max_tokens'],
                               CHAT_TIMED if expect['spec'] else CHAT, '', problems)
    for row in per_slot:
        if expect['spec'] and row['draft_n'] is not None and row['draft_n'] < 1:
            problems.append('slot %d drafted 0 tokens in %d generated (SPEC_TYPE=%s): that slot runs at the '
                            'autoregressive rate' % (row['slot'], row['completion_tokens'], expect['spec']))
    figures = {'slots': per_slot}
    if expect['ngram']:
        figures['accepted_on_echo'] = sum(r['draft_n_accepted'] or 0 for r in per_slot)
    if problems:
        return 'fail', '; '.join(problems), figures
    if expect['spec']:
        return 'pass', 'every slot drafted: %s' % ', '.join(
            'slot %d %d/%d accepted' % (r['slot'], r['draft_n_accepted'], r['draft_n']) for r in per_slot), figures
    return 'pass', '%d concurrent request(s) answered, one per slot (no SPEC_TYPE: drafts not asked)' % n, figures


def filler(words):
    """Deterministic prose-like filler of ``words`` words (no repeated sentence an n-gram drafter could echo)."""
    out = []
    state = 12345
    for i in range(int(words)):
        state = (state * 1103515245 + 12345) & 0x7fffffff
        out.append(FILLER_WORDS[(state >> 8) % len(FILLER_WORDS)])
        if i % 12 == 11:
            out[-1] += '.'
    return ' '.join(out)


def _tokens(ep, text, timeout):
    return ep.post_json('/tokenize', {'content': text}, timeout=timeout, shape=TOKENIZE)['tokens']


def check_prefix_cache(ep, expect, o):
    """One prompt, then the same conversation carried on (the first answer and one more question) on the same
    slot: everything the first request prefilled is reused, only the new turn's tokens are prefilled. (A
    verbatim repeat cannot show reuse on a hybrid model with --ctx-checkpoints 0: re-evaluating the last
    prompt token needs a rollback the recurrent state cannot make, so it is always prefilled in full.)"""
    prompt = 'Summarise this list in one word: ' + filler(160)
    code, body = ep.call('/v1/chat/completions', _chat(expect['alias'], prompt, 1, id_slot=0),
                         timeout=o['request_timeout'])
    if code != 200:
        return 'fail', 'the first prompt answered HTTP %s: %s' % (code, _short(error_text(body))), {}
    first = _chat_answer(body, CHAT_PREFILL, 'the first prompt')
    answer = _message(first).get('content') or ''
    turn = {'model': expect['alias'], 'max_tokens': 1, 'temperature': 0, 'id_slot': 0,
            'messages': [{'role': 'user', 'content': prompt}, {'role': 'assistant', 'content': answer},
                         {'role': 'user', 'content': 'And in one more word?'}]}
    code, body = ep.call('/v1/chat/completions', turn, timeout=o['request_timeout'])
    if code != 200:
        return 'fail', 'the carried-on conversation answered HTTP %s: %s' % (code, _short(error_text(body))), {}
    second = _chat_answer(body, CHAT_PREFILL, 'the carried-on conversation')
    first_tokens, second_tokens = first['usage']['prompt_tokens'], second['usage']['prompt_tokens']
    new = max(0, second_tokens - first_tokens)
    prefilled = second['timings']['prompt_n']
    again = max(0, prefilled - new)
    figures = {'first_prefilled': first['timings']['prompt_n'], 'second_prompt_tokens': second_tokens,
               'second_prefilled': prefilled, 'second_cached': second['timings'].get('cache_n'), 'new_tokens': new,
               're_prefilled': again}
    if again > o['prefix_cache_max_reprefill']:
        return 'warn', ('carrying one conversation on re-prefilled %d of its %d earlier tokens (%d new; at most %d '
                        'expected): the prefix cache is not reused - read the journal for "forcing full prompt '
                        're-processing"' % (again, first_tokens, new, o['prefix_cache_max_reprefill'])), figures
    return 'pass', 're-prefilled %d of %d earlier tokens carrying the conversation on (%d new prefilled)' % (
        again, first_tokens, new), figures


def window_slot(ep, expect):
    """(the context of one slot the window check fills, a problem or ''): CTX_SIZE / PARALLEL from the env
    file, which /props must confirm; /props n_ctx alone only when the env file names no CTX_SIZE, and never
    beyond WINDOW_MAX (the filler is sized from it)."""
    configured = expect['slot_ctx']
    code, body = ep.call('/props', timeout=30)
    if code != 200:
        return configured, 'GET /props answered HTTP %s: %s' % (code, _short(error_text(body), 200))
    served = read_answer(body, PROPS, 'GET /props')['default_generation_settings']['n_ctx']
    if configured and served != configured:
        return configured, ('/props n_ctx %d per slot, CTX_SIZE / PARALLEL %d: the server does not run the window '
                            'the env file configures' % (served, configured))
    if not configured and served > WINDOW_MAX:
        return served, ('/props n_ctx %d per slot is beyond the %d tokens this check fills: set CTX_SIZE in the env '
                        'file (llama_server_ctx_size)' % (served, WINDOW_MAX))
    return served, ''


def check_window(ep, expect, o):
    slot_ctx, problem = window_slot(ep, expect)
    if problem:
        return 'fail', problem, {'slot_ctx': slot_ctx}
    if slot_ctx < 64:
        return 'fail', 'one slot holds %d tokens (CTX_SIZE / PARALLEL, or /props): no window to prove' % slot_ctx, {}
    answer_tokens = 4
    # the chat template's own tokens around one message, measured: a one-word request's prompt minus the word
    code, body = ep.call('/v1/chat/completions', _chat(expect['alias'], 'ok', 1), timeout=o['request_timeout'])
    if code != 200:
        return 'fail', 'a one-word request answered HTTP %s: %s' % (code, _short(error_text(body))), {}
    measured = _chat_answer(body, what='one word')['usage']['prompt_tokens']
    overhead = max(0, measured - len(_tokens(ep, 'ok', o['request_timeout']))) + 4
    room = slot_ctx - overhead - answer_tokens
    deep = bool(o['window_deep'])
    if deep:
        target = o['window_deep_tokens'] or room
        share = 'deep, %d of %d' % (target, slot_ctx)
        if target > room:
            return 'fail', ('window_deep_tokens %d is beyond one slot: %d tokens per slot hold %d of prompt beside the '
                            'template (%d) and the answer (%d) - lower llama_server_verify_window_deep_tokens, or 0 '
                            'for the whole slot' % (target, slot_ctx, room, overhead, answer_tokens)), {
                                'mode': 'deep', 'slot_ctx': slot_ctx, 'target_tokens': target}
    else:
        target = min(int(slot_ctx * float(o['window_fraction'])) - overhead - answer_tokens, room)
        share = '%s of %d' % (o['window_fraction'], slot_ctx)
    if target < 16:
        return 'fail', 'a %s-token window leaves no room for a prompt of 16 tokens' % share, {}
    # a filler word is at least half a token in any tokenizer: never more words than that needs
    most_words = 2 * target + 64
    sample = filler(200)
    per_word = max(0.5, len(_tokens(ep, sample, o['request_timeout'])) / 200.0)
    words = min(most_words, int(target / per_word * 1.1) + 50)
    text = filler(words)
    ids = _tokens(ep, text, o['request_timeout'])
    for _ in range(3):                      # a tokenizer denser than the sample: grow until it covers the target
        if len(ids) >= target or words >= most_words:
            break
        words = min(most_words, int(words * 1.5) + 50)
        text = filler(words)
        ids = _tokens(ep, text, o['request_timeout'])
    if len(ids) > target:
        text = ep.post_json('/detokenize', {'tokens': ids[:target]}, timeout=o['request_timeout'],
                            shape=DETOKENIZE)['content']
    start = time.time()
    # cache_prompt false: the deep figure is a whole prefill, never a prefix an earlier request left in the slot
    code, body = ep.call('/v1/chat/completions', _chat(expect['alias'], text, answer_tokens, id_slot=0,
                                                       **({'cache_prompt': False} if deep else {})),
                         timeout=o['request_timeout'])
    seconds = round(time.time() - start, 2)
    figures = {'mode': 'deep' if deep else 'fraction', 'status': code, 'slot_ctx': slot_ctx,
               'fraction': None if deep else o['window_fraction'], 'target_tokens': target, 'prompt_tokens': None,
               'seconds': seconds, 'prefill_tok_s': None, 'prefill_seconds': None}
    if code != 200:
        return 'fail', ('a prompt of ~%d tokens (%s-token slot) was refused: HTTP %s %s'
                        % (target, share, code, _short(error_text(body)))), figures
    answer = _chat_answer(body, what='the window')
    usage, timings = answer['usage'], answer.get('timings') or {}
    prompt_tokens, completion = usage['prompt_tokens'], usage['completion_tokens']
    figures.update(prompt_tokens=prompt_tokens, prefill_tok_s=round(prompt_tokens / seconds, 1) if seconds > 0 else None)
    if timings.get('prompt_ms') and timings.get('prompt_n'):
        # the server's own prefill clock (timings.prompt_ms): the rate without the answer's decode and the HTTP
        figures.update(prefill_seconds=round(timings['prompt_ms'] / 1000.0, 2),
                       prefill_tok_s=round(timings['prompt_n'] * 1000.0 / timings['prompt_ms'], 1))
    if completion < 1 or prompt_tokens < target * 0.9:
        return 'fail', ('a prompt of ~%d tokens answered with %d prompt / %d completion tokens: the window is not '
                        'what the slot declares' % (target, prompt_tokens, completion)), figures
    why = '%d prompt tokens (%s) prefilled and answered in %.1f s' % (prompt_tokens, share, seconds)
    if figures['prefill_tok_s'] is not None:
        clock = ', %.1f s' % figures['prefill_seconds'] if figures['prefill_seconds'] is not None else ''
        why += ' (prefill %s tok/s%s)' % (figures['prefill_tok_s'], clock)
    if o['window_warn_seconds'] and seconds > o['window_warn_seconds']:
        return 'warn', why + ' - slower than window_warn_seconds %s' % o['window_warn_seconds'], figures
    return 'pass', why, figures


# --- drafter: the journal's init lines, and drafts where no n-gram lookup can draft ------------------

def spec_init_lines(journal, spec_types, verbosity):
    """(found, missing, unlogged): the SPEC_TYPE entries whose init line is in this start's journal, those
    b11434 logs at ``verbosity`` but the journal lacks, and those it logs only at a higher verbosity."""
    lines = (journal or '').splitlines()
    found, missing, unlogged = [], [], []
    for t in spec_types:
        if not rules.spec_init_logged(t, verbosity):
            unlogged.append(t)
        elif any(rules.SPEC_INIT_LINE % t in line for line in lines):
            found.append(t)
        else:
            missing.append(t)
    return found, missing, unlogged


def novel_prose(words, seed):
    """``words`` filler words in which no two consecutive words follow each other twice (every word bigram is
    new), seeded: a text that repeats no n-gram longer than two words' tokens. Up to 552 words (24 x 23 pairs)."""
    rng = random.Random(seed)
    used, out = set(), [rng.choice(FILLER_WORDS)]
    while len(out) < int(words):
        options = [w for w in FILLER_WORDS if w != out[-1] and (out[-1], w) not in used]
        if not options:
            break
        out.append(rng.choice(options))
        used.add((out[-2], out[-1]))
    return ' '.join(out)


def repeated_ngram(tokens, n):
    """The first position at which an n-gram of ``tokens`` repeats an earlier one, or -1."""
    seen = set()
    for i in range(len(tokens) - n + 1):
        key = tuple(tokens[i:i + n])
        if key in seen:
            return i
        seen.add(key)
    return -1


def _seed():
    """A new seed per run: the prompt's n-grams are new to ngram-mod's table, which lives as long as the server."""
    return int(time.time() * 1000000) & 0x7fffffff


def _overhead(ep, expect, o):
    """Prompt tokens the chat template adds around one user message: a one-word request's minus the word's."""
    code, body = ep.call('/v1/chat/completions', _chat(expect['alias'], 'ok', 1), timeout=o['request_timeout'])
    if code != 200:
        raise VerifyError('a one-word request answered HTTP %s: %s' % (code, _short(error_text(body))))
    measured = _chat_answer(body, what='one word')['usage']['prompt_tokens']
    return max(0, measured - len(_tokens(ep, 'ok', o['request_timeout'])))


def _prompt_budget(expect):
    """Tokens a check's own prompt may take of one slot: half of it (the template, the answer and a carried-on
    turn fit in the rest); 0 when the env file names no CTX_SIZE (then the server's own limit answers)."""
    return expect['slot_ctx'] // 2 if expect['slot_ctx'] else 0


def _fit(ep, make, words, budget, o):
    """make(words), shortened until its tokens (through /tokenize) fit budget: a check never sends a prompt the
    slot the env file configures cannot hold."""
    text = make(words)
    for _ in range(4):
        count = len(_tokens(ep, text, o['request_timeout']))
        if not budget or count <= budget:
            return text
        words = max(8, int(words * budget / float(count) * 0.9))
        text = make(words)
    raise VerifyError('a prompt of %d words is still %d tokens, above the %d tokens half a slot holds: the '
                      'tokenizer spends more than it should on plain words' % (words, count, budget))


def drafter_prompts(ep, expect, o):
    """One prompt per slot whose text (read back through /tokenize) repeats no n-gram of ``n_match`` tokens, and
    the max_tokens that keeps ngram-mod's lookup window (the last n_match tokens) on that new text: the model
    drafter drafts there, the lookup cannot. Raises VerifyError when no such prompt can be made."""
    n = max(2, expect['ngram_n_match'])
    overhead = _overhead(ep, expect, o) if expect['ngram'] else 0
    max_tokens = o['drafter_max_tokens']
    if expect['ngram']:
        max_tokens = max(2, min(max_tokens, n - overhead - 1))
    prompts = []
    budget = _prompt_budget(expect)
    for slot in range(expect['slots']):
        for attempt in range(3):
            seed = _seed() + 7919 * slot + attempt
            text = _fit(ep, lambda words, seed=seed: novel_prose(words, seed), 200, budget, o)
            at = repeated_ngram(_tokens(ep, text, o['request_timeout']), n)
            if at < 0:
                break
        else:
            raise VerifyError('three prompts of new word pairs each repeated a %d-token n-gram (the last at token '
                              '%d): this tokenizer cannot make a prompt ngram-mod never matches' % (n, at))
        prompts.append('Continue this list with twenty words of your own, in a new order: ' + text)
    return prompts, max_tokens, overhead


def check_drafter(ep, expect, o):
    figures = {'journal': None, 'found': [], 'missing': [], 'unlogged': [], 'slots': []}
    problems, notes = [], []
    found, missing, unlogged = spec_init_lines('', [], 0)
    if any(rules.spec_init_logged(t, expect['log_verbosity']) for t in expect['spec_types']):
        run_command = o.get('run_command')
        journal, why = start_journal(run_command, o['service']) if run_command else ('', 'no journal reader given')
        if why:
            figures['journal'] = why
            problems.append("this start's journal cannot be read (%s): the drafter's init lines are unproven" % why)
        else:
            found, missing, unlogged = spec_init_lines(journal, expect['spec_types'], expect['log_verbosity'])
            figures['journal'] = '%d line(s)' % len(journal.splitlines())
            for t in missing:
                problems.append('SPEC_TYPE names %s but this start\'s journal of %s has no "%s" line: llama-server '
                                'did not set that implementation up' % (t, o['service'], rules.SPEC_INIT_LINE % t))
    else:
        unlogged = list(expect['spec_types'])
    if unlogged:
        notes.append('%s log(s) the init line at trace only (LOG_VERBOSITY %s; llama_server_log_verbosity 4 shows it)'
                     % (', '.join(unlogged), expect['log_verbosity']))
    figures.update(found=found, missing=missing, unlogged=unlogged)
    if expect['model_drafters']:
        try:
            prompts, max_tokens, overhead = drafter_prompts(ep, expect, o)
        except VerifyError as exc:
            problems.append(str(exc))
            return 'fail', '; '.join(problems), figures
        figures.update(n_match=expect['ngram_n_match'], max_tokens=max_tokens, template_tokens=overhead)
        figures['slots'] = per_slot_drafts(ep, expect, o, prompts, max_tokens, CHAT_TIMED, 'drafter ', problems)
        for row in figures['slots']:
            i = row['slot']
            if row['draft_n'] is None:
                continue
            if row['draft_n'] < 1 and row['completion_tokens'] > 1:
                problems.append('slot %d drafted 0 tokens in %d generated on a prompt no %d-gram lookup can match: '
                                'the %s drafter does not draft (on an echo prompt the n-gram lookup drafts alone)'
                                % (i, row['completion_tokens'], expect['ngram_n_match'],
                                   ','.join(expect['model_drafters'])))
            elif row['completion_tokens'] <= 1:
                problems.append('slot %d answered %d token(s): nothing to draft for' % (i, row['completion_tokens']))
    if problems:
        return 'fail', '; '.join(problems + notes), figures
    parts = []
    if found:
        parts.append('init line(s) of %s in this start\'s journal' % ', '.join(found))
    if expect['model_drafters']:
        parts.append('%s drafted on every slot where no n-gram lookup can: %s' % (
            ','.join(expect['model_drafters']), ', '.join('slot %d %d/%d accepted' % (
                r['slot'], r['draft_n_accepted'], r['draft_n']) for r in figures['slots'])))
    return 'pass', '; '.join(parts + notes), figures


# --- defaults: /props against the env file -----------------------------------------------------------

def same_default(kind, configured, served):
    if kind is int:
        return int(configured) == served
    return abs(float(served) - float(configured)) <= FLOAT32_TOLERANCE * max(1.0, abs(float(configured)))


def check_defaults(ep, expect, o):
    code, body = ep.call('/props', timeout=30)
    if code != 200:
        return 'fail', 'GET /props answered HTTP %s: %s' % (code, _short(error_text(body), 200)), {'status': code}
    params = read_answer(body, PROPS_DEFAULTS, 'GET /props')['default_generation_settings']['params']
    figures, problems = {}, []
    for key, name, var, kind in SAMPLER_DEFAULTS:
        if name not in expect['sampler']:
            continue
        configured, served = expect['sampler'][name], params[key]
        figures[key] = {'configured': configured, 'served': served}
        if not same_default(kind, configured, served):
            problems.append('%s: /props serves %s, the env file sets %s=%s (%s)' % (key, served, name, configured, var))
    notes = []
    if expect['reasoning_budget'] != '':
        notes.append('REASONING_BUDGET=%s not compared: b11434\'s /props does not carry it'
                     % tr.printable(expect['reasoning_budget'], limit=40))
    if problems:
        return 'fail', ('the server\'s sampler defaults are not the inventory\'s - %s: a client that sends none gets '
                        'these' % '; '.join(problems)), figures
    return 'pass', '; '.join(['%s as set' % ', '.join('%s %s' % (k, v['served']) for k, v in figures.items())]
                             + notes), figures


# --- isolation: a slot answers a greedy prompt the same after another conversation ran on it ----------

def first_difference(a, b):
    """The first character position at which a and b differ, or -1 when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return -1 if len(a) == len(b) else min(len(a), len(b))


def _greedy(ep, expect, o, slot, **extra):
    body = _chat(expect['alias'], o['isolation_prompt'], o['isolation_max_tokens'], id_slot=slot, seed=42,
                 **extra)
    code, text = ep.call('/v1/chat/completions', body, timeout=o['request_timeout'])
    if code != 200:
        raise VerifyError('slot %d: the greedy prompt answered HTTP %s: %s' % (slot, code, _short(error_text(text), 160)))
    msg = _message(_chat_answer(text, what='isolation slot %d' % slot))
    return (msg.get('reasoning_content') or '') + (msg.get('content') or '')


def _token_at(ep, text, char, o):
    """The index of the token holding character ``char`` of text (its tokens through /tokenize)."""
    return len(_tokens(ep, text[:char], o['request_timeout'])) if char > 0 else 0


def check_isolation(ep, expect, o):
    figures = {'slots': []}
    problems = []
    try:
        listing = _fit(ep, filler, o['isolation_words'], _prompt_budget(expect), o)
    except VerifyError as exc:
        return 'fail', str(exc), figures
    conversation = [{'role': 'user', 'content': 'Read this list and remember it: ' + listing},
                    {'role': 'assistant', 'content': 'I have read the list.'},
                    {'role': 'user', 'content': 'Which word came first, and which one came most often?'}]
    for slot in range(expect['slots']):
        try:
            first = _greedy(ep, expect, o, slot)
            body = {'model': expect['alias'], 'messages': conversation, 'max_tokens': 16, 'temperature': 0.8,
                    'id_slot': slot}
            code, text = ep.call('/v1/chat/completions', body, timeout=o['request_timeout'])
            if code != 200:
                raise VerifyError('slot %d: the other conversation answered HTTP %s: %s'
                                  % (slot, code, _short(error_text(text), 160)))
            again = _greedy(ep, expect, o, slot)
            uncached = _greedy(ep, expect, o, slot, cache_prompt=False)
        except VerifyError as exc:
            problems.append(str(exc))
            figures['slots'].append({'slot': slot, 'identical': None})
            continue
        row = {'slot': slot, 'chars': len(first), 'identical': True}
        for label, answer in (('after another conversation', again), ('without the prompt cache', uncached)):
            at = first_difference(first, answer)
            if at >= 0:
                row['identical'] = False
                token = _token_at(ep, first, at, o)
                row.setdefault('differs', []).append({'when': label, 'char': at, 'token': token})
                problems.append('slot %d answered the same greedy prompt differently %s: first difference at '
                                'character %d (token %d) - %s vs %s' % (
                                    slot, label, at, token, tr.quote(first[at:at + 24]), tr.quote(answer[at:at + 24])))
        figures['slots'].append(row)
    if problems:
        return 'fail', '; '.join(problems) + ': state leaks between requests on that slot', figures
    return 'pass', 'every slot answered the greedy prompt identically after another conversation and without the cache ' \
        '(%s)' % ', '.join('slot %d %d chars' % (r['slot'], r['chars']) for r in figures['slots']), figures


# --- settings: what this start's journal and argv show llama-server was given --------------------------

def _source(name):
    return next(src for n, _, src in SETTINGS if n == name)


def _var(name):
    return next(var for n, var, _ in SETTINGS if n == name)


def served_settings(journal):
    """What b11434's own lines of one start say it runs with: ``flash_attn`` (one word per context) and
    ``target_flash_attn`` (how many of them came before the drafter's load line), ``target_kv`` and ``draft_kv``
    ((K, V) per KV cache line, before and after the drafter's load line), ``ngram`` ((n_match, n_max, n_min) per
    ngram-mod line) and ``draft_loaded``. Reads any text: a line of another shape is no line."""
    out = {'flash_attn': [], 'target_flash_attn': 0, 'target_kv': [], 'draft_kv': [], 'ngram': [],
           'draft_loaded': False}
    for line in (journal or '').split('\n'):
        if not out['draft_loaded'] and any(marker in line for marker in DRAFT_LOAD_LINES):
            out['draft_loaded'] = True
            continue
        m = FLASH_ATTN_LINE.search(line)
        if m:
            out['flash_attn'].append(m.group(1))
            out['target_flash_attn'] += 0 if out['draft_loaded'] else 1
            continue
        m = KV_CACHE_LINE.search(line)
        if m:
            out['draft_kv' if out['draft_loaded'] else 'target_kv'].append((m.group(1), m.group(2)))
            continue
        m = NGRAM_MOD_LINE.search(line)
        if m:
            out['ngram'].append(tuple(int(g) for g in m.groups()))
    return out


def served_argv(run_command, unit):
    """(the unit's main process's argv, '') or (None, why not): ``systemctl show MainPID``, then that process's
    ``/proc/<pid>/cmdline`` - both outside data: the PID read as an integer, the arguments bounded and printable."""
    argv = ['systemctl', 'show', '--property=MainPID', '--value', unit]
    rc, out, err = run_command(argv)
    if rc != 0:
        return None, '%s exited %d: %s' % (' '.join(argv), rc, tr.printable((err or '').strip(), limit=200))
    try:
        pid = tr.int_text((out or '').strip(), ' '.join(argv), lo=0, hi=PID_MAX)
    except tr.ShapeError as exc:
        return None, str(exc)
    if pid == 0:
        return None, '%s answered MainPID 0: %s has no main process' % (' '.join(argv), unit)
    path = '/proc/%d/cmdline' % pid
    rc, text, err = run_command(['cat', path])
    if rc != 0:
        return None, 'cat %s exited %d: %s' % (path, rc, tr.printable((err or '').strip(), limit=200))
    if not isinstance(text, str) or len(text) > ARGV_MAX:
        return None, '%s: %s' % (path, 'not text' if not isinstance(text, str) else
                                 '%d characters: at most %d are read' % (len(text), ARGV_MAX))
    args = text.split('\x00')
    if args and args[-1] == '':
        args.pop()
    return [tr.printable(a, limit=tr.LINE_MAX) for a in args], ''


def argv_value(args, flag):
    """The value llama-server takes for ``flag`` from its argv (its last ``flag V`` or ``flag=V``), or None."""
    value = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + '='):
            value = a[len(flag) + 1:]
    return value


def compare_settings(wanted, served, args, verbosity):
    """One row per configured setting ({configured, served, status pass/fail/skip, why}) and the findings naming
    the env file's name and the inventory variable. ``served`` is served_settings' answer, ``args`` llama-server's
    argv (None: not read; the caller names why, the rows say so)."""
    rows, problems = {}, []
    logged = verbosity >= rules.LOG_VERBOSITY_TRACE

    def row(name, configured, seen, ok, missing):
        var = _var(name)
        if _source(name) == 'journal' and not logged:
            rows[name] = {'configured': configured, 'served': None, 'status': 'skip',
                          'why': 'not logged at verbosity %s' % verbosity}
            return
        if (served if _source(name) == 'journal' else args) is None:
            rows[name] = {'configured': configured, 'served': None, 'status': 'fail',
                          'why': 'the %s was not read' % _source(name)}
            return
        if not seen:
            rows[name] = {'configured': configured, 'served': None, 'status': 'fail', 'why': missing}
            problems.append('%s=%s (%s): %s' % (name, configured, var, missing))
            return
        good = all(ok(v) for v in seen)
        rows[name] = {'configured': configured, 'served': seen, 'status': 'pass' if good else 'fail', 'why': ''}
        if not good:
            problems.append('%s: served %s, the env file sets %s=%s (%s)' % (
                name, ', '.join(str(v) for v in seen), name, configured, var))

    s = served or {}
    for name, configured in sorted(wanted.items(), key=lambda kv: [n for n, _, _ in SETTINGS].index(kv[0])):
        if name == 'FLASH_ATTN':
            row(name, configured, s.get('flash_attn') if s.get('target_flash_attn') else [],
                lambda v: configured == 'auto' or v == configured,
                "this start's journal has no 'llama_context: flash_attn' line of the target")
        elif name in ('CACHE_TYPE_K', 'CACHE_TYPE_V', 'SPEC_DRAFT_TYPE_K', 'SPEC_DRAFT_TYPE_V'):
            draft = name.startswith('SPEC_DRAFT')
            pairs = s.get('draft_kv' if draft else 'target_kv') or []
            seen = [p[0 if name.endswith('_K') else 1] for p in pairs]
            missing = ("this start's journal has no 'llama_kv_cache: size' line of the %s" % (
                'drafter (after its load line)' if draft else 'target'))
            if draft and served is not None and not s.get('draft_loaded'):
                missing = "this start's journal has no drafter load line (%s)" % ' / '.join(DRAFT_LOAD_LINES)
            row(name, configured, seen, lambda v: v.lower() == configured, missing)
        elif name.startswith('SPEC_NGRAM_MOD_'):
            at = {'SPEC_NGRAM_MOD_N_MATCH': 0, 'SPEC_NGRAM_MOD_N_MAX': 1, 'SPEC_NGRAM_MOD_N_MIN': 2}[name]
            row(name, configured, [t[at] for t in s.get('ngram') or []], lambda v: v == configured,
                "this start's journal has no ngram-mod '- n_match=N, n_max=N, n_min=N' line")
        elif name == 'REASONING_BUDGET':
            budget = argv_value(args or [], '--reasoning-budget')
            seen = []
            if budget is not None:
                try:
                    seen = [tr.int_text(budget, "llama-server's --reasoning-budget")]
                except tr.ShapeError:
                    seen = [budget]
            row(name, configured, seen, lambda v: v == configured, "llama-server's argv has no --reasoning-budget")
    return rows, problems


def check_settings(ep, expect, o):
    wanted = expect['settings']
    verbosity = expect['log_verbosity']
    figures = {'journal': None, 'argv': None, 'settings': {}}
    problems = []
    run_command = o.get('run_command')
    served = None
    if verbosity >= rules.LOG_VERBOSITY_TRACE and any(_source(n) == 'journal' for n in wanted):
        journal, why = start_journal(run_command, o['service']) if run_command else ('', 'no journal reader given')
        if why:
            figures['journal'] = why
            problems.append("this start's journal cannot be read (%s): flash-attn, the KV types and the ngram window "
                            "are unproven" % why)
        else:
            served = served_settings(journal)
            figures['journal'] = '%d line(s)' % len(journal.splitlines())
    args = None
    if 'REASONING_BUDGET' in wanted:
        args, why = served_argv(run_command, o['service']) if run_command else (None, 'no process reader given')
        if why:
            figures['argv'] = why
            problems.append("llama-server's argv cannot be read (%s): the reasoning budget is unproven" % why)
        else:
            figures['argv'] = '%d argument(s)' % len(args)
    rows, found = compare_settings(wanted, served, args, verbosity)
    figures['settings'] = rows
    problems += found
    skipped = sorted(n for n, r in rows.items() if r['status'] == 'skip')
    notes = ['%s not logged at verbosity %s (b11434 logs them at trace; llama_server_log_verbosity 4 shows them)'
             % (', '.join(skipped), verbosity)] if skipped else []
    if problems:
        return 'fail', ("llama-server does not run with the inventory's settings - %s" % '; '.join(problems + notes)), \
            figures
    passed = ', '.join('%s=%s' % (n, rows[n]['configured']) for n, _, _ in SETTINGS
                       if n in rows and rows[n]['status'] == 'pass')
    return 'pass', '; '.join((['%s as served' % passed] if passed else []) + notes), figures


RUNNERS = dict(stream=check_stream, tools=check_tools, reasoning_effort=check_reasoning_effort, vision=check_vision,
               slots=check_slots, prefix_cache=check_prefix_cache, window=check_window, drafter=check_drafter,
               defaults=check_defaults, isolation=check_isolation, settings=check_settings)
FATAL = ('stream', 'tools', 'vision', 'slots', 'window', 'drafter', 'defaults', 'isolation', 'settings')


# --- the client contract ------------------------------------------------------------------------

def contract(expect, efforts, modalities=None):
    """What the fleet's clients configure from: alias, URL, context per slot, modalities, the effort map."""
    return {'alias': expect['alias'], 'url': expect['base'] + '/v1', 'context_per_slot': expect['slot_ctx'],
            'slots': expect['slots'], 'modalities': dict(modalities if modalities is not None
                                                         else {'vision': expect['vision']}),
            'reasoning_efforts': dict(efforts or {})}


# the last record, read before it is compared: any JSON per field, the effort map an object
CONTRACT = tr.Obj({'alias': tr.Json(), 'url': tr.Json(), 'context_per_slot': tr.Json(), 'slots': tr.Json(),
                   'modalities': tr.Json(), 'reasoning_efforts': tr.Map(tr.Json())})


def served_modalities(ep):
    """(/props modalities, '') or (None, why not): what the clients' contract records of the server."""
    code, body = ep.call('/props', timeout=30)
    if code != 200:
        return None, 'GET /props answered HTTP %s: %s' % (code, _short(error_text(body), 200))
    try:
        return read_answer(body, PROPS, 'GET /props')['modalities'], ''
    except tr.ShapeError as exc:
        return None, str(exc)


def contract_changes(previous, current):
    """Sentences naming each contract field that moved since the last record ([] for none or no record)."""
    if not isinstance(previous, dict) or not previous:
        return []
    out = []
    for key in ('alias', 'url', 'context_per_slot', 'slots', 'modalities'):
        if key in previous and previous.get(key) != current.get(key):
            out.append('%s %s -> %s' % (key, json.dumps(previous.get(key), sort_keys=True),
                                        json.dumps(current.get(key), sort_keys=True)))
    old, new = previous.get('reasoning_efforts') or {}, current.get('reasoning_efforts') or {}
    for effort in sorted(set(old) | set(new)):
        if effort in old and effort in new and old[effort] != new[effort]:
            out.append('reasoning_effort %s answered HTTP %s, now %s' % (effort, old[effort], new[effort]))
    return out


# --- the run ------------------------------------------------------------------------------------

def run_verify(expect, api_key, opts=None, previous_contract=None, run_command=None, service='llama-server.service'):
    """Every check against the live endpoint. Returns ``passed``, ``checks`` (name, status, reason, fatal,
    figures, seconds), ``findings`` (fatal), ``warnings``, ``contract`` and ``contract_changes``.
    ``run_command(argv) -> (rc, stdout, stderr)`` reads the journal of ``service`` (the drafter check)."""
    o = dict(DEFAULTS)
    o.update(opts or {})
    o.update(run_command=run_command, service=service)
    ep = Endpoint(expect['base'], api_key=api_key, timeout=o['request_timeout'])
    checks, findings, warnings = [], [], []
    for name in CHECKS:
        why = skip_reason(name, expect, o)
        if why:
            checks.append({'name': name, 'status': 'skip', 'reason': why, 'fatal': False, 'figures': {}, 'seconds': 0})
            continue
        start = time.time()
        try:
            status, reason, figures = RUNNERS[name](ep, expect, o)
        except (BenchError, tr.ShapeError, VerifyError) as exc:   # an answer not of its shape, named where it came from
            status, reason, figures = 'fail', str(exc), {}
        fatal = status == 'fail' and name in FATAL
        if status == 'fail' and not fatal:
            status = 'warn'
        checks.append({'name': name, 'status': status, 'reason': reason, 'fatal': fatal, 'figures': figures,
                       'seconds': round(time.time() - start, 2)})
        line = 'verify %s: %s' % (name, reason)
        if fatal:
            findings.append(line)
        elif status == 'warn':
            warnings.append(line)
    efforts = next((c['figures'].get('efforts') for c in checks if c['name'] == 'reasoning_effort'), None)
    modalities, why = served_modalities(ep)
    if why:
        warnings.append('verify contract: %s; the contract records the env file\'s VISION' % why)
    try:
        previous_contract = tr.read(CONTRACT, previous_contract or {}, 'previous_contract')
    except tr.ShapeError as exc:
        warnings.append('verify contract: %s - not a contract this stage recorded; compared with nothing' % exc)
        previous_contract = {}
    current = contract(expect, efforts, modalities)
    if efforts is None and previous_contract:
        current['reasoning_efforts'] = dict(previous_contract.get('reasoning_efforts') or {})
    changes = contract_changes(previous_contract, current)
    if changes:
        line = ('verify contract: the client contract changed since the last record - %s; update the '
                'clients that configure from it' % '; '.join(changes))
        warnings.append(line)
        for c in checks:
            if c['name'] == 'reasoning_effort' and c['status'] == 'pass':
                c['status'], c['reason'] = 'warn', c['reason'] + '; changed: ' + '; '.join(changes)
    passed = not findings
    return {'passed': passed, 'checks': checks, 'findings': findings, 'warnings': warnings, 'contract': current,
            'contract_changes': changes, 'message': summary(checks, passed)}


def summary(checks, passed):
    counts = {}
    for c in checks:
        counts[c['status']] = counts.get(c['status'], 0) + 1
    head = 'verify %s: %s' % ('passed' if passed else 'FAILED', ', '.join(
        '%d %s' % (counts[s], s) for s in ('pass', 'warn', 'fail', 'skip') if s in counts))
    return '\n'.join([head] + ['  %-13s %-4s %s' % (c['name'], c['status'], c['reason']) for c in checks])


def _label(value):
    return str(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def render_textfile(checks, service, now=None):
    """node-exporter textfile: llm_verify_check{check} 1 (pass) / 0 (fail or warn), llm_verify_skipped{check} for
    a check the shape does not configure, and when the stage ran."""
    svc = _label(service)
    lines = ['# HELP llm_verify_check 1 when the verify check passed at the last gated deploy, 0 when it failed or '
             'warned.', '# TYPE llm_verify_check gauge']
    for c in checks:
        if c['status'] != 'skip':
            ok = 1 if c['status'] == 'pass' else 0
            lines.append('llm_verify_check{check="%s",service="%s"} %d' % (_label(c['name']), svc, ok))
    lines += ['# HELP llm_verify_skipped 1 for a verify check the shape does not configure.',
              '# TYPE llm_verify_skipped gauge']
    for c in checks:
        if c['status'] == 'skip':
            lines.append('llm_verify_skipped{check="%s",service="%s"} 1' % (_label(c['name']), svc))
    lines += ['# HELP llm_verify_timestamp_seconds When the verify stage last ran.',
              '# TYPE llm_verify_timestamp_seconds gauge',
              'llm_verify_timestamp_seconds{service="%s"} %.3f' % (svc, time.time() if now is None else now)]
    return '\n'.join(lines) + '\n'
