# -*- coding: utf-8 -*-
"""The env file template: every value survives the trip through systemd's quoting, the checker accepts what
the role writes, and the planner's narrative lands in the plan file beside it - never in the env file, whose
every byte then follows from the values the service reads."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


import pytest

from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import load_role_script, render, role_file

checker = load_role_script('llama_server', 'llama_env_check')

PLAN = {
    'fits': True, 'tensor_split': [35, 30], 'ctx_size': 393216, 'ctx_per_slot': 196608, 'gap_bytes': 622770257,
    'cache_ram_mib': 16384,
    'cache_ram': {'kv_bytes_per_token': 65536, 'draft_kv_bytes_per_token': 4096, 'bytes_per_token': 69632,
                  'swa_bytes_per_slot': 0, 'recurrent_bytes_per_slot': 158334976, 'slot_tokens': 196608,
                  'slot_state_bytes': 13848543232, 'auto_mib': 13312, 'mib': 16384},
    'devices': [
        {'name': 'ROCm0', 'layers': 35, 'weights_bytes': 16e9, 'kv_bytes': 5.6e9, 'recurrent_bytes': 1.6e8,
         'draft_bytes': 0, 'mmproj_bytes': 9.3e8, 'compute_bytes': 1.1e9, 'total_bytes': 32.85e9, 'free_bytes': 1.36e9},
        {'name': 'ROCm1', 'layers': 30, 'weights_bytes': 14e9, 'kv_bytes': 5.6e9, 'recurrent_bytes': 1.6e8,
         'draft_bytes': 4.5e9, 'mmproj_bytes': 0, 'compute_bytes': 2.0e9, 'total_bytes': 32.2e9, 'free_bytes': 1.98e9},
    ],
    'table': '-ts    GPU0 free  GPU1 free  gap\n34,31  2.95       1.08       1.87\n35,30  1.27       1.85       0.58',
    'warnings': ['ctx per slot 196608 is beyond nothing; rope: positions past the trained 262144 extrapolate'],
    'errors': [],
}

BASE = {
    'llama_server_alias': 'frank-medium', 'llama_server_model_path': '/home/dank/models/t.gguf',
    'llama_server_drafter_path': '/home/dank/models/d.gguf', 'llama_server_mmproj_path': '/home/dank/models/mm.gguf',
    'llama_server_parallel': 2, 'llama_server_threads_batch': 8,
    'shape_tensor_split': [35, 30], 'shape_ctx_size': 393216,
    'shape_cache_ram': 16384, '_llama_server_release_target': '/opt/llama.cpp/releases/fb27a525',
    'llama_server_devices': ['ROCm0', 'ROCm1'], 'llama_server_spec_type': ['draft-dflash', 'ngram-mod'],
}


def rendered(**overrides):
    variables = dict(BASE)
    variables.update(overrides)
    text = render('llama_server', 'llama-server.env.j2', variables)
    values, problems = checker.parse(text)
    problems += checker.check(values)
    return text, values, problems


def narrative(**overrides):
    variables = dict(BASE)
    variables.update(overrides)
    return render('llama_server', 'llama-server.plan.txt.j2', variables)


def test_the_file_passes_its_own_checker_and_carries_every_tunable():
    text, values, problems = rendered(_llama_server_plan=PLAN)
    assert problems == []
    reasons = __import__('yaml').safe_load(open(role_file('llama_server', 'vars', 'main.yml')))['_llama_server_env_reasons']
    assert set(values) == set(reasons) - {'LLAMA_API_KEY'}
    for name in values:  # every variable has its reason right above it
        before = text.split('\n' + name + '=', 1)[0].rstrip('\n').splitlines()[-1]
        assert before.startswith('# '), name
    assert values['SPEC_TYPE'] == 'draft-dflash,ngram-mod'
    assert values['TENSOR_SPLIT'] == '35,30' and values['CTX_SIZE'] == '393216' and values['CACHE_RAM'] == '16384'
    assert values['LLAMA_RELEASE'] == '/opt/llama.cpp/releases/fb27a525'
    assert values['FIT'] == 'off' and values['METRICS'] == 'on' and values['VISION'] == 'off'


def test_the_plan_is_written_beside_the_env_file():
    text = narrative(_llama_server_plan=PLAN)
    comments = [line for line in text.splitlines() if line.startswith('#')]
    joined = '\n'.join(comments)
    assert '# fits: True. Split 35:30 over' in joined
    assert 'ctx 393216 over 2 slot(s) = 196608 positions per slot' in joined
    assert "Why this split: the planner's balanced split" in joined
    assert [c for c in comments if c.startswith('# ROCm1') and ' 30 ' in c and '4.19' in c]  # draft GiB on ROCm1
    assert '#   35,30  1.27       1.85       0.58' in comments
    assert '#   per token: 65536 B KV + 4096 B draft KV = 69632 B' in comments
    assert '#   one full slot: 196608 tokens x 69632 B + 151.0 MiB recurrent + 0.0 MiB window = 12.90 GiB' in comments
    assert '#   CACHE_RAM 16384 MiB stores ~246723 tokens: it holds one full slot' in comments
    text = narrative(_llama_server_plan=PLAN, shape_cache_ram=8192)
    assert '#   CACHE_RAM 8192 MiB stores ~123361 tokens: it CANNOT hold one full slot' in text
    assert [c for c in comments if 'rope' in c and c.startswith('# - ')]


def test_the_env_file_holds_no_narrative_only_arithmetic_of_its_own_values():
    text, values, problems = rendered(_llama_server_plan=PLAN)
    assert problems == []
    for narrative_line in ('fits:', 'per device (GiB)', 'Cache-ram law', 'Warnings', 'candidate splits', 'rope',
                           'Why this split', '1.27', '4.19', '12.90'):
        assert narrative_line not in text, narrative_line
    assert '# CTX_SIZE 393216 / PARALLEL 2 = 196608 positions per slot.' in text
    assert '# TENSOR_SPLIT 35:30 = 65 layers over ROCm0, ROCm1.' in text
    assert '/etc/llama-server/llama-server.plan.txt' in text  # where the narrative went
    assert (values['CTX_SIZE'], values['PARALLEL'], values['TENSOR_SPLIT']) == ('393216', '2', '35,30')


def test_a_new_narrative_leaves_the_env_file_byte_identical():
    """What decides a restart: any change of the plan that is not a value of the env file changes nothing there."""
    reworded = dict(PLAN, warnings=['rope: positions past the trained window extrapolate (reworded)'],
                    table=PLAN['table'] + '\n36,29  0.50       2.60       2.10', gap_bytes=1, fits='yes',
                    devices=[dict(d, free_bytes=d['free_bytes'] / 2) for d in PLAN['devices']])
    assert rendered(_llama_server_plan=PLAN)[0] == rendered(_llama_server_plan=reworded)[0] == \
        rendered(_llama_server_plan={})[0]
    assert narrative(_llama_server_plan=PLAN) != narrative(_llama_server_plan=reworded)
    # a value does change it
    assert rendered(_llama_server_plan=PLAN)[0] != rendered(_llama_server_plan=PLAN, shape_cache_ram=8192)[0]


def test_a_pinned_split_says_so_and_no_plan_says_so():
    text = narrative(_llama_server_plan=PLAN, llama_server_tensor_split=[35, 30])
    assert 'Why this split: pinned by the inventory' in text
    text = narrative(_llama_server_plan={})
    assert 'No plan was given' in text and 'per device (GiB)' not in text
    assert rendered(_llama_server_plan={})[2] == []


@pytest.mark.parametrize('key', ['plain-key', "it's a $key with \"quotes\" and \\ and `ticks`", 'sk-ABC/+=='])
def test_the_api_key_survives_the_quoting(key):
    text, values, problems = rendered(llama_server_api_key=key)
    assert problems == []
    assert values['LLAMA_API_KEY'] == key


def test_no_key_no_line():
    text, values, _ = rendered(llama_server_api_key='')
    assert 'LLAMA_API_KEY' not in values


def test_kwargs_extra_args_and_extra_env_survive():
    _, values, problems = rendered(
        llama_server_chat_template_kwargs={'enable_thinking': True, 'preserve_thinking': True},
        llama_server_extra_args=['--override-kv', "a=str:it's x", '--no-webui'],
        llama_server_extra_env={'GGML_CUDA_NO_PINNED': '1', 'ROCBLAS_LAYER': '0'},
        llama_server_env_comments={'ROCBLAS_LAYER': 'operator: rocBLAS logging off'})
    assert problems == []
    assert values['CHAT_TEMPLATE_KWARGS'] == '{"enable_thinking":true,"preserve_thinking":true}'
    assert values['EXTRA_ARGS'] == "--override-kv 'a=str:it'\"'\"'s x' --no-webui"
    assert values['GGML_CUDA_NO_PINNED'] == '1' and values['ROCBLAS_LAYER'] == '0'


def test_yaml_booleans_become_on_off():
    _, values, problems = rendered(llama_server_fit=False, llama_server_flash_attn='auto', llama_server_vision=True,
                                   llama_server_reasoning=True, llama_server_metrics=False)
    assert problems == []
    assert (values['FIT'], values['FLASH_ATTN'], values['VISION'], values['REASONING'], values['METRICS']) == \
        ('off', 'auto', 'on', 'on', 'off')


def test_the_unit_hides_integrated_gpus_and_limits_devices_per_backend():
    common = {'_llama_server_user_groups': ['render', 'video']}
    hip = render('llama_server', 'llama-server.service.j2',
                 dict(common, llama_server_backend='hip', llama_server_hip_visible_devices='0,1'))
    assert 'Environment=HIP_VISIBLE_DEVICES=0,1\n' in hip
    assert 'DevicePolicy=closed\nDeviceAllow=/dev/kfd rw\nDeviceAllow=char-drm rw\n' in hip
    assert 'SupplementaryGroups=render video\n' in hip
    for line in ('LimitMEMLOCK=infinity', 'NoNewPrivileges=yes', 'ProtectSystem=strict', 'PrivateTmp=yes',
                 'Restart=on-failure', 'User=llama', 'RestartPreventExitStatus=78'):
        assert '\n' + line + '\n' in hip
    cpu = render('llama_server', 'llama-server.service.j2',
                 dict(common, llama_server_backend='cpu', llama_server_hip_visible_devices='0'))
    assert 'HIP_VISIBLE_DEVICES' not in cpu and 'DeviceAllow' not in cpu and 'DevicePolicy=closed' in cpu
    cuda = render('llama_server', 'llama-server.service.j2',
                  dict(common, llama_server_backend='cuda', llama_server_cuda_visible_devices='0'))
    assert 'Environment=CUDA_VISIBLE_DEVICES=0\n' in cuda and 'DeviceAllow=/dev/nvidiactl rw' in cuda


def test_a_real_plan_of_a_generated_model_renders_and_passes_the_checker(tmp_path):
    """The planner's actual result shape (not a hand-written dict) on generated qwen35+MTP headers."""
    import gen_models
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import plan
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import facts_from_gguf
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import read_gguf
    entry = gen_models.write_model('qwen35-mtp', str(tmp_path / 'qwen35-mtp.gguf'))
    facts = facts_from_gguf(read_gguf(entry['path']))
    gpus = [{'name': 'RPC0', 'vram_total_bytes': 512 * 1048576}, {'name': 'RPC1', 'vram_total_bytes': 512 * 1048576}]
    result = plan(gpus, facts, {'backend': 'cpu', 'ctx_size': 4096, 'parallel': 2, 'tensor_split': 'auto',
                                'spec_type': ['draft-mtp'], 'spec_draft_n_max': 3, 'cache_ram_mib': 'auto'},
                  host_ram_bytes=8 * 1073741824)
    assert result['fits'], result['errors']
    text, values, problems = rendered(
        _llama_server_plan=result, llama_server_spec_type=['draft-mtp'], llama_server_devices=['RPC0', 'RPC1'],
        shape_tensor_split=result['tensor_split'], shape_ctx_size=result['ctx_size'],
        shape_cache_ram=result['cache_ram_mib'])
    assert problems == []
    assert values['TENSOR_SPLIT'] == ','.join(str(x) for x in result['tensor_split'])
    assert values['CACHE_RAM'] == str(result['cache_ram_mib'])
    comments = narrative(
        _llama_server_plan=result, llama_server_spec_type=['draft-mtp'], llama_server_devices=['RPC0', 'RPC1'],
        shape_tensor_split=result['tensor_split'], shape_ctx_size=result['ctx_size'],
        shape_cache_ram=result['cache_ram_mib']).splitlines()
    assert [c for c in comments if c.startswith('# RPC0 ')] and [c for c in comments if c.startswith('# RPC1 ')]
    assert '#   ' + result['table'].splitlines()[0] in comments
    assert [c for c in comments if c.startswith('#   per token: ') and 'draft KV' in c]
    assert [c for c in comments if 'it holds one full slot' in c]


def test_the_comments_say_where_each_value_came_from():
    # the preflight settles shape_origin from llm_plan: a value the planner chose says so even
    # where a playbook handed the role the planner's number (what the deploy playbook used to do)
    planned = {'tensor_split': 'planned', 'ctx_size': 'planned', 'cache_ram': 'planned'}
    text = narrative(_llama_server_plan=PLAN, llama_server_tensor_split=[35, 30], llama_server_ctx_size=393216,
                     shape_origin=planned)
    assert 'pinned by the inventory' not in text
    assert "Why this split: the planner's balanced split" in text
    assert 'Why this ctx: the largest the planner found to fit' in text
    assert "Why this cache-ram: the planner's cap" in text
    pinned = {'tensor_split': 'pinned', 'ctx_size': 'pinned', 'cache_ram': 'pinned'}
    text = narrative(_llama_server_plan=PLAN, shape_origin=pinned)
    assert 'Why this split: pinned by the inventory (llama_server_tensor_split)' in text
    assert 'Why this ctx: pinned by the inventory (llama_server_ctx_size)' in text
    assert 'Why this cache-ram: pinned by the inventory (llama_server_cache_ram)' in text


def test_an_llm_plan_that_has_not_planned_says_why():
    text = narrative(_llama_server_plan={}, llama_server_llm_plan={
        'planned': False, 'cannot_plan': 'the payload is still a placeholder', 'origin': {}})
    assert 'No plan was given' in text
    assert '# llm_plan has not planned yet: the payload is still a placeholder.' in text


def test_experts_on_the_host_are_carried_as_settings():
    """issue 38: llama_server_n_cpu_moe / llama_server_cpu_moe reach the env file (and so --n-cpu-moe / --cpu-moe)."""
    _, values, problems = rendered()
    assert problems == [] and (values['N_CPU_MOE'], values['CPU_MOE']) == ('0', 'off')
    _, values, problems = rendered(llama_server_n_cpu_moe=24, llama_server_cpu_moe=True)
    assert problems == [] and (values['N_CPU_MOE'], values['CPU_MOE']) == ('24', 'on')


def test_the_planners_n_cpu_moe_is_what_the_env_file_carries_and_the_plan_file_says_why():
    """issue 38: with llama_server_n_cpu_moe auto the preflight settles the plan's number
    (shape_n_cpu_moe): the env file carries it, never the word, and the plan file gives the reason."""
    reason = ('llama_server_n_cpu_moe chosen by the planner: 7 -- the routed experts of blocks 0-6 stay on the host, '
              'the fewest blocks whose plan reaches the 40960-token cap per slot')
    plan = dict(PLAN, n_cpu_moe_choice={'n_cpu_moe': 7, 'reason': reason})
    origin = {'tensor_split': 'planned', 'ctx_size': 'planned', 'cache_ram': 'planned', 'n_cpu_moe': 'planned'}
    _, values, problems = rendered(_llama_server_plan=plan, llama_server_n_cpu_moe='auto', shape_n_cpu_moe=7)
    assert problems == [] and values['N_CPU_MOE'] == '7'
    text = narrative(_llama_server_plan=plan, shape_origin=origin, shape_n_cpu_moe=7)
    assert '# Why N_CPU_MOE 7: llama_server_n_cpu_moe chosen by the planner: 7 -- the routed experts' in text
    lines = text.splitlines()
    first = lines.index(next(x for x in lines if x.startswith('# Why N_CPU_MOE 7: ')))
    assert lines[first + 1].startswith('#   ') and 'per slot' in lines[first + 1]   # the reason wrapped, indented
    # auto with nothing to choose: 0, and the plan file says the planner kept every expert on the GPUs
    _, values, _ = rendered(_llama_server_plan=PLAN, llama_server_n_cpu_moe='auto', shape_n_cpu_moe=0)
    assert values['N_CPU_MOE'] == '0'
    text = narrative(_llama_server_plan=PLAN, shape_origin=origin, shape_n_cpu_moe=0)
    assert '# Why N_CPU_MOE 0: llama_server_n_cpu_moe auto - the planner kept every expert on the GPUs.' in text
    # pinned: the plan file says nothing of it (the env file's reason covers it)
    text = narrative(_llama_server_plan=PLAN, shape_origin=dict(origin, n_cpu_moe='pinned'))
    assert 'Why N_CPU_MOE' not in text
    # the word itself never reaches the env file: its checker refuses it
    _, _, problems = rendered(llama_server_n_cpu_moe='auto')
    assert [p for p in problems if 'N_CPU_MOE' in p], problems


@pytest.mark.parametrize('mode', ['auto', 'none', 'mmap+mlock'])
def test_the_load_mode_is_carried_as_a_setting(mode):
    """issue 38: llama_server_load_mode reaches the env file (and so --load-mode), auto unless set."""
    _, values, problems = rendered() if mode == 'auto' else rendered(llama_server_load_mode=mode)
    assert problems == [] and values['LOAD_MODE'] == mode


def test_the_image_options_are_carried_as_settings():
    """issue 34: the projector's device, offload and image-token limits reach the env file (and so the flags)."""
    _, values, problems = rendered()
    assert problems == []
    assert (values['MMPROJ_DEVICE'], values['MMPROJ_OFFLOAD'], values['IMAGE_MIN_TOKENS'], values['IMAGE_MAX_TOKENS']) \
        == ('', 'on', '0', '0')
    _, values, problems = rendered(llama_server_mmproj_device='ROCm1', llama_server_mmproj_offload=False,
                                   llama_server_image_min_tokens=64, llama_server_image_max_tokens=8192)
    assert problems == []
    assert (values['MMPROJ_DEVICE'], values['MMPROJ_OFFLOAD'], values['IMAGE_MIN_TOKENS'], values['IMAGE_MAX_TOKENS']) \
        == ('ROCm1', 'off', '64', '8192')
