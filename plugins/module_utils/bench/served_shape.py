# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shape a host serves, read from the llama_server role's live env file: what the benchmarks run.

The env file is exactly what the launcher turns into llama-server's command line (serve-llama-server.sh), so a
benchmark that takes its model, devices, split, batches, cache types, context and spec chain from here runs the
served shape - whatever mix of inventory values and planned ones (llm_plan) the deploy rendered. Every value is
read through a typed shape (module_utils/base/typed_reader); a value of the wrong shape is a refusal naming the
variable, the file and the fix, never a default. An empty value is ``None`` (the launcher passes no flag: the
tool's own default applies), an empty list ``[]``. The API key is never read.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import LlamaEnvError, read_env_file
from ansible_collections.dankfleet.llm.plugins.module_utils.serve.llama_server_gate import GateError, gate_url

_NAME = tr.Str(max_len=4096, name=True)
_INT = 'int'
_PORT = 'port'
_STR = 'str'
_LIST = 'list'
_INT_LIST = 'int_list'
_ONOFF = 'onoff'
# shape key -> (env variable, kind). The keys are the serve role's names (llama_server_<key>), payload paths
# and the endpoint's address included.
FIELDS = (
    ('binary', 'LLAMA_BIN', _STR), ('model_path', 'MODEL_PATH', _STR), ('drafter_path', 'DRAFT_MODEL_PATH', _STR),
    ('mmproj_path', 'MMPROJ_PATH', _STR), ('release', 'LLAMA_RELEASE', _STR),
    ('alias', 'ALIAS', _STR), ('bind_address', 'BIND_ADDR', _STR), ('port', 'LISTEN_PORT', _PORT),
    ('rpc', 'RPC', _LIST), ('devices', 'DEVICES', _LIST), ('split_mode', 'SPLIT_MODE', _STR),
    ('tensor_split', 'TENSOR_SPLIT', _INT_LIST), ('gpu_layers', 'NGL', _INT), ('flash_attn', 'FLASH_ATTN', _STR),
    ('ctx_size', 'CTX_SIZE', _INT), ('parallel', 'PARALLEL', _INT), ('batch_size', 'BATCH_SIZE', _INT),
    ('ubatch_size', 'UBATCH_SIZE', _INT), ('threads', 'NUM_THREADS', _INT),
    ('cache_type_k', 'CACHE_TYPE_K', _STR), ('cache_type_v', 'CACHE_TYPE_V', _STR),
    ('cache_ram', 'CACHE_RAM', _INT), ('spec_type', 'SPEC_TYPE', _LIST),
    ('spec_draft_n_max', 'SPEC_DRAFT_N_MAX', _INT), ('spec_draft_device', 'SPEC_DRAFT_DEVICE', _STR),
    ('vision', 'VISION', _ONOFF),
)
# what the shape cannot be without: the launcher refuses to start without them too
REQUIRED = ('LLAMA_BIN', 'MODEL_PATH', 'ALIAS', 'LISTEN_PORT')


class ServedShapeError(Exception):
    """The env file cannot be read as a served shape; the message names the file, the variable and the fix."""


def _value(kind, raw, source):
    if kind == _STR:
        return tr.read(_NAME, raw, source) if raw != '' else None
    if kind == _INT:
        return tr.int_text(raw, source) if raw != '' else None
    if kind == _PORT:
        return tr.int_text(raw, source, lo=1, hi=65535)
    if kind == _ONOFF:
        return tr.read(tr.Enum('on', 'off'), raw, source) == 'on'
    items = [item.strip() for item in raw.split(',')] if raw.strip() else []
    if kind == _INT_LIST:
        return [tr.int_text(item, '%s[%d]' % (source, i), lo=0) for i, item in enumerate(items)]
    return [tr.read(_NAME, item, '%s[%d]' % (source, i)) for i, item in enumerate(items) if item]


def served_shape(variables, env_file):
    """{key: typed value} of the served shape from an env file's variables (llama_env.parse), plus ``url`` and
    ``llama_bench`` (the llama-bench beside the served llama-server)."""
    fix = 'render it again with the llama_server role (a deploy), or pass the benchmark its inputs explicitly'
    for name in REQUIRED:
        if not variables.get(name):
            raise ServedShapeError('%s in %s is missing or empty: the served shape cannot be read without it; %s'
                                   % (name, env_file, fix))
    shape = {}
    for key, name, kind in FIELDS:
        try:
            shape[key] = _value(kind, variables.get(name, ''), '%s in %s' % (name, env_file))
        except tr.ShapeError as exc:
            raise ServedShapeError('%s; %s' % (exc, fix))
    # the llama-bench of the served build: the tools of a release sit beside its llama-server
    shape['llama_bench'] = os.path.join(os.path.dirname(shape['binary']), 'llama-bench')
    try:  # the endpoint as the host itself reaches it: the gate's own reading (loopback for a bind to any address)
        shape['url'] = gate_url(variables, '', env_file)
    except GateError as exc:
        raise ServedShapeError('%s; %s' % (exc, fix))
    return shape


def read_served(env_file):
    """(exists, shape, api_key_set) of the live env file at env_file: (False, {}, False) when there is none (nothing
    deployed). api_key_set says whether the endpoint requires a key (LLAMA_API_KEY is not empty); the key itself
    is never returned."""
    if not os.path.lexists(env_file):
        return False, {}, False
    try:
        variables, problems = read_env_file(env_file)
    except LlamaEnvError as exc:
        raise ServedShapeError(str(exc))
    if problems:
        raise ServedShapeError('%s is not an env file the llama_server role writes: %s' % (env_file, tr.printable('; '.join(problems), limit=500)))
    return True, served_shape(variables, env_file), bool(variables.get('LLAMA_API_KEY'))


def read_served_shape(env_file):
    """(exists, shape) of the live env file at env_file: (False, {}) when there is none (nothing deployed)."""
    exists, shape, _ = read_served(env_file)
    return exists, shape
