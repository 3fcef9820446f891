# Copyright (c) dankfleet engineers
# MIT License (see galaxy.yml)
"""python3 llama_env_check.py [--json] FILE: validate a llama_server env file before it goes live.

Parses FILE the way systemd's EnvironmentFile= does (KEY=VALUE lines, '#' comments, single
quotes literal, double quotes with backslash escapes of " \\ ` $) and refuses, with one line per
problem on stderr and exit status 1:

- names HIP reads bare from the environment (TEMP, HOST, GPU_MAX_HEAP_SIZE; 2026-08-13 incident),
- malformed lines, invalid or duplicate names,
- a missing required variable, a non-integer where llama-server wants one, an unknown on/off value,
- a speculative chain llama-server b11434 cannot load (draft-mtp with a model-backed drafter) or
  a model-backed drafter without DRAFT_MODEL_PATH, VISION=on without MMPROJ_PATH,
- CTX_SIZE not divisible by PARALLEL, UBATCH_SIZE above BATCH_SIZE, a TENSOR_SPLIT whose length
  differs from DEVICES, CHAT_TEMPLATE_KWARGS that is not a JSON object.

With --json, also print the parsed variables as a JSON object on stdout (the gate reads the live
shape's alias, port, slots and key from it). Python 3 standard library only: it runs on the target host as the template's validate command.
"""
import json
import re
import sys

# llama.cpp b11434's rules (HIP_BARE, SPEC_TYPES, MODEL_BACKED, the SPLIT_MODE/FLASH_ATTN/REASONING choices) are a
# stdlib copy of plugins/module_utils/llama_cpp_rules.py; tests/unit/plugins/module_utils/test_llama_cpp_rules.py
# fails when the two disagree.
HIP_BARE = ('TEMP', 'HOST', 'GPU_MAX_HEAP_SIZE')
REQUIRED = ('LLAMA_BIN', 'MODEL_PATH', 'ALIAS', 'BIND_ADDR', 'LISTEN_PORT', 'CTX_SIZE', 'PARALLEL')
INTEGERS = ('LISTEN_PORT', 'LOG_VERBOSITY', 'CTX_SIZE', 'PARALLEL', 'BATCH_SIZE', 'UBATCH_SIZE', 'NGL', 'NUM_THREADS',
            'THREAD_BATCH', 'CTX_CHECKPOINTS', 'CACHE_RAM', 'TOP_K', 'REASONING_BUDGET', 'SPEC_DRAFT_N_MAX',
            'SPEC_DRAFT_NGL', 'SPEC_NGRAM_MOD_N_MATCH', 'SPEC_NGRAM_MOD_N_MIN', 'SPEC_NGRAM_MOD_N_MAX')
NUMBERS = ('TEMPERATURE', 'TOP_P', 'MIN_P', 'PRESENCE_PENALTY')
CHOICES = {
    'FIT': ('on', 'off'),
    'FLASH_ATTN': ('on', 'off', 'auto'),
    'METRICS': ('on', 'off'),
    'VISION': ('on', 'off'),
    'REASONING': ('on', 'off', 'auto'),
    'SPLIT_MODE': ('none', 'layer', 'row', 'tensor'),
}
SPEC_TYPES = ('draft-simple', 'draft-eagle3', 'draft-mtp', 'draft-dflash', 'draft-dspark', 'ngram-simple',
              'ngram-map-k', 'ngram-map-k4v', 'ngram-mod', 'ngram-cache')
MODEL_BACKED = ('draft-simple', 'draft-eagle3', 'draft-dflash', 'draft-dspark')
NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')
INTEGER = re.compile(r'^-?[0-9]+$')
NUMBER = re.compile(r'^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$')
DOUBLE_QUOTE_ESCAPES = '"\\`$'


def parse_value(raw):
    """systemd's reading of the text after '=' (env-file.c, without line continuations)."""
    out = []
    raw = raw.strip()
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "'":
            end = raw.find("'", i + 1)
            if end < 0:
                raise ValueError('unterminated single quote')
            out.append(raw[i + 1:end])
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    raise ValueError('unterminated double quote')
                c = raw[i]
                if c == '"':
                    i += 1
                    break
                if c == '\\' and i + 1 < n and raw[i + 1] in DOUBLE_QUOTE_ESCAPES:
                    out.append(raw[i + 1])
                    i += 2
                    continue
                out.append(c)
                i += 1
        elif c == '\\' and i + 1 < n:
            out.append(raw[i + 1])
            i += 2
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def parse(text):
    """(variables, problems) of an env file's text."""
    variables, problems = {}, []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith('#') or stripped.startswith(';'):
            continue
        if '=' not in stripped:
            problems.append('line %d is neither a comment nor NAME=VALUE: %r' % (number, line))
            continue
        name, raw = stripped.split('=', 1)
        name = name.strip()
        if not NAME.match(name):
            problems.append('line %d: %r is not a valid variable name' % (number, name))
            continue
        if name in variables:
            problems.append('line %d: %s is set twice (first value %r)' % (number, name, variables[name]))
            continue
        try:
            variables[name] = parse_value(raw)
        except ValueError as exc:
            problems.append('line %d: %s: %s' % (number, name, exc))
    return variables, problems


def check(variables):
    """Problems with the values, one string each."""
    problems = []
    v = variables
    for name in HIP_BARE:
        if name in v:
            problems.append('%s is set: HIP reads %s bare from the environment and misbehaves (2026-08-13 '
                            'incident); llama.cpp takes --host/--port/--temp as flags only - remove it' % (name, name))
    for name in REQUIRED:
        if not v.get(name):
            problems.append('%s is missing or empty: the launcher cannot start without it' % name)
    for name in INTEGERS:
        if v.get(name) and not INTEGER.match(v[name]):
            problems.append('%s=%r is not an integer' % (name, v[name]))
    for name in NUMBERS:
        if v.get(name) and not NUMBER.match(v[name]):
            problems.append('%s=%r is not a number' % (name, v[name]))
    for name, allowed in CHOICES.items():
        if v.get(name) and v[name] not in allowed:
            problems.append('%s=%r must be one of %s' % (name, v[name], '|'.join(allowed)))
    if v.get('LISTEN_PORT', '').isdigit() and not 0 < int(v['LISTEN_PORT']) < 65536:
        problems.append('LISTEN_PORT=%s is not a TCP port' % v['LISTEN_PORT'])

    def number(name):
        return int(v[name]) if INTEGER.match(v.get(name, '')) else None

    ctx, parallel = number('CTX_SIZE'), number('PARALLEL')
    if parallel is not None and parallel < 1:
        problems.append('PARALLEL=%d: at least one slot' % parallel)
    elif ctx and parallel and ctx % parallel:
        problems.append('CTX_SIZE=%d is not divisible by PARALLEL=%d: llama.cpp would round the pool down and '
                        'every slot would get less than planned' % (ctx, parallel))
    batch, ubatch = number('BATCH_SIZE'), number('UBATCH_SIZE')
    if batch and ubatch and ubatch > batch:
        problems.append('UBATCH_SIZE=%d is above BATCH_SIZE=%d' % (ubatch, batch))
    devices = [d for d in v.get('DEVICES', '').split(',') if d]
    split = [s for s in v.get('TENSOR_SPLIT', '').split(',') if s]
    if devices and split and len(devices) != len(split):
        problems.append('TENSOR_SPLIT=%s has %d shares for %d DEVICES (%s)'
                        % (v['TENSOR_SPLIT'], len(split), len(devices), v['DEVICES']))
    if any(not INTEGER.match(s) and not NUMBER.match(s) for s in split):
        problems.append('TENSOR_SPLIT=%s must be comma-separated numbers' % v['TENSOR_SPLIT'])

    spec = [t for t in v.get('SPEC_TYPE', '').split(',') if t]
    for t in spec:
        if t not in SPEC_TYPES:
            problems.append('SPEC_TYPE names %r, which llama-server b11434 does not know (%s)'
                            % (t, ', '.join(SPEC_TYPES)))
    backed = [t for t in spec if t in MODEL_BACKED]
    if 'draft-mtp' in spec and backed:
        problems.append('SPEC_TYPE=%s chains draft-mtp with %s: one draft context per chain, MTP builds against '
                        'the model it holds, and the load dies - pick one' % (v['SPEC_TYPE'], backed[0]))
    if backed and not v.get('DRAFT_MODEL_PATH'):
        problems.append('SPEC_TYPE has %s, a model-backed drafter, but DRAFT_MODEL_PATH is empty' % backed[0])
    if v.get('VISION') == 'on' and not v.get('MMPROJ_PATH'):
        problems.append('VISION=on but MMPROJ_PATH is empty: this build does not autoload an mmproj')
    if v.get('CHAT_TEMPLATE_KWARGS'):
        try:
            kwargs = json.loads(v['CHAT_TEMPLATE_KWARGS'])
        except ValueError as exc:
            problems.append('CHAT_TEMPLATE_KWARGS is not JSON (%s): %r' % (exc, v['CHAT_TEMPLATE_KWARGS']))
        else:
            if not isinstance(kwargs, dict):
                problems.append('CHAT_TEMPLATE_KWARGS must be a JSON object, got %r' % v['CHAT_TEMPLATE_KWARGS'])
    return problems


def main(argv):
    args = argv[1:]
    as_json = bool(args) and args[0] == '--json'
    if as_json:
        args = args[1:]
    if len(args) != 1:
        sys.stderr.write('usage: python3 llama_env_check.py [--json] FILE\n')
        return 2
    path = args[0]
    try:
        with open(path) as handle:
            text = handle.read()
    except (IOError, OSError) as exc:
        sys.stderr.write('llama-env-check: %s\n' % exc)
        return 2
    variables, problems = parse(text)
    problems.extend(check(variables))
    for problem in problems:
        sys.stderr.write('llama-env-check: %s: %s\n' % (path, problem))
    if as_json:
        sys.stdout.write(json.dumps(variables, sort_keys=True) + '\n')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
