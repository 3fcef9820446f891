# -*- coding: utf-8 -*-
"""The settle step (plugins/module_utils/plan/settle.py): every problem of an inventory at once, each naming the variable
the operator edits; the serve role's inputs derived from it."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import settle as s
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader
from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))


def _specs():
    out = {}
    for path in glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')):
        with open(path) as handle:
            out[path.split(os.sep)[-3]] = role_yaml.load(handle)['argument_specs']
    return out


OPTIONS = s.spec_options(_specs())
TARGET = {'name': 'm', 'role': 'target', 'repo': 'o/m', 'revision': 'main', 'file': 'm.gguf', 'url': 'http://x/m.gguf',
          'size': 10, 'sha256': 'a' * 64}
BASE = {'gguf_fetch_manifest': [TARGET], 'gguf_fetch_models_dir': '/models', 'llama_server_parallel': 2,
        'llama_server_ctx_size': 8192, 'llama_server_tensor_split': [], 'llama_server_devices': []}


def run(values, given=None, **kw):
    values = dict(BASE, **values)
    return s.settle(values, OPTIONS, list(values) if given is None else given, host='newhost', **kw)


def messages(out):
    return [p.message for p in out['problems']]


def test_a_clean_inventory_settles_with_the_serve_inputs():
    out = run({'llama_cpp_build_prefix': '/home/dank/llama.cpp', 'llama_server_cache_ram': 'auto',
               'runtime_retire_runtimes': [{'name': 'r', 'units': [{'name': 'old.service'}],
                                            'quadlets': [{'path': '/q/radiance.container'}, {'path': '/q/net.network'}]}]})
    assert messages(out) == []
    assert out['install_prefix'] == '/home/dank/llama.cpp'
    assert out['payload_paths'] == {'target': '/models/m/m.gguf'}
    assert out['port_handover_units'] == ['old.service', 'radiance.service', 'net-network.service']
    assert out['serve']['ctx_size'] == 8192 and out['serve']['parallel'] == 2
    assert out['origin'] == {'tensor_split': 'planned', 'ctx_size': 'pinned', 'cache_ram': 'planned', 'n_cpu_moe': 'pinned'}


def test_the_service_record_says_where_the_served_shape_is():
    out = run({'llama_server_service_name': 'frank-medium', 'llama_server_env_file': '/etc/ls/frank-medium.env',
               'llama_server_user': 'dank'})
    assert out['service'] == {'name': 'frank-medium', 'env_file': '/etc/ls/frank-medium.env', 'user': 'dank'}
    # a value refused above is no path: empty, never the refused value
    out = run({'llama_server_service_name': 'frank-medium', 'llama_server_env_file': ['x'], 'llama_server_user': 7})
    assert out['service'] == {'name': 'frank-medium', 'env_file': '', 'user': ''}
    assert any(p.variable == 'llama_server_env_file' for p in out['problems'])


def test_every_problem_is_reported_at_once_naming_the_variable():
    out = run({'llama_server_ctx_sise': 4096, 'llama_server_parallel': 'two',
               'llama_server_tensor_split': '32,33', 'llama_server_vision': 'maybe',
               'gguf_fetch_manifest': [dict(TARGET, sha256='FILL-oid')]})
    text = '\n'.join(messages(out))
    assert 'llama_server_ctx_sise is not a variable of this collection: did you mean llama_server_ctx_size?' in text
    assert "llama_server_parallel is 'two', not a whole number" in text
    assert "llama_server_tensor_split is the string '32,33', not a list" in text and '[32, 33]' in text
    assert "llama_server_vision is 'maybe', not a boolean" in text
    assert 'gguf_fetch_manifest [target]: sha256 FILL-oid' in text, text
    assert len(out['problems']) == 5
    # never an internal name
    for internal in ('serve.parallel', 'llm_plan_floor_bytes', 'option token', 'llm_plan_serve'):
        assert internal not in text


@pytest.mark.parametrize('value,spec,expected', [
    ('3', {'type': 'int'}, 3), (3.0, {'type': 'int'}, 3), ('yes', {'type': 'bool'}, True), ('off', {'type': 'bool'}, False),
    ([1, '2'], {'type': 'list', 'elements': 'int'}, [1, 2]), ('0.5', {'type': 'float'}, 0.5), (7, {'type': 'str'}, '7'),
])
def test_types_by_ansibles_rules(value, spec, expected):
    assert s.check_type('x', value, spec) == expected


@pytest.mark.parametrize('value,spec,words', [
    ('two', {'type': 'int'}, 'not a whole number'), (2.5, {'type': 'int'}, 'not a whole number'),
    (True, {'type': 'int'}, 'not a whole number'), ('flase', {'type': 'bool'}, 'not a boolean'),
    (2, {'type': 'bool'}, 'not a boolean'), ('a,b', {'type': 'list'}, 'not a list'),
    (True, {'type': 'str'}, 'quote it'), ('q9', {'type': 'str', 'choices': ['f16']}, 'not one of f16'),
    ({'a': 1}, {'type': 'list'}, 'not a list'), ([], {'type': 'dict'}, 'not a mapping'),
    (None, {'type': 'int'}, 'empty (null)'), (['x'], {'type': 'list', 'elements': 'int'}, 'x[0]'),
])
def test_no_silent_coercion(value, spec, words):
    with pytest.raises(s.Invalid) as exc:
        s.check_type('x', value, spec)
    assert words in str(exc.value) and str(exc.value).startswith('x')


def test_unknown_names_only_under_the_prefixes_and_never_private():
    problems = s.unknown_names(['llama_server_ctx_sise', '_llama_server_x', '__llm_plan_y', 'other_thing',
                                'llm_plan_flor_bytes', 'dankfleet_whatever_zzz'], s.known_names(OPTIONS))
    assert [p.variable for p in problems] == ['dankfleet_whatever_zzz', 'llama_server_ctx_sise', 'llm_plan_flor_bytes']
    assert 'did you mean llm_plan_floor_bytes?' in problems[2].message
    assert 'did you mean' not in problems[0].message


def test_the_serve_preflights_cross_checks():
    out = run({'llama_server_parallel': 3, 'llama_server_ctx_size': 8192, 'llama_server_devices': ['ROCm0', 'ROCm1'],
               'llama_server_tensor_split': [1, 2, 3], 'llama_server_extra_args': ['--ctx-size', '4096'],
               'llama_server_extra_env': {'TEMP': '/tmp'}, 'llama_server_batch_size': 256,
               'llama_server_ubatch_size': 512, 'llama_server_spec_type': ['draft-mtp', 'draft-dflash'],
               'llama_server_vision': True, 'llama_server_port': 70000})
    by = dict((p.variable, p.message) for p in out['problems'])
    assert 'multiple of 3 (8190 or 8193)' in by['llama_server_ctx_size']
    assert 'set llama_server_ctx_size' in by['llama_server_extra_args']
    assert 'HIP reads TEMP, HOST and GPU_MAX_HEAP_SIZE bare' in by['llama_server_extra_env']
    assert 'one share per device' in by['llama_server_tensor_split']
    assert 'larger than llama_server_batch_size' in by['llama_server_ubatch_size']
    assert 'ONE draft context' in by['llama_server_spec_type']
    assert 'role: mmproj' in by['llama_server_vision']
    assert '1-65535' in by['llama_server_port']


def test_a_model_backed_drafter_needs_a_drafter_and_vision_an_mmproj():
    manifest = [TARGET, dict(TARGET, role='drafter', file='d.gguf'), dict(TARGET, role='mmproj', file='p.gguf')]
    assert messages(run({'llama_server_spec_type': ['draft-dflash'], 'llama_server_vision': True,
                         'gguf_fetch_manifest': manifest})) == []
    msgs = messages(run({'llama_server_spec_type': ['draft-dflash']}))
    assert len(msgs) == 1 and 'role: drafter' in msgs[0]


def test_a_new_host_without_host_vars_is_told_what_to_write():
    out = run({'gguf_fetch_manifest': []})
    (msg,) = messages(out)
    assert 'newhost names no target model' in msg and 'host_vars/newhost.yml' in msg


def test_the_inventorys_model_path_stands_in_for_a_manifest():
    out = run({'gguf_fetch_manifest': [], 'llama_server_model_path': '/srv/m.gguf'})
    assert messages(out) == [] and out['payload_paths'] == {'target': '/srv/m.gguf'}


def test_placeholders_of_every_kind_in_one_list_and_listed_without_refusing():
    values = {'runtime_retire_runtimes': [{'name': 'r', 'quadlets': [{'path': '/q/FILL-q.container'}]}],
              'gguf_fetch_manifest': [dict(TARGET, size=0, sha256='FILL-oid')],
              'llama_cpp_build_toolchain_sha256': 'FILL-sha'}
    out = run(values, placeholders_refused=False)
    assert messages(out) == []
    assert s.checklist_lines(out['checklist']) == [
        'gguf_fetch_manifest [target]: size 0 (the file\'s size on the Hub), sha256 FILL-oid',
        'llama_cpp_build_toolchain_sha256: FILL-sha (or nothing: set llama_cpp_build_adopt_from to a tree already built on '
        'the host, which is adopted instead)',
        'runtime_retire_runtimes [r]: quadlets[0].path FILL-q.container']
    # a run that changes the host refuses the same lines, one each, naming the variable the operator edits
    refused = run(values)
    assert messages(refused) == [line + ' - still to fill' for line in s.checklist_lines(out['checklist'])]
    assert [p.variable for p in refused['problems']] == ['gguf_fetch_manifest', 'llama_cpp_build_toolchain_sha256',
                                                         'runtime_retire_runtimes']


def test_a_derived_copy_of_a_placeholder_is_listed_once_under_the_variable_written_out():
    runtimes = [{'name': 'r', 'files': ['/FILL-dir/x.sh']}]
    items = s.placeholders({'dankfleet_serving_now': runtimes, 'runtime_retire_runtimes': runtimes},
                           derived={'runtime_retire_runtimes'})
    assert [i['variable'] for i in items] == ['dankfleet_serving_now']


def test_every_documented_dankfleet_name_is_used_by_the_collection():
    text = ''
    for pattern in ('README.md', 'docs/*.md', 'inventory/*/README.md', 'inventory/*/group_vars/*/*.yml', 'inventory/*/host_vars/*.yml',
                    'roles/*/defaults/main.yml', 'playbooks/*.yml', 'playbooks/tasks/*.yml', '.config/molecule/*.yml'):
        for path in glob.glob(os.path.join(REPO, pattern)):
            with open(path) as handle:
                text += handle.read()
    for name in s.DANKFLEET_NAMES:
        assert name in text, name


def test_a_placeholder_is_listed_under_the_variable_written_out_whatever_its_name():
    files = {'big': {'file': 'm.gguf', 'url': 'http://x', 'size': 0, 'sha256': 'FILL-oid'}}
    manifest = [dict(files['big'], role='target', name='m')]
    out = run({'gguf_fetch_manifest': manifest, 'model_files': files}, placeholders_refused=False,
              derived={'gguf_fetch_manifest'}, scanned={'model_files'})
    assert s.checklist_lines(out['checklist']) == ["model_files.big: size 0 (the file's size on the Hub), sha256 FILL-oid"]


@pytest.mark.parametrize('backend,listed', [('hip', True), ('cpu', False)])
def test_a_placeholder_in_a_setting_the_host_does_not_use_is_nothing_to_fill(backend, listed):
    out = run({'llama_cpp_build_backend': backend, 'llama_cpp_build_toolchain_sha256': 'FILL-sha'})
    assert bool(out['checklist']) is listed and bool(out['problems']) is listed


@pytest.mark.parametrize('adopt_from,listed', [('', True), ('/home/dank/llama.cpp-fb27a525', False)])
def test_an_adopted_tree_leaves_no_toolchain_to_fill(adopt_from, listed):
    """Issue 36: adoption proves the hand-built tree with its bundled toolchain; the tarball's sha256 is nothing to
    fill then (the checklist lists only what adoption cannot prove)."""
    out = run({'llama_cpp_build_backend': 'hip', 'llama_cpp_build_toolchain_sha256': 'FILL-sha',
               'llama_cpp_build_adopt_from': adopt_from})
    assert bool(out['checklist']) is listed and bool(out['problems']) is listed


# --- issue 33: every nested value typed from the spec, bounded, names matched in full -------------------------

def _where(out):
    return dict((p.message.split(' ', 1)[0].rstrip(':'), p.message) for p in out['problems'])


@pytest.mark.parametrize('values,where', [
    ({'gguf_fetch_manifest': [dict(TARGET, role=['target'])]}, 'gguf_fetch_manifest[0].role'),
    ({'gguf_fetch_manifest': [dict(TARGET, dest_dir=7)]}, 'gguf_fetch_manifest[0].dest_dir'),
    ({'gguf_fetch_manifest': [TARGET, dict(TARGET, role='drafter', size='big')]}, 'gguf_fetch_manifest[1].size'),
    ({'gguf_fetch_manifest': [TARGET, dict((k, v) for k, v in TARGET.items() if k != 'sha256')]},
     'gguf_fetch_manifest[1].sha256'),
    ({'gguf_fetch_manifest': [dict(TARGET, sha256='a' * 64 + '\n')]}, 'gguf_fetch_manifest[0].sha256'),
    ({'gguf_fetch_manifest': [dict(TARGET, name='../etc')]}, 'gguf_fetch_manifest[0].name'),
    ({'gguf_fetch_manifest': [TARGET, dict(TARGET, role='mmproj', url='ftp://x/p.gguf')]}, 'gguf_fetch_manifest[1].url'),
    ({'gguf_fetch_manifest': [dict(TARGET, sizee=1)]}, 'gguf_fetch_manifest[0].sizee'),
    ({'runtime_retire_runtimes': [{'name': 'r', 'quadlets': [{'path': 5}]}]}, 'runtime_retire_runtimes[0].quadlets[0].path'),
    ({'runtime_retire_runtimes': [{'name': 'r', 'units': 'x.service'}]}, 'runtime_retire_runtimes[0].units'),
    ({'runtime_retire_runtimes': [{'name': 'r', 'units': [{'name': 'x.service\n'}]}]}, 'runtime_retire_runtimes[0].units[0].name'),
    ({'dankfleet_serving_now': [{'name': 'r', 'ports': [70000]}]}, 'dankfleet_serving_now[0].ports[0]'),
    ({'llama_server_temperature': float('nan')}, 'llama_server_temperature'),
    ({'llama_server_temperature': '1e400'}, 'llama_server_temperature'),
    ({'llama_server_tensor_split': [float('inf'), 1]}, 'llama_server_tensor_split[0]'),
    ({'llama_server_batch_size': 2 ** 40}, 'llama_server_batch_size'),
    ({'llama_server_ctx_size': 1e300}, 'llama_server_ctx_size'),
    ({'llama_server_ctx_size': 2 ** 30}, 'llama_server_ctx_size'),
    ({'llama_server_service_name': 'frank\n'}, 'llama_server_service_name'),
    ({'llama_server_alias': 'frank\nLLAMA_ARG_HOST=0.0.0.0'}, 'llama_server_alias'),
    ({'llama_server_user': 'dank\n'}, 'llama_server_user'),
    ({'llama_server_port_handover_units': ['a.service\n']}, 'llama_server_port_handover_units[0]'),
    ({'llama_server_extra_args': ['--x\n--y']}, 'llama_server_extra_args[0]'),
    ({'llama_server_extra_env': {'A': 'b\nHOST=0.0.0.0'}}, 'llama_server_extra_env'),
    ({'llama_server_extra_env': {'A\n': 'b'}}, 'llama_server_extra_env'),
    ({'llama_server_cache_ram': '16384\n'}, 'llama_server_cache_ram'),
    ({'llama_rpc_worker_devices': [{'device': 'CPU'}]}, 'llama_rpc_worker_devices[0].port'),
])
def test_issue_33_nested_and_unbounded_values_are_refused_naming_where(values, where):
    out = run(values)
    found = _where(out)
    assert where in found, out['problems']
    assert all(p.variable == where.split('[')[0].split('.')[0] for p in out['problems'] if p.message.startswith(where))
    assert all(typed_reader.printable(p.message) == p.message for p in out['problems'])


def test_every_problem_inside_one_variable_is_reported_at_once():
    manifest = [dict(TARGET, size='big'), dict(TARGET, role='drafter', dest_dir='rel', sha256=None), {'name': 'x'}]
    out = run({'gguf_fetch_manifest': manifest, 'llama_server_batch_size': 2 ** 40})
    found = _where(out)
    for where in ('gguf_fetch_manifest[0].size', 'gguf_fetch_manifest[1].dest_dir', 'gguf_fetch_manifest[1].sha256',
                  'gguf_fetch_manifest[2].role', 'gguf_fetch_manifest[2].url', 'llama_server_batch_size'):
        assert where in found, (where, sorted(found))
    # the manifest's own refusal, not a second one about a target it cannot read
    assert not any('names no target model' in p.message for p in out['problems'])


def test_a_refused_manifest_is_the_one_cause_not_a_refusal_per_payload_file():
    # a drafter and a projector the manifest would name, were it readable: the field is refused, nothing else
    manifest = [TARGET, dict(TARGET, role='drafter', file='d.gguf', size='big'), dict(TARGET, role='mmproj', file='p.gguf')]
    values = {'gguf_fetch_manifest': manifest, 'llama_server_spec_type': ['draft-dflash'], 'llama_server_vision': True}
    assert messages(run(values)) == ["gguf_fetch_manifest[1].size is 'big', not a whole number: write it as a number "
                                     "(e.g. size: 31457990112), no quotes or words"]
    # with no manifest entry for them, both are named
    out = run(dict(values, gguf_fetch_manifest=[TARGET]))
    assert {p.variable for p in out['problems']} == {'llama_server_spec_type', 'llama_server_vision'}


def test_a_secret_is_never_quoted_in_a_refusal():
    out = run({'llama_server_api_key': 'sk-secret\n', 'gguf_fetch_token': ['hf_secret']})
    assert {p.variable for p in out['problems']} == {'llama_server_api_key', 'gguf_fetch_token'}
    assert 'secret' not in ''.join(p.message.replace('it is a secret', '') for p in out['problems'])


def test_the_nested_values_come_back_settled_by_ansibles_rules():
    out = run({'gguf_fetch_manifest': [dict(TARGET, size='10', dest_dir='/srv/m')],
               'runtime_retire_runtimes': [{'name': 'r', 'units': [{'name': 'a.service', 'scope': 'user', 'user': 'dank'}],
                                            'ports': ['7770']}]})
    assert messages(out) == [] and out['payload_paths'] == {'target': '/srv/m/m.gguf'}
    assert out['port_handover_units'] == ['a.service']
    assert s.check_type('m', [dict(TARGET, size='10')], OPTIONS['gguf_fetch_manifest'])[0]['size'] == 10


def test_bounds_and_names_name_real_options():
    """A table entry for an option no spec has would bound nothing."""
    def exists(key):
        name, _, rest = key.partition('[]')
        spec = OPTIONS.get(name)
        for field in [f for f in rest.split('.') if f]:
            spec = (spec.get('options') or {}).get(field.rstrip('[]')) if spec else None
        return spec is not None
    for key in list(s.BOUNDS) + list(s.NAMES) + list(s.FREE_TEXT):
        assert exists(key), key


def test_experts_on_the_host_are_serve_inputs_settled_to_their_types():
    """issue 38: llama_server_n_cpu_moe / llama_server_cpu_moe are settled once and reach the plan's serve."""
    out = run({'llama_server_n_cpu_moe': '24', 'llama_server_cpu_moe': 'no'})
    assert messages(out) == [] and out['serve']['n_cpu_moe'] == 24 and out['serve']['cpu_moe'] is False
    out = run({'llama_server_n_cpu_moe': 513})
    assert any(m.startswith('llama_server_n_cpu_moe') and '512' in m for m in messages(out)), messages(out)
    out = run({'llama_server_cpu_moe': 'half'})
    assert any("llama_server_cpu_moe is 'half', not a boolean" in m for m in messages(out)), messages(out)


@pytest.mark.parametrize('value', ['auto', 'AUTO', ' auto'])
def test_n_cpu_moe_auto_is_left_open_for_the_planner(value):
    """issue 38: llama_server_n_cpu_moe: auto settles to auto, open for the planner (an int stays pinned)."""
    out = run({'llama_server_n_cpu_moe': value})
    assert messages(out) == [] and out['serve']['n_cpu_moe'] == 'auto' and out['origin']['n_cpu_moe'] == 'planned'
    out = run({'llama_server_n_cpu_moe': 0})
    assert messages(out) == [] and out['serve']['n_cpu_moe'] == 0 and out['origin']['n_cpu_moe'] == 'pinned'


@pytest.mark.parametrize('value, said', [
    ('some', "llama_server_n_cpu_moe is 'some', neither a whole number nor auto: write a number (e.g. "
             "llama_server_n_cpu_moe: 8), or auto for the planner's choice"),
    (-1, "llama_server_n_cpu_moe is -1, out of range: give a number from 0 to 512 (blocks whose experts stay in host "
         "RAM; no model has more than 512 (LLAMA_MAX_LAYERS)), or auto for the planner's choice"),
    (True, "llama_server_n_cpu_moe is True, neither a whole number nor auto"),
    ([24], "llama_server_n_cpu_moe is a list, neither a whole number nor auto"),
    (None, "llama_server_n_cpu_moe is empty (null)"),
])
def test_n_cpu_moe_other_than_a_number_or_auto_is_refused_naming_the_fix(value, said):
    out = run({'llama_server_n_cpu_moe': value})
    assert [m for m in messages(out) if m.startswith(said)], messages(out)


def test_the_load_mode_is_a_serve_input_from_its_choices():
    """issue 38: llama_server_load_mode is settled once, reaches the plan's serve, and is one of --load-mode's values."""
    out = run({'llama_server_load_mode': 'none'})
    assert messages(out) == [] and out['serve']['load_mode'] == 'none'
    out = run({'llama_server_load_mode': 'pinned'})
    assert any(m.startswith('llama_server_load_mode') and 'mmap+mlock' in m for m in messages(out)), messages(out)


def test_the_image_options_are_serve_inputs_settled_to_their_types():
    """issue 34: where the projector runs and the image-token limits are settled once and reach the plan's serve."""
    out = run({'llama_server_mmproj_device': 'ROCm1', 'llama_server_mmproj_offload': 'yes',
               'llama_server_image_min_tokens': '64', 'llama_server_image_max_tokens': 1024})
    assert messages(out) == []
    serve = out['serve']
    assert (serve['mmproj_device'], serve['mmproj_offload'], serve['image_min_tokens'], serve['image_max_tokens']) == \
        ('ROCm1', True, 64, 1024)
    out = run({'llama_server_image_max_tokens': -1})
    assert any(m.startswith('llama_server_image_max_tokens') for m in messages(out)), messages(out)
    out = run({'llama_server_mmproj_offload': 'half'})
    assert any("llama_server_mmproj_offload is 'half', not a boolean" in m for m in messages(out)), messages(out)


@pytest.mark.parametrize('name, value, fix', [
    ('llama_server_ctx_size', 'big', 'write it as a number (e.g. llama_server_ctx_size: 32768), no quotes or words'),
    ('llama_server_port', 'http', 'write it as a number (e.g. llama_server_port: 8080), no quotes or words'),
])
def test_a_number_refusal_shows_a_sensible_example(name, value, fix):
    # issue 37: one example for every number read "e.g. llama_server_ctx_size: 2"
    (text,) = [p.message for p in run({name: value})['problems'] if p.variable == name]
    assert fix in text and ': 2)' not in text


def test_every_sample_is_within_its_bounds():
    for key, sample in s.SAMPLES.items():
        if key in s.BOUNDS:
            lo, hi, _ = s.BOUNDS[key]
            assert lo <= sample <= hi, key


def test_the_placeholder_refusal_lists_one_item_per_line():
    # issue 37: it was one ~1,000-character line; now each placeholder is a refusal of its own, on its own line
    manifest = [dict(TARGET, size=0, sha256='FILL-the-Hub-LFS-oid'), dict(TARGET, role='drafter', file='FILL-d.gguf')]
    out = run({'gguf_fetch_manifest': manifest, 'llama_cpp_build_toolchain_sha256': 'FILL-sha'})
    items = [m for m in messages(out) if 'still to fill' in m]
    assert len(items) == len(s.checklist_lines(out['checklist'])) >= 3, items
    assert all('\n' not in item and len(item) < 300 and ('FILL' in item or 'size 0' in item) for item in items), items


def test_the_payload_record_is_the_manifest_as_settled_and_never_the_token():
    """What the plan finds the payload by (dankfleet_settled.payload): the fetch role's manifest and models dir as
    this step typed them - never its token (the result is printed)."""
    out = run({'gguf_fetch_manifest': [dict(TARGET, size='10', dest_dir='/srv/m')], 'gguf_fetch_token': 'hf_s3cret'})
    assert messages(out) == []
    assert out['payload'] == {'manifest': [dict(TARGET, size=10, dest_dir='/srv/m')], 'models_dir': '/models'}
    assert 'hf_s3cret' not in repr(out)
    # a refused manifest or models dir is no payload: the step fails naming each; the record holds neither value
    out = run({'gguf_fetch_manifest': [dict(TARGET, size='big')], 'gguf_fetch_models_dir': 'models'})
    assert {p.variable for p in out['problems']} == {'gguf_fetch_manifest', 'gguf_fetch_models_dir'}
    assert out['payload'] == {'manifest': [], 'models_dir': s.MODELS_DIR}
    assert "gguf_fetch_models_dir: 'models' is not an absolute path" in messages(out)
    # unset (a caller of settle() alone): the fetch role's documented default
    out = s.settle({'gguf_fetch_manifest': [TARGET]}, OPTIONS, ['gguf_fetch_manifest'])
    assert out['payload']['models_dir'] == '/var/lib/dankfleet/models' == OPTIONS['gguf_fetch_models_dir']['default']
