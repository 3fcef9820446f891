# -*- coding: utf-8 -*-
"""served_shape: the env file the llama_server role writes, read back as the shape the benchmarks run.

The file is rendered by the role's own template (llama-server.env.j2) and read by the collection's one env-file
reader: every value the launcher turns into a flag comes back typed, a planned split and context included; a
value of the wrong shape is a refusal naming the variable and the file, never another exception."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import functools
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.bench import served_shape as ss
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import parse
from ansible_collections.dankfleet.llm.tests.unit.hostile_testlib import hostile_text
from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import render

SERVED = {
    'llama_server_alias': 'frank-medium', 'llama_server_model_path': '/srv/models/t/t.gguf',
    'llama_server_drafter_path': '/srv/models/d/d.gguf', 'llama_server_mmproj_path': '/srv/models/t/mm.gguf',
    'llama_server_binary': '/opt/llama.cpp/current/bin/llama-server', 'llama_server_bind_address': '0.0.0.0',
    'llama_server_port': 7770, 'llama_server_devices': ['ROCm0', 'ROCm1'], 'llama_server_parallel': 2,
    'llama_server_batch_size': 6144, 'llama_server_ubatch_size': 512, 'llama_server_cache_type_k': 'q8_0',
    'llama_server_spec_type': ['draft-dflash', 'ngram-mod'], 'llama_server_spec_draft_n_max': 7,
    'llama_server_vision': True, 'llama_server_api_key': 'sekrit',
    # the planned values (llm_plan), as the role renders them
    'shape_tensor_split': [32, 33], 'shape_ctx_size': 327680,
    'shape_cache_ram': 16384, '_llama_server_release_target': '/opt/llama.cpp/releases/fb27a525',
}


def _rendered(tmp_path, **overrides):
    variables = dict(SERVED)
    variables.update(overrides)
    path = tmp_path / 'frank-medium.env'
    path.write_text(render('llama_server', 'llama-server.env.j2', variables))
    return str(path)


def test_the_rendered_env_file_reads_back_as_the_served_shape(tmp_path):
    exists, shape = ss.read_served_shape(_rendered(tmp_path))
    assert exists
    assert shape['model_path'] == '/srv/models/t/t.gguf' and shape['drafter_path'] == '/srv/models/d/d.gguf'
    assert shape['devices'] == ['ROCm0', 'ROCm1'] and shape['tensor_split'] == [32, 33] and shape['rpc'] == []
    assert (shape['ctx_size'], shape['parallel'], shape['batch_size'], shape['ubatch_size']) == (327680, 2, 6144, 512)
    assert shape['spec_type'] == ['draft-dflash', 'ngram-mod'] and shape['spec_draft_n_max'] == 7
    assert shape['cache_type_k'] == 'q8_0' and shape['cache_type_v'] == 'f16' and shape['cache_ram'] == 16384
    assert shape['vision'] is True and shape['flash_attn'] == 'on' and shape['split_mode'] == 'layer'
    assert (shape['gpu_layers'], shape['threads']) == (999, 8)
    # bound to every address: the host reaches it on loopback, as the gate does
    assert shape['url'] == 'http://127.0.0.1:7770' and shape['alias'] == 'frank-medium'
    assert shape['llama_bench'] == '/opt/llama.cpp/current/bin/llama-bench'
    assert 'sekrit' not in repr(shape)


def test_empty_values_are_no_flag_and_no_file_is_nothing_deployed(tmp_path):
    path = _rendered(tmp_path, shape_tensor_split=[], llama_server_devices=[], llama_server_threads='',
                     llama_server_spec_type=[], llama_server_bind_address='::1')
    shape = ss.read_served_shape(path)[1]
    assert shape['tensor_split'] == [] and shape['devices'] == [] and shape['spec_type'] == []
    assert shape['threads'] is None and shape['url'] == 'http://[::1]:7770'
    assert ss.read_served_shape(str(tmp_path / 'absent.env')) == (False, {})


def test_whether_the_endpoint_requires_a_key_is_said_never_the_key(tmp_path):
    exists, shape, keyed = ss.read_served(_rendered(tmp_path))
    assert exists and keyed is True and 'sekrit' not in repr((shape, keyed))
    (tmp_path / 'k').mkdir()
    assert ss.read_served(_rendered(tmp_path / 'k', llama_server_api_key=''))[2] is False
    assert ss.read_served(str(tmp_path / 'absent.env')) == (False, {}, False)


@pytest.mark.parametrize('name,value,says', [
    ('CTX_SIZE', 'big', 'CTX_SIZE in '),
    ('TENSOR_SPLIT', '32,-1', 'TENSOR_SPLIT in '),
    ('LISTEN_PORT', '70000', 'LISTEN_PORT in '),
    ('VISION', 'maybe', 'VISION in '),
    ('MODEL_PATH', '', 'MODEL_PATH in '),
    ('DEVICES', 'ROCm0,"ROCm1\x1b[2J"', 'DEVICES in '),
])
def test_a_value_of_the_wrong_shape_is_a_named_refusal(tmp_path, name, value, says):
    path = _rendered(tmp_path)
    with open(path) as handle:
        text = handle.read()
    lines = [('%s=%s' % (name, value)) if line.startswith(name + '=') else line for line in text.splitlines()]
    with open(path, 'w') as handle:
        handle.write('\n'.join(lines) + '\n')
    with pytest.raises(ss.ServedShapeError) as caught:
        ss.read_served_shape(path)
    message = str(caught.value)
    assert says in message and path in message and 'llama_server role' in message


def test_a_file_that_is_no_env_file_is_refused_naming_it(tmp_path):
    path = tmp_path / 'x.env'
    path.write_text('MODEL_PATH=/m.gguf\nnot an assignment\n')
    with pytest.raises(ss.ServedShapeError, match=r'x\.env is not an env file the llama_server role writes: line 2'):
        ss.read_served_shape(str(path))
    os.mkfifo(str(tmp_path / 'fifo.env'))
    with pytest.raises(ss.ServedShapeError, match='fifo.env'):
        ss.read_served_shape(str(tmp_path / 'fifo.env'))


@functools.lru_cache(maxsize=1)
def _served_variables():
    return parse(render('llama_server', 'llama-server.env.j2', SERVED))[0]


@settings(max_examples=300, deadline=2000)
@given(name=st.sampled_from([n for _k, n, _t in ss.FIELDS]), value=hostile_text())
def test_hostile_values_give_the_shape_or_a_named_refusal(name, value):
    variables = dict(_served_variables())
    variables[name] = value
    try:
        shape = ss.served_shape(variables, '/etc/llama-server/x.env')
    except ss.ServedShapeError as exc:
        assert '/etc/llama-server/x.env' in str(exc)
        return
    assert set(shape) == set(k for k, _n, _t in ss.FIELDS) | {'url', 'llama_bench'}
