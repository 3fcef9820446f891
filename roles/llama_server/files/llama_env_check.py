# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
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
shape's alias, port, slots and key from it). Python 3 standard library only: it runs on the target host as the
template's validate command, with the collection's env-file parser (llama_env.py) installed beside it.
"""
import importlib.util
import json
import os
import re
import sys

# The parser is the collection's own module_utils/base/llama_env.py - ONE copy: the role installs it beside this
# script on the host; run from the source tree (tests, tests/gpu/render_serve.yml) it is the repo's file.
# Loaded by path under its own name: this script has no package and adds nothing to sys.path.
_HERE = os.path.dirname(os.path.abspath(__file__))
_PARSER_PLACES = (os.path.join(_HERE, 'llama_env.py'),
                  os.path.join(_HERE, os.pardir, os.pardir, os.pardir, 'plugins', 'module_utils', 'base', 'llama_env.py'))


def _load_parser():
    for path in _PARSER_PLACES:
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location('llama_env', path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    sys.stderr.write('llama-env-check: llama_env.py (the env-file parser) is neither beside %s nor in the '
                     'collection\'s plugins/module_utils: run the llama_server role again to install it\n' % _HERE)
    sys.exit(2)


llama_env = _load_parser()
parse_value = llama_env.parse_value
parse = llama_env.parse

# llama.cpp b11434's rules (HIP_BARE, SPEC_TYPES, MODEL_BACKED, the SPLIT_MODE/FLASH_ATTN/REASONING choices) are a
# stdlib copy of plugins/module_utils/base/llama_cpp_rules.py; tests/unit/plugins/module_utils/test_llama_cpp_rules.py
# fails when the two disagree.
HIP_BARE = ('TEMP', 'HOST', 'GPU_MAX_HEAP_SIZE')
REQUIRED = ('LLAMA_BIN', 'MODEL_PATH', 'ALIAS', 'BIND_ADDR', 'LISTEN_PORT', 'CTX_SIZE', 'PARALLEL')
INTEGERS = ('LISTEN_PORT', 'LOG_VERBOSITY', 'CTX_SIZE', 'PARALLEL', 'BATCH_SIZE', 'UBATCH_SIZE', 'NGL', 'NUM_THREADS',
            'THREAD_BATCH', 'CTX_CHECKPOINTS', 'CACHE_RAM', 'TOP_K', 'REASONING_BUDGET', 'SPEC_DRAFT_N_MAX',
            'SPEC_DRAFT_NGL', 'SPEC_NGRAM_MOD_N_MATCH', 'SPEC_NGRAM_MOD_N_MIN', 'SPEC_NGRAM_MOD_N_MAX', 'N_CPU_MOE',
            'IMAGE_MIN_TOKENS', 'IMAGE_MAX_TOKENS')
NUMBERS = ('TEMPERATURE', 'TOP_P', 'MIN_P', 'PRESENCE_PENALTY')
CHOICES = {
    'FIT': ('on', 'off'),
    'FLASH_ATTN': ('on', 'off', 'auto'),
    'METRICS': ('on', 'off'),
    'CPU_MOE': ('on', 'off'),
    'LOAD_MODE': ('auto', 'none', 'mmap', 'mlock', 'mmap+mlock', 'dio'),
    'VISION': ('on', 'off'),
    'MMPROJ_OFFLOAD': ('on', 'off'),
    'REASONING': ('on', 'off', 'auto'),
    'SPLIT_MODE': ('none', 'layer', 'row', 'tensor'),
}
SPEC_TYPES = ('draft-simple', 'draft-eagle3', 'draft-mtp', 'draft-dflash', 'draft-dspark', 'ngram-simple',
              'ngram-map-k', 'ngram-map-k4v', 'ngram-mod', 'ngram-cache')
MODEL_BACKED = ('draft-simple', 'draft-eagle3', 'draft-dflash', 'draft-dspark')
INTEGER = re.compile(r'^-?[0-9]+$')
NUMBER = re.compile(r'^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$')


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

    # the serve shape's two rules (plugins/module_utils/plan/shape.py: ctx_parallel_problem, split_devices_problem), a copy
    # for the host; tests/unit/roles/llama_server/test_env_check_agrees_with_shape.py fails when the two disagree
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
