# -*- coding: utf-8 -*-
"""The host's env check (roles/llama_server/files/llama_env_check.py, stdlib, runs as the env file's validate
command) keeps its own copy of two serve-shape rules - a context that divides over the slots, one split share per
device - because it runs where the collection's module_utils are not importable. The copy stays only while it says
what plugins/module_utils/plan/shape.py says (ctx_parallel_problem, split_devices_problem): this test fails when the two
disagree. Domain: what an env file carries - a context >= 0 (0: the model's), slots >= 1 (fewer is the check's own
refusal, not this rule)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import ctx_parallel_problem, split_devices_problem
from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import load_role_script

check_mod = load_role_script('llama_server', 'llama_env_check')
BASE = {'LLAMA_BIN': '/opt/llama.cpp/current/bin/llama-server', 'MODEL_PATH': '/m/q.gguf', 'ALIAS': 'q',
        'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': '8080'}
DEVICE = st.sampled_from(['ROCm0', 'ROCm1', 'CUDA0', 'RPC0', 'Vulkan1'])


def _found(variables, start):
    return [p for p in check_mod.check(dict(BASE, **variables)) if p.startswith(start)]


@settings(max_examples=300, deadline=None)
@given(ctx=st.one_of(st.integers(0, 1 << 20), st.sampled_from([0, 4096, 65536, 131072, 262144])),
       parallel=st.one_of(st.integers(1, 64), st.sampled_from([1, 2, 3, 4, 8])))
def test_the_context_rule_is_shapes(ctx, parallel):
    host = _found({'CTX_SIZE': str(ctx), 'PARALLEL': str(parallel)}, 'CTX_SIZE=')
    assert bool(host) == (ctx_parallel_problem(ctx, parallel) is not None), host


@settings(max_examples=300, deadline=None)
@given(devices=st.lists(DEVICE, max_size=4), split=st.lists(st.integers(0, 9), max_size=4))
def test_the_split_rule_is_shapes(devices, split):
    host = _found({'CTX_SIZE': '4096', 'PARALLEL': '1', 'DEVICES': ','.join(devices),
                   'TENSOR_SPLIT': ','.join(str(s) for s in split)}, 'TENSOR_SPLIT=')
    assert bool(host) == (split_devices_problem(split, devices) is not None), host


def test_recorded():
    assert _found({'CTX_SIZE': '65537', 'PARALLEL': '2'}, 'CTX_SIZE=') and ctx_parallel_problem(65537, 2)
    assert not _found({'CTX_SIZE': '0', 'PARALLEL': '3'}, 'CTX_SIZE=') and not ctx_parallel_problem(0, 3)
    assert _found({'CTX_SIZE': '1', 'PARALLEL': '1', 'DEVICES': 'ROCm0,ROCm1', 'TENSOR_SPLIT': '1'}, 'TENSOR_SPLIT=')
