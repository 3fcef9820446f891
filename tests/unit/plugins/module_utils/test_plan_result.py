# -*- coding: utf-8 -*-
"""The one plan result (plugins/module_utils/plan/plan_result.py): what llm_plan publishes from a fit, and the serve
role's reading of it - the same result, one input; messages in the names the operator edits."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import re

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import plan_result as pr
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import plan
from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib

MODEL = lib.fixture("frank_medium")
GIB = lib.GIB
# the production shape as the settle step hands it over (dankfleet_settled.serve)
SETTLED = {'backend': 'hip', 'split_mode': 'layer', 'tensor_split': [], 'ctx_size': 0, 'cache_ram': 'auto',
           'parallel': 2, 'batch_size': 6144, 'ubatch_size': 512, 'cache_type_k': 'f16', 'cache_type_v': 'f16',
           'flash_attn': 'on', 'spec_type': ['draft-mtp'], 'spec_draft_n_max': 3, 'spec_draft_device': '',
           'vision': False, 'rpc': []}


def fit_for(settled, floor=GIB, gpus=None):
    serve = pr.fit_serve(settled, floor_bytes=floor)
    return plan(gpus or lib.r9700s(), MODEL, serve, host_ram_bytes=64 * GIB), serve


def test_open_values_are_left_to_the_planner_and_pinned_ones_kept():
    serve = pr.fit_serve(SETTLED, floor_bytes=GIB, lean_layers=1)
    assert serve['tensor_split'] == 'auto' and serve['ctx_size'] == 'max' and serve['cache_ram_mib'] == 'auto'
    assert serve['floor_bytes'] == GIB and serve['lean_layers'] == 1 and 'draft_device' not in serve
    pinned = pr.fit_serve(dict(SETTLED, tensor_split=[35, 30.0], ctx_size=393216, cache_ram=16384,
                               spec_draft_device='ROCm1'))
    assert pinned['tensor_split'] == [35, 30] and pinned['ctx_size'] == 393216 and pinned['cache_ram_mib'] == 16384
    assert pinned['draft_device'] == 'ROCm1'


def test_the_published_plan_says_where_each_value_came_from():
    fit, _ = fit_for(SETTLED)
    out = pr.plan_result(fit, SETTLED, host='dankserver')
    assert out['planned'] and out['fits'] is True
    assert out['origin'] == {'tensor_split': 'planned', 'ctx_size': 'planned', 'cache_ram': 'planned',
                             'n_cpu_moe': 'pinned'}
    assert out['tensor_split'] == fit['tensor_split'] and out['ctx_size'] == fit['ctx_size']
    assert out['cache_ram'] == fit['cache_ram_mib'] and out['devices'] == ['ROCm0', 'ROCm1']
    lines = out['capacity']['lines']
    assert lines[0] == ('capacity of dankserver (hip profile, headers read on the host; '
                        'profile within 0.62 GiB per card of 38 rocm-smi loads on 2x R9700, fitted)')
    assert lines[1] == 'split: %s (layer)' % ':'.join(str(x) for x in fit['tensor_split'])
    assert lines[-1].startswith('binding: ROCm') and 'above the 1.00 GiB floor' in lines[-1]
    # the output layer's slot said: the cards' layers sum to the blocks, the last card holds the output too
    first, last = fit['devices']
    assert lines[-2] == ('layers: -ts %s shares 65 slots, the 64 blocks then the output layer (one slot, on the last '
                         'card): ROCm0 blocks 0-%d, ROCm1 blocks %d-63 + output'
                         % (':'.join(str(x) for x in fit['tensor_split']), first['layer_range'][1], last['layer_range'][0]))
    assert first['layers'] + last['layers'] == 64
    # the fit table names the devices as the capacity table does
    assert fit['table'].split('\n')[0] == '-ts | ROCm0 free | ROCm1 free | gap | fits'
    assert out['capacity']['summary'].startswith('dankserver: fits - split ')

    pinned = dict(SETTLED, tensor_split=[35, 30], ctx_size=393216, cache_ram=16384)
    fit, _ = fit_for(pinned)
    out = pr.plan_result(fit, pinned, host='dankserver', reads='recorded')
    assert out['origin'] == {'tensor_split': 'pinned', 'ctx_size': 'pinned', 'cache_ram': 'pinned', 'n_cpu_moe': 'pinned'}
    assert (out['tensor_split'], out['ctx_size'], out['cache_ram']) == ([35, 30], 393216, 16384)
    assert 'headers recorded on the controller' in out['capacity']['lines'][0]


def test_a_plan_that_does_not_fit_names_the_variables_the_operator_edits():
    settled = dict(SETTLED, ctx_size=4 * 1048576, tensor_split=[35, 30])
    fit, _ = fit_for(settled, floor=2 * GIB)
    assert not fit['fits'] and any('serve.ctx_size' in e or 'floor_bytes' in e for e in fit['errors'])
    out = pr.plan_result(fit, settled)
    text = ' '.join(out['fit']['errors'])
    assert 'llama_server_ctx_size' in text and 'dankfleet_plan_floor_bytes' in text
    assert not re.search(r'\bserve\.', text) and not re.search(r'(?<![\w.])floor_bytes', text)
    assert out['capacity']['summary'].startswith('this host: DOES NOT FIT') and 'does not fit - ' in out['capacity']['summary']
    assert not fit['errors'][0].startswith('llama_server')  # the fit itself is untouched (a copy is renamed)


@pytest.mark.parametrize('field', sorted(pr.INVENTORY_NAMES))
def test_every_planner_field_reads_as_its_inventory_variable(field):
    text = pr.inventory_names('serve.%s 3 is wrong; also lower floor_bytes' % field)
    assert text == '%s 3 is wrong; also lower dankfleet_plan_floor_bytes' % pr.INVENTORY_NAMES[field]
    # a name already in inventory form is left alone
    assert pr.inventory_names(text) == text


def test_the_serve_role_reads_the_plan_it_was_made_for():
    fit, _ = fit_for(SETTLED)
    llm_plan = pr.plan_result(fit, SETTLED)
    shape, problems = pr.serve_shape([], 0, 'auto', llm_plan, parallel=2, devices=['ROCm0', 'ROCm1'])
    assert problems == []
    assert shape == {'tensor_split': llm_plan['tensor_split'], 'ctx_size': llm_plan['ctx_size'],
                     'cache_ram': llm_plan['cache_ram'], 'n_cpu_moe': 0, 'origin': llm_plan['origin']}


def test_without_a_plan_the_configured_values_are_served_open():
    shape, problems = pr.serve_shape([], 8192, 'auto', {}, parallel=2)
    assert problems == [] and shape['ctx_size'] == 8192 and shape['cache_ram'] == pr.DEFAULT_CACHE_RAM_MIB
    assert shape['origin'] == {'tensor_split': 'planned', 'ctx_size': 'pinned', 'cache_ram': 'planned', 'n_cpu_moe': 'pinned'}
    # a malformed value is the settle step's to report; here it never crashes
    shape, problems = pr.serve_shape('35,30', 'lots', 'plenty', {})
    assert shape['tensor_split'] == [] and shape['ctx_size'] == 0 and shape['cache_ram'] == pr.DEFAULT_CACHE_RAM_MIB


def test_a_plan_that_is_refused_says_why_first():
    rejected = {'planned': True, 'fits': False, 'fit': {'fits': False, 'errors': ['a', 'b'], 'table': 't'}}
    _, problems = pr.serve_shape([], 0, 'auto', rejected)
    assert problems[0].message == 'the planner rejected this configuration: a | b'
    tight = {'planned': True, 'fits': False, 'fit': {'fits': False, 'errors': [], 'table': '-ts 36,29 | no'}}
    _, problems = pr.serve_shape([], 0, 'auto', tight)
    assert problems[0].message == 'the planner says this does not fit (fits: false):\n-ts 36,29 | no'


# --- the class: any pin pattern, any value --------------------------------------------------------------------

SPLITS = st.one_of(st.just([]), st.lists(st.integers(1, 64), min_size=2, max_size=2))
CTXS = st.one_of(st.just(0), st.integers(1, 64).map(lambda k: k * 4096))
CACHES = st.one_of(st.just('auto'), st.integers(0, 32768))


@settings(max_examples=60, deadline=None)
@given(split=SPLITS, ctx=CTXS, cache=CACHES)
def test_a_plan_serves_exactly_the_shape_it_was_made_for(split, ctx, cache):
    """Plan with any pin pattern: the serve role with the same values passes; with any one of them changed (pinned
    to another number, pinned where the plan chose, or left open where the plan pinned) it is refused, naming it."""
    settled = dict(SETTLED, tensor_split=split, ctx_size=ctx, cache_ram=cache)
    fit = {'fits': True, 'errors': [], 'warnings': [], 'tensor_split': [33, 32], 'ctx_size': 262144, 'parallel': 2,
           'ctx_per_slot': 131072, 'cache_ram_mib': 16384, 'floor_bytes': GIB,
           'devices': [{'name': 'ROCm0', 'layers': 33, 'free_bytes': 2 * GIB, 'vram_total_bytes': 32 * GIB},
                       {'name': 'ROCm1', 'layers': 32, 'free_bytes': 3 * GIB, 'vram_total_bytes': 32 * GIB}]}
    llm_plan = pr.plan_result(fit, settled)
    shape, problems = pr.serve_shape(split, ctx, cache, llm_plan, parallel=2, devices=['ROCm0', 'ROCm1'])
    assert problems == []
    assert shape['tensor_split'] == (split or [33, 32])
    assert shape['ctx_size'] == (ctx or 262144)
    assert shape['cache_ram'] == (16384 if cache == 'auto' else cache)
    for changed, var in (((split[::-1] + [1]) if split else [40, 25], 'llama_server_tensor_split'),):
        _, problems = pr.serve_shape(changed, ctx, cache, llm_plan, parallel=2)
        assert [p.variable for p in problems] == [var]
    for changed in ((ctx + 4096) if ctx else 8192, 0 if ctx else None):
        if changed is None:
            continue
        _, problems = pr.serve_shape(split, changed, cache, llm_plan, parallel=2)
        assert [p.variable for p in problems] == ['llama_server_ctx_size']
        assert 'The plan was not made for this shape' in problems[0].message
    _, problems = pr.serve_shape(split, ctx, 'auto' if cache != 'auto' else 1024, llm_plan, parallel=2)
    assert [p.variable for p in problems] == ['llama_server_cache_ram']


@settings(max_examples=40, deadline=None)
@given(words=st.lists(st.sampled_from(sorted(pr.INVENTORY_NAMES) + ['model', 'the', 'GiB', 'x']), max_size=8))
def test_no_planner_field_survives_the_renaming(words):
    text = ' '.join('serve.' + w if w in pr.INVENTORY_NAMES else w for w in words)
    assert not re.search(r'\bserve\.', pr.inventory_names(text))


def test_experts_on_the_host_reach_the_plan_from_the_settled_serve():
    """issue 38: llama_server_n_cpu_moe / _cpu_moe, settled, are fit_plan's serve.n_cpu_moe / serve.cpu_moe, and a
    24 GiB card plans a 30B-A3B-class model at 64k only with them (its messages in the names the operator edits)."""
    assert pr.fit_serve(SETTLED)['n_cpu_moe'] == 0 and pr.fit_serve(SETTLED)['cpu_moe'] is False
    settled = dict(SETTLED, backend='cuda', parallel=1, spec_type=[], ctx_size=65536, n_cpu_moe=24, cpu_moe=False)
    serve = pr.fit_serve(settled, floor_bytes=GIB // 2)
    assert serve['n_cpu_moe'] == 24 and serve['cpu_moe'] is False
    card = [{'name': 'RTX 3090', 'vram_total_bytes': 24 * GIB}]
    moe = lib.fixture('qwen3moe_30b_a3b')
    fit = plan(card, moe, serve, host_ram_bytes=64 * GIB)
    assert fit['fits'], fit['errors']
    assert fit['host_experts']['blocks'] == 24
    assert not plan(card, moe, pr.fit_serve(dict(settled, n_cpu_moe=0), floor_bytes=GIB // 2))['fits']
    small = plan(card, moe, pr.fit_serve(dict(settled, cpu_moe=True), floor_bytes=GIB // 2), host_ram_bytes=16 * GIB)
    assert any('llama_server_n_cpu_moe' in pr.inventory_names(e) for e in small['errors'])


@pytest.mark.parametrize('mode, memory', [('', 'mapped'), ('auto', 'mapped'), ('none', 'pinned')])
def test_the_load_mode_reaches_the_plan_and_says_how_the_host_holds_the_experts(mode, memory):
    """issue 38: llama_server_load_mode, settled (the empty string when unset), is fit_plan's serve.load_mode."""
    settled = dict(SETTLED, backend='cuda', parallel=1, spec_type=[], ctx_size=65536, n_cpu_moe=24, load_mode=mode)
    serve = pr.fit_serve(settled, floor_bytes=GIB // 2)
    assert serve['load_mode'] == (mode or 'auto')
    fit = plan([{'name': 'RTX 3090', 'vram_total_bytes': 24 * GIB}], lib.fixture('qwen3moe_30b_a3b'), serve,
               host_ram_bytes=64 * GIB)
    assert fit['host_experts']['memory'] == memory
    lines = pr.plan_result(fit, serve, host='moe')['capacity']['lines']
    assert lines[-2] == 'experts on the host: blocks 0-23 (llama_server_n_cpu_moe 24), 8.17 GiB %s (load mode %s)' % (
        memory, mode or 'auto')
    assert pr.inventory_names('serve.load_mode x') == 'llama_server_load_mode x'


def test_the_image_options_reach_the_plan_from_the_settled_serve():
    """issue 34: llama_server_mmproj_device / _mmproj_offload / _image_min_tokens / _image_max_tokens, settled, are
    fit_plan's serve.mmproj_device / mmproj_offload / image_min_tokens / image_max_tokens, and the plan books the
    projector where they say (its messages in the names the operator edits)."""
    plain = pr.fit_serve(SETTLED)
    assert plain['mmproj_offload'] is True and plain['image_max_tokens'] == 0 and 'mmproj_device' not in plain
    settled = dict(SETTLED, backend='cuda', parallel=1, spec_type=[], ctx_size=65536, mmproj_device='CUDA1',
                   mmproj_offload=True, image_min_tokens=0, image_max_tokens=8192)
    serve = pr.fit_serve(settled)
    assert (serve['mmproj_device'], serve['mmproj_offload'], serve['image_max_tokens']) == ('CUDA1', True, 8192)
    cards = [{'name': 'CUDA0', 'vram_total_bytes': 80 * GIB}, {'name': 'CUDA1', 'vram_total_bytes': 80 * GIB}]
    model, mmproj = lib.fixture('frank_medium'), lib.fixture('mmproj_bf16')
    fit = plan(cards, model, serve, mmproj=mmproj)
    assert fit['devices'][0]['mmproj_bytes'] == 0 and fit['devices'][1]['mmproj_bytes'] == fit['mmproj']['peak_bytes']
    assert fit['mmproj']['image_max_tokens'] == 8192 and fit['mmproj']['device'] == 'CUDA1'
    cpu = plan(cards, model, pr.fit_serve(dict(settled, mmproj_offload=False)), mmproj=mmproj)
    assert all(d['mmproj_bytes'] == 0 for d in cpu['devices']) and cpu['host']['mmproj_bytes'] > mmproj['mmproj_bytes']
    said = [pr.inventory_names(w) for w in cpu['warnings']]
    assert any('llama_server_mmproj_offload false' in w and 'llama_server_mmproj_device CUDA1 is not used' not in w
               for w in said), said
    assert any('llama_server_mmproj_device CUDA1 is not used' in w for w in said), said
    tight = plan(cards, model, pr.fit_serve(dict(settled, image_min_tokens=9000)), mmproj=mmproj)
    assert any('llama_server_image_min_tokens 9000' in pr.inventory_names(e) for e in tight['errors'])


def test_the_capacity_says_where_the_projector_is_and_its_peak():
    """issue 34: the operator reads the projector's device, its load and peak, and the largest image that fits."""
    settled = dict(SETTLED, backend='cuda', parallel=1, spec_type=[], ctx_size=65536, mmproj_device='CUDA1',
                   image_max_tokens=1024)
    cards = [{'name': 'CUDA0', 'vram_total_bytes': 80 * GIB}, {'name': 'CUDA1', 'vram_total_bytes': 80 * GIB}]
    fit = plan(cards, lib.fixture('frank_medium'), pr.fit_serve(settled), mmproj=lib.fixture('mmproj_bf16'))
    lines = pr.plan_result(fit, settled)['capacity']['lines']
    (line,) = [x for x in lines if x.startswith('projector ')]
    assert line.startswith('projector qwen3vl_merger on CUDA1: 0.9') and '1024 tokens (1024x1024 px)' in line
    assert 'the largest that keeps the floor 1024 tokens' in line
    bare = pr.plan_result(plan(cards, lib.fixture('frank_medium'), pr.fit_serve(settled)), settled)
    assert not [x for x in bare['capacity']['lines'] if x.startswith('projector ')]


@pytest.mark.parametrize('backend', sorted(fit_plan.PROFILES))
def test_the_table_says_its_profile_and_how_far_to_trust_it(backend):
    # issue 37: each capacity table names its backend profile and that profile's measured accuracy, on its first line
    assert set(fit_plan.PROFILE_ACCURACY) == set(fit_plan.PROFILES)
    fit, _ = fit_for(SETTLED)
    line = pr.plan_result(fit, dict(SETTLED, backend=backend), host='h')['capacity']['lines'][0]
    assert line.startswith('capacity of h (%s profile, headers ' % backend)
    accuracy = fit_plan.PROFILE_ACCURACY[backend]
    assert line.endswith('; profile %s)' % accuracy) and re.search(r'\d', accuracy) and 'placeholder' not in line


# --- llama_server_n_cpu_moe: auto (issue 38) -----------------------------------------------------------------

# two full 40960-token windows do not fit one 24 GiB card with every expert on it
MOE_AUTO = dict(SETTLED, backend='cuda', parallel=2, spec_type=[], tensor_split=[], ctx_size=0, n_cpu_moe='auto')
CARD_24 = [{'name': 'RTX 3090', 'vram_total_bytes': 24 * GIB}]


def moe_plan(settled):
    serve = pr.fit_serve(settled, floor_bytes=GIB // 2)
    fit = plan(CARD_24, lib.fixture('qwen3moe_30b_a3b'), serve, host_ram_bytes=64 * GIB)
    return fit, pr.plan_result(fit, settled, host='moe')


def test_n_cpu_moe_auto_is_the_planners_number_and_says_so():
    """auto reaches fit_plan as auto; its choice is the published n_cpu_moe (origin planned), the capacity table and
    the choice's reason say the planner chose it, and the serve role with auto serves that number."""
    assert pr.fit_serve(MOE_AUTO)['n_cpu_moe'] == 'auto'
    fit, out = moe_plan(MOE_AUTO)
    n = fit['n_cpu_moe_choice']['n_cpu_moe']
    assert fit['fits'] and 0 < n < 48
    assert out['n_cpu_moe'] == n and out['origin']['n_cpu_moe'] == 'planned'
    assert ('experts on the host: blocks 0-%d (llama_server_n_cpu_moe %d, chosen by the planner)' % (n - 1, n)
            in out['capacity']['lines'][-2])
    reason = out['fit']['n_cpu_moe_choice']['reason']
    assert reason.startswith('llama_server_n_cpu_moe chosen by the planner: %d' % n) and 'serve.' not in reason
    shape, problems = pr.serve_shape([], 0, 'auto', out, n_cpu_moe='auto')
    assert problems == [] and shape['n_cpu_moe'] == n and shape['origin']['n_cpu_moe'] == 'planned'
    # the same number pinned: the same devices, and nothing chosen
    fit_pinned, pinned = moe_plan(dict(MOE_AUTO, n_cpu_moe=n))
    assert fit_pinned['n_cpu_moe_choice'] is None and fit_pinned['devices'] == fit['devices']
    assert pinned['n_cpu_moe'] == n and pinned['origin']['n_cpu_moe'] == 'pinned'
    assert 'chosen by the planner' not in ' '.join(pinned['capacity']['lines'])


@pytest.mark.parametrize('role_value', [0, 24])
def test_a_plan_that_chose_n_cpu_moe_is_refused_by_a_role_that_pinned_it(role_value):
    _, out = moe_plan(MOE_AUTO)
    _, problems = pr.serve_shape([], 0, 'auto', out, n_cpu_moe=role_value)
    assert [p.variable for p in problems] == ['llama_server_n_cpu_moe']
    assert 'The plan was not made for this shape' in problems[0].message
    # and the other way round: a pinned plan, a role left at auto
    _, pinned = moe_plan(dict(MOE_AUTO, n_cpu_moe=24))
    _, problems = pr.serve_shape([], 0, 'auto', pinned, n_cpu_moe='auto')
    assert [p.variable for p in problems] == ['llama_server_n_cpu_moe']
    _, problems = pr.serve_shape([], 0, 'auto', pinned, n_cpu_moe=role_value)
    assert [p.variable for p in problems] == ([] if role_value == 24 else ['llama_server_n_cpu_moe'])


def test_n_cpu_moe_auto_with_nothing_to_choose_is_zero_and_says_so():
    """A pinned context leaves the planner nothing to choose: auto is 0, planned, every expert on the GPUs; a dense
    model says nothing of experts."""
    fit, out = moe_plan(dict(MOE_AUTO, ctx_size=8192))
    assert fit['fits'] and fit['n_cpu_moe_choice'] is None
    assert out['n_cpu_moe'] == 0 and out['origin']['n_cpu_moe'] == 'planned'
    assert 'experts on the host: none (llama_server_n_cpu_moe 0, chosen by the planner)' in out['capacity']['lines']
    dense_fit, _ = fit_for(dict(SETTLED, n_cpu_moe='auto'))
    dense = pr.plan_result(dense_fit, dict(SETTLED, n_cpu_moe='auto'))
    assert dense['n_cpu_moe'] == 0 and not [x for x in dense['capacity']['lines'] if x.startswith('experts')]


def test_without_a_plan_n_cpu_moe_auto_is_llama_cpps_zero_and_an_older_plan_is_read_as_made_for_the_role():
    shape, problems = pr.serve_shape([], 8192, 'auto', {}, n_cpu_moe='auto')
    assert problems == [] and shape['n_cpu_moe'] == 0 and shape['origin']['n_cpu_moe'] == 'planned'
    shape, problems = pr.serve_shape([], 8192, 'auto', {}, n_cpu_moe=12)
    assert problems == [] and shape['n_cpu_moe'] == 12 and shape['origin']['n_cpu_moe'] == 'pinned'
    fit, _ = fit_for(SETTLED)
    older = pr.plan_result(fit, SETTLED)
    del older['n_cpu_moe'], older['origin']['n_cpu_moe']
    shape, problems = pr.serve_shape([], 0, 'auto', older, parallel=2, n_cpu_moe=4)
    assert problems == [] and shape['n_cpu_moe'] == 4 and shape['origin']['n_cpu_moe'] == 'pinned'
