"""The benchmark harnesses' pure parts: llama-bench separators and output, greedy-text comparison,
result aggregation, report files. No endpoint, no llama-bench, no container.
"""
import csv
import json
import os
import shutil

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.doc_fragments.endpoint import ModuleDocFragment as EndpointDocFragment
from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_batch as bb
from ansible_collections.dankfleet.llm.plugins.module_utils.base import endpoint_client as be
from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_vram as bv
from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_report as br
from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_spec as bs
from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_turns as bt


# Two lines of llama-bench b11434 `-o jsonl` (trimmed to the fields the harness reads).
PP = {"build_commit": "unknown", "build_number": 11434, "backends": "RPC", "devices": "RPC0/RPC1",
      "tensor_split": "1.00/1.00", "n_batch": 64, "n_ubatch": 32, "n_prompt": 32, "n_gen": 0, "n_depth": 0,
      "avg_ts": 18028.951115, "stddev_ts": 0.0}
TG = dict(PP, n_prompt=0, n_gen=8, avg_ts=1172.42, stddev_ts=3.5)


# --- llama-bench separators ----------------------------------------------------------------

@pytest.mark.parametrize('value,numeric,want', [
    ('ROCm0,ROCm1', False, 'ROCm0/ROCm1'),
    (' ROCm0 , ROCm1 ', False, 'ROCm0/ROCm1'),
    (['CUDA0', 'CUDA1'], False, 'CUDA0/CUDA1'),
    ('RPC0', False, 'RPC0'),
    ('36,29', True, '36/29'),
    ([35, 30], True, '35/30'),
    ('0.5,0.5', True, '0.5/0.5'),
    ('', False, ''),
    (None, True, ''),
    ([], False, ''),
])
def test_service_form_becomes_llama_bench_form(value, numeric, want):
    assert bb.llama_bench_list(value, 'devices', numeric=numeric) == want


@pytest.mark.parametrize('value,numeric,match', [
    ('ROCm0/ROCm1', False, r"already in llama-bench's '/' form.*'ROCm0,ROCm1'"),
    ('36/29', True, r"already in llama-bench's '/' form.*'36,29'"),
    ('ROCm0,,ROCm1', False, 'empty item'),
    (['ROCm0,ROCm1'], False, 'holds a separator'),
    ('36,x', True, "'x' is not a non-negative number"),
    ('-1,2', True, "'-1' is not a non-negative number"),
    ('ROCm 0', False, "'ROCm 0' is not a device name"),
])
def test_bad_separator_input_names_the_cause(value, numeric, match):
    with pytest.raises(be.BenchError, match=match):
        bb.llama_bench_list(value, 'tensor_split' if numeric else 'devices', numeric=numeric)


def _config(**over):
    config = {'llama_bench': '/opt/llama.cpp/current/bin/llama-bench', 'model': '/m.gguf', 'n_prompt': 512,
              'n_gen': 128, 'repetitions': 3, 'devices': 'ROCm0,ROCm1', 'tensor_split': '36,29', 'rpc': [],
              'split_mode': 'layer', 'n_gpu_layers': 999, 'flash_attn': 'on', 'cache_type_k': 'f16',
              'cache_type_v': 'f16', 'threads': 0, 'extra_args': []}
    config.update(over)
    return config


def _flag(argv, flag):
    return argv[argv.index(flag) + 1]


def test_cell_argv_uses_slash_separators_one_cell_per_invocation():
    argv = bb.cell_argv(_config(), 6144, 512, 32768)
    assert _flag(argv, '-dev') == 'ROCm0/ROCm1'
    assert _flag(argv, '-ts') == '36/29'
    # one value per sweep axis: this process is exactly one cell
    assert (_flag(argv, '-b'), _flag(argv, '-ub'), _flag(argv, '-d')) == ('6144', '512', '32768')
    assert ',' not in ' '.join(argv)
    assert _flag(argv, '-o') == 'jsonl'
    assert '-c' not in argv  # llama-bench has no -c; the context is n_prompt + n_gen + depth
    assert '-t' not in argv  # threads 0 keeps llama-bench's default
    assert _flag(argv, '-ngl') == '999'


def test_cell_argv_registers_rpc_servers_before_resolving_devices():
    argv = bb.cell_argv(_config(rpc=['127.0.0.1:18591', '127.0.0.1:18592'], devices='RPC0,RPC1',
                                tensor_split='1,1'), 64, 32, 0)
    assert argv.index('-rpc') < argv.index('-dev')
    assert _flag(argv, '-rpc') == '127.0.0.1:18591,127.0.0.1:18592'  # llama-bench's own list of servers
    assert _flag(argv, '-dev') == 'RPC0/RPC1'


def test_systemd_run_carries_the_units_limits():
    argv = bb.systemd_run_argv('llm-bench-b64-ub32-d0-abc', ['llama-bench', '-m', 'x'], user='dank',
                               limit_memlock='infinity', environment={'HIP_VISIBLE_DEVICES': '0,1'}, timeout=60,
                               python='/usr/bin/python3')
    assert argv[0] == 'systemd-run'
    for want in ('--unit=llm-bench-b64-ub32-d0-abc', '--wait', '--collect', '--pipe',
                 '--property=LimitMEMLOCK=infinity', '--property=User=dank', '--property=RuntimeMaxSec=60',
                 '--setenv=HIP_VISIBLE_DEVICES=0,1'):
        assert want in argv
    tail = argv[argv.index('--') + 1:]
    assert tail[:2] == ['/usr/bin/python3', '-c'] and tail[3:] == ['llama-bench', '-m', 'x']
    assert '--property=User=root' not in bb.systemd_run_argv('u', ['x'], user='root')


def test_cells_skip_ubatch_larger_than_batch():
    assert bb.cells([512, 2048], [256, 1024], [0, 4096]) == [
        (512, 256, 0), (2048, 256, 0), (2048, 1024, 0), (512, 256, 4096), (2048, 256, 4096), (2048, 1024, 4096)]


# --- llama-bench output and cell rows ------------------------------------------------------

def test_parse_bench_output_jsonl_json_and_a_cell_that_died():
    jsonl = json.dumps(PP) + '\n' + json.dumps(TG) + '\n'
    assert bb.parse_bench_output(jsonl) == [PP, TG]
    assert bb.parse_bench_output(json.dumps([PP, TG], indent=2)) == [PP, TG]
    # -o json from a process that called exit(1) after the first test: the array never closes
    died = '[\n  ' + json.dumps(PP, indent=2) + ',\n  {"build_commit": "unk'
    assert bb.parse_bench_output(died) == [PP]
    assert bb.parse_bench_output('') == []
    assert bb.parse_bench_output('error: failed to create context\n') == []


def test_cell_rows_ok_partial_failed():
    stderr = 'load...\n@@dankfleet-cell maxrss_kib=16760 memlock=infinity\n'
    ok = bb.cell_row(64, 32, 0, [PP, TG], 0, stderr, {'ROCm0': 100.0}, 1.234, 'cmd')
    assert ok['status'] == 'ok' and ok['pp_tps'] == 18028.95 and ok['tg_tps'] == 1172.42
    assert ok['devices'] == ['RPC0/RPC1'] and ok['tensor_split'] == ['1.00/1.00']
    assert ok['peak_rss_mib'] == 16.4 and ok['memlock'] == 'infinity' and ok['peak_vram_mib'] == {'ROCm0': 100.0}
    assert ok['build'] == 'b11434-unknown' and ok['error'] is None

    dead = 'ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 2118123520\n' \
           'main: error: failed to create context with model\n@@dankfleet-cell maxrss_kib=900 memlock=8388608\n'
    partial = bb.cell_row(8192, 2048, 0, [PP], 1, dead, None, 2.0, 'cmd')
    assert partial['status'] == 'partial' and partial['pp_tps'] and partial['tg_tps'] is None
    assert 'failed to create context' in partial['error'] and '@@dankfleet' not in partial['error']
    assert partial['memlock'] == 8388608

    failed = bb.cell_row(0, 0, 0, [], 1, dead, None, 0.5, 'cmd')
    assert failed['status'] == 'failed' and failed['pp_tps'] is None and failed['devices'] is None
    assert failed['error'].endswith('failed to create context with model')


def test_the_comma_form_shows_up_in_the_reported_devices():
    """What the sweep's proof reads: the comma form comes back as one device per row."""
    alone = [dict(PP, devices='RPC0'), dict(PP, devices='RPC1')]
    assert bb.cell_row(64, 32, 0, alone, 0, '', None, 1, 'cmd')['devices'] == ['RPC0', 'RPC1']


def test_memlock_warning_only_when_the_unit_got_less_than_asked():
    rows = [{'memlock': 8388608}, {'memlock': 'infinity'}, {'memlock': None}]
    warnings = bb.memlock_warnings(rows, 'infinity')
    assert len(warnings) == 1 and '8388608' in warnings[0]
    assert bb.memlock_warnings([{'memlock': 'infinity'}], 'infinity') == []
    assert bb.memlock_warnings(rows, None) == []


def test_validate_refuses_before_any_cell(tmp_path):
    model = tmp_path / 'm.gguf'
    model.write_bytes(b'GGUF')
    with pytest.raises(be.BenchError, match='llama-bench not found'):
        bb.validate(_config(llama_bench=str(tmp_path / 'nope'), model=str(model), batch_sizes=[64],
                            ubatch_sizes=[32], depths=[0]))
    fake = tmp_path / 'llama-bench'
    fake.write_text('#!/bin/sh\n')
    fake.chmod(0o755)
    with pytest.raises(be.BenchError, match='does not exist'):
        bb.validate(_config(llama_bench=str(fake), model=str(tmp_path / 'x.gguf'), batch_sizes=[64],
                            ubatch_sizes=[32], depths=[0]))
    with pytest.raises(be.BenchError, match='no cell to run'):
        bb.validate(_config(llama_bench=str(fake), model=str(model), batch_sizes=[64], ubatch_sizes=[128],
                            depths=[0], transient_unit=False))
    with pytest.raises(be.BenchError, match="already in llama-bench's"):
        bb.validate(_config(llama_bench=str(fake), model=str(model), devices='ROCm0/ROCm1', batch_sizes=[64],
                            ubatch_sizes=[32], depths=[0], transient_unit=False))


# --- greedy text across configurations -----------------------------------------------------

def test_first_difference():
    assert bs.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert bs.first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert bs.first_difference([1, 2], [1, 2, 3]) == 2
    assert bs.first_difference('abc', 'abd') == 2
    assert bs.first_difference([], []) is None


def _conf(name, tokens, text=None, error=None, shapes=('prose', 'echo'), identical=True):
    if error:
        return {'name': name, 'error': error}
    return {'name': name, 'shapes': dict((s, {'tokens': list(tokens), 'text': text or ''.join(chr(97 + t % 26) for t in tokens),
                                              'repeats_identical': identical}) for s in shapes)}


def test_identical_greedy_text_is_no_mismatch():
    confs = [_conf('none', [1, 2, 3, 4]), _conf('draft-dflash@7', [1, 2, 3, 4]), _conf('ngram-mod', [1, 2, 3, 4])]
    assert bs.compare_greedy(confs) == []


def test_mismatch_names_both_configurations_the_shape_and_the_position():
    confs = [_conf('none', [1, 2, 3, 4, 5]), _conf('ok', [1, 2, 3, 4, 5]), _conf('hot', [1, 2, 3, 9, 5])]
    found = bs.compare_greedy(confs)
    assert len(found) == 2  # both shapes
    first = found[0]
    assert (first['reference'], first['configuration'], first['token'], first['char']) == ('none', 'hot', 3, 3)
    assert "'none' and 'hot'" in first['message'] and 'token 3, character 3' in first['message']
    assert "on shape 'echo'" in found[0]['message'] or "on shape 'echo'" in found[1]['message']


def test_failed_configuration_is_not_the_reference_and_not_a_mismatch():
    confs = [_conf('broken', None, error='load failed'), _conf('none', [1, 2]), _conf('mtp', [1, 2])]
    assert bs.compare_greedy(confs) == []
    found = bs.compare_greedy([_conf('broken', None, error='x'), _conf('none', [1, 2]), _conf('mtp', [1, 3])])
    assert found[0]['reference'] == 'none' and found[0]['configuration'] == 'mtp'


def test_nondeterministic_repeats_are_reported():
    found = bs.compare_greedy([_conf('none', [1], identical=False, shapes=('prose',))])
    assert len(found) == 1 and 'not deterministic' in found[0]['message']


def test_text_comparison_when_token_ids_are_missing():
    a = {'name': 'a', 'shapes': {'prose': {'tokens': [], 'text': 'hello world'}}}
    b = {'name': 'b', 'shapes': {'prose': {'tokens': [], 'text': 'hello there'}}}
    found = bs.compare_greedy([a, b])
    assert found[0]['token'] is None and found[0]['char'] == 6 and 'character 6' in found[0]['message']
    assert bs.compare_greedy([a, dict(b, shapes={'prose': {'tokens': [], 'text': 'hello world'}})]) == []


# --- prompts and per-shape records ---------------------------------------------------------

SIZES = {'prose_words': 50, 'prose_n_predict': 16, 'echo_words': 60, 'echo_n_predict': 8,
         'structured_records': 5, 'structured_n_predict': 12}


def test_prompts_are_deterministic_and_sized():
    one, two = bs.build_prompts(SIZES, seed=1), bs.build_prompts(SIZES, seed=1)
    assert one == two
    assert bs.build_prompts(SIZES, seed=2)['prose']['prompt'] != one['prose']['prompt']
    assert [one[s]['n_predict'] for s in bs.SHAPES] == [16, 8, 12]
    assert len(bs.prose_text(50, 1).split()) == 50
    records = [json.loads(line) for line in bs.structured_records(5, 1).splitlines()]
    assert len(records) == 5 and len(set(r['id'] for r in records)) == 5
    assert one['echo']['prompt'].endswith('Copy:\n<<<\n')
    with pytest.raises(be.BenchError, match='unknown shape'):
        bs.build_prompts(SIZES, shapes=['poetry'])


def test_copy_ratio():
    prompt = list(range(100))
    assert bs.copy_ratio(prompt, list(range(10, 30)), span=8) == 1.0
    assert bs.copy_ratio(prompt, [500 + i for i in range(20)], span=8) == 0.0
    assert bs.copy_ratio(prompt, list(range(10, 20)) + [999] * 10, span=8) == 0.5
    assert bs.copy_ratio(prompt, [1, 2], span=8) == 0.0
    assert bs.copy_ratio(prompt, [], span=8) is None


def _answer(tps, draft_n=None, accepted=None, tokens=(5, 6, 7)):
    timings = {'predicted_per_second': tps, 'prompt_per_second': 1000.0, 'predicted_n': 3, 'prompt_n': 40}
    if draft_n is not None:
        timings.update(draft_n=draft_n, draft_n_accepted=accepted)
    return {'timings': timings, 'tokens': list(tokens), 'content': 'xyz'}


def test_summarize_runs_median_acceptance_and_metric_deltas():
    before = {be.METRIC_DRAFTS: 10.0, be.METRIC_DRAFT_TOKENS: 70.0, be.METRIC_ACCEPTED: 30.0}
    after = {be.METRIC_DRAFTS: 13.0, be.METRIC_DRAFT_TOKENS: 91.0, be.METRIC_ACCEPTED: 45.0}
    rec = bs.summarize_runs([_answer(40.0, 7, 3), _answer(44.0, 7, 5), _answer(50.0, 7, 7)], [1, 2, 3],
                            before, after, copy_span=2)
    assert rec['decode_tps'] == 44.0
    assert (rec['draft_tokens'], rec['accepted'], rec['acceptance']) == (21, 15, 0.7143)
    assert (rec['metric_drafts'], rec['metric_draft_tokens'], rec['metric_accepted']) == (3, 21, 15)
    assert rec['repeats'] == 3 and rec['repeats_identical'] is True and rec['tokens'] == [5, 6, 7]
    plain = bs.summarize_runs([_answer(17.7)], [1], None, None)
    assert plain['draft_tokens'] is None and plain['acceptance'] is None and plain['metric_drafts'] is None
    moved = bs.summarize_runs([_answer(1.0), _answer(1.0, tokens=(5, 6, 8))], [1], None, None)
    assert moved['repeats_identical'] is False


def test_spec_rows_aggregate_one_row_per_configuration_and_shape():
    ok = {'name': 'dflash', 'vram_mib': {'ROCm1': 29420.0, 'ROCm0': 30100.5},
          'shapes': {'echo': {'decode_tps': 76.8}, 'prose': {'decode_tps': 43.7}}}
    rows = bs.spec_rows([ok, {'name': 'mtp+dflash', 'error': "context type MTP requested but model doesn't contain MTP layers"}])
    assert [(r['configuration'], r['shape'], r['status']) for r in rows] == [
        ('dflash', 'prose', 'ok'), ('dflash', 'echo', 'ok'), ('mtp+dflash', None, 'failed')]
    assert rows[0]['vram_mib'] == 'ROCm0=30100.5;ROCm1=29420.0'
    assert 'MTP layers' in rows[2]['error'] and set(rows[2]) == set(bs.SPEC_COLUMNS)


# --- turns -----------------------------------------------------------------------------------

def test_turn_rows_and_summary():
    answer = {'timings': {'prompt_n': 237, 'cache_n': 636, 'predicted_n': 16, 'prompt_ms': 20.0, 'predicted_ms': 50.0},
              'usage': {'prompt_tokens': 873, 'completion_tokens': 16}}
    row = bt.turn_row(0, 2, answer, 0.0772, 1.5)
    assert (row['latency_ms'], row['cache_n'], row['prompt_n'], row['cache_ratio']) == (77.2, 636, 237, 0.7285)
    # a server that reports the cache only in usage.prompt_tokens_details
    row2 = bt.turn_row(1, 2, {'timings': {'prompt_n': 10}, 'usage': {'prompt_tokens_details': {'cached_tokens': 90}}},
                       0.01, 0)
    assert row2['cache_n'] == 90 and row2['cache_ratio'] == 0.9
    failed = bt.turn_row(1, 1, None, 0.005, 0, error='HTTP 400')
    summary = bt.summarize_turns([row, dict(row, family=1, latency_ms=80.0), failed])
    assert summary == [{'turn': 2, 'families': 2, 'median_latency_ms': 78.6, 'max_latency_ms': 80.0,
                        'cache_n': 1272, 'prompt_n': 474}]


def test_turn_conversation_grows_by_answer_and_chunk():
    msgs = bt.turn_messages('DOC', ['a1', 'a2'], ['c1', 'c2'])
    assert [m['role'] for m in msgs] == ['system', 'user', 'assistant', 'user', 'assistant', 'user']
    assert msgs[1]['content'].startswith('Document:\n\nDOC') and 'c2' in msgs[-1]['content']
    # the first turn's messages are a prefix of every later turn's: what the prompt cache serves
    assert bt.turn_messages('DOC', [], [])[:2] == msgs[:2]
    assert bt.family_document(0, 30, 1) != bt.family_document(1, 30, 1)
    assert bt.family_document(0, 30, 1, shared=True) == bt.family_document(1, 30, 1, shared=True)


# --- endpoint helpers ------------------------------------------------------------------------

def test_metrics_parse_and_delta():
    text = ('# HELP x\nllamacpp:spec_decode_num_drafts_total 28\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 3\n')
    parsed = be.parse_metrics(text)
    with pytest.raises(be.BenchError, match='/metrics line 4: .bogus line. is not a sample'):
        be.parse_metrics(text + 'bogus line\n')           # never skipped: a malformed line is named
    assert parsed['llamacpp:spec_decode_num_drafts_total'] == 28.0
    assert parsed['llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] == 3.0
    assert be.metric_delta({}, parsed, be.METRIC_DRAFTS) == 28.0
    assert be.metric_delta(None, parsed, be.METRIC_DRAFTS) is None
    assert be.metric_delta({}, {}, be.METRIC_DRAFTS) is None


def test_vram_readers(tmp_path):
    cards = bv.parse_nvidia_smi_memory('0, 81234, 143771\n1, 500, 143771\nNo devices were found\n')
    assert [(c['card'], c['used_mib']) for c in cards] == [('CUDA0', 81234.0), ('CUDA1', 500.0)]
    rocm = json.dumps({'card1': {'VRAM Total Memory (B)': '34208743424', 'VRAM Total Used Memory (B)': '31000000000'},
                       'card0': {'VRAM Total Memory (B)': '34208743424', 'VRAM Total Used Memory (B)': '1048576'}})
    parsed = bv.parse_rocm_smi_memory('WARNING: something\n' + rocm)
    got = [(c['card'], c['source_card'], c['used_mib']) for c in parsed]
    assert got == [('ROCm0', 'card0', 1.0), ('ROCm1', 'card1', 31000000000 / 1048576.0)]
    for card, used in (('card0', 2 * 1048576), ('card1', 3 * 1048576)):
        dev = tmp_path / 'sys' / 'class' / 'drm' / card / 'device'
        dev.mkdir(parents=True)
        (dev / 'mem_info_vram_used').write_text('%d\n' % used)
        (dev / 'mem_info_vram_total').write_text('%d\n' % (32 * 1048576))
    assert [(c['card'], c['used_mib']) for c in bv.read_amdgpu_sysfs(str(tmp_path))] == [('ROCm0', 2.0), ('ROCm1', 3.0)]
    assert bv.vram_summary([]) is None


def test_endpoint_options_are_the_ones_the_doc_fragment_documents():
    options = yaml.safe_load(EndpointDocFragment.DOCUMENTATION)['options']
    assert sorted(options) == sorted(be.ENDPOINT_ARGUMENT_SPEC) == ['api_key', 'url']
    for name, spec in be.ENDPOINT_ARGUMENT_SPEC.items():
        assert (options[name]['type'], options[name].get('required', False)) == (spec['type'], spec.get('required', False))
    assert be.ENDPOINT_ARGUMENT_SPEC['api_key']['no_log'] is True


def _tool(directory, name, output, rc=0):
    """An executable `name` in directory that prints output and exits rc."""
    path = directory / name
    path.write_text("#!/bin/sh\n%s <<'EOF'\n%s\nEOF\nexit %d\n" % (shutil.which('cat', path=os.defpath), output, rc))
    path.chmod(0o755)


def test_read_vram_asks_nvidia_smi_then_sysfs_then_rocm_smi(tmp_path, monkeypatch):
    if bv.read_amdgpu_sysfs('/') or os.path.exists('/opt/rocm/bin/rocm-smi'):
        pytest.skip('this host has AMD VRAM counters of its own')
    tools = tmp_path / 'bin'
    tools.mkdir()
    monkeypatch.setenv('PATH', str(tools))
    assert bv.read_vram() == ([], None)
    rocm = json.dumps({'card0': {'VRAM Total Memory (B)': '2097152', 'VRAM Total Used Memory (B)': '1048576'}})
    _tool(tools, 'rocm-smi', rocm)
    assert bv.read_vram() == ([{'card': 'ROCm0', 'source_card': 'card0', 'used_mib': 1.0, 'total_mib': 2.0}],
                              'rocm-smi')
    _tool(tools, 'nvidia-smi', 'NVIDIA-SMI has failed', rc=9)     # a failing nvidia-smi: the next reader answers
    assert bv.read_vram()[1] == 'rocm-smi'
    _tool(tools, 'nvidia-smi', '0, 81234, 143771')
    assert bv.read_vram() == ([{'card': 'CUDA0', 'used_mib': 81234.0, 'total_mib': 143771.0}], 'nvidia-smi')


# --- report files ----------------------------------------------------------------------------

def test_redaction_hides_secrets_not_measurements():
    conf = {'name': 'a', 'vars': {'llama_server_api_key': 'sk-1', 'llama_server_spec_type': 'ngram-mod',
                                  'hf_token': 'hf_x', 'llama_server_spec_draft_n_max': 7},
            'shapes': {'prose': {'draft_tokens': 119, 'tokens': [1]}}}
    red = br.redact_configuration(conf)
    assert red['vars']['llama_server_api_key'] == '<redacted>' and red['vars']['hf_token'] == '<redacted>'
    assert red['vars']['llama_server_spec_type'] == 'ngram-mod' and red['vars']['llama_server_spec_draft_n_max'] == 7
    assert red['shapes']['prose']['draft_tokens'] == 119
    assert br.redact({'api_key': ''})['api_key'] == ''


def test_tsv_cells():
    assert br.tsv_cell(None) == '' and br.tsv_cell(True) == 'true'
    assert br.tsv_cell({'b': 1, 'a': 2}) == 'a=2;b=1' and br.tsv_cell(['RPC0/RPC1']) == 'RPC0/RPC1'
    assert br.tsv_cell('line1\nline2\tx') == 'line1 | line2 x'


def _read_tsv(path):
    with open(path) as handle:
        return list(csv.DictReader(handle, delimiter='\t'))


def test_spec_report_writes_files_and_returns_the_mismatch(tmp_path):
    confs = [dict(_conf('none', [1, 2, 3]), build='b11434-unknown'), _conf('hot', [1, 2, 4])]
    for c in confs:
        for rec in c['shapes'].values():
            rec.update(decode_tps=10.0, acceptance=None, draft_tokens=None)
    report = br.write_report('spec', confs, {'host': 'lab', 'llama_server_api_key': 'sk'}, str(tmp_path), 'spec')
    assert sorted(report['files']) == ['json', 'png', 'tsv']
    assert all(os.path.getsize(p) > 0 for p in report['files'].values())
    with open(report['files']['png'], 'rb') as handle:
        assert handle.read(8) == b'\x89PNG\r\n\x1a\n'
    doc = json.load(open(report['files']['json']))
    assert doc['greedy_identical'] is False and doc['meta']['llama_server_api_key'] == '<redacted>'
    assert doc['builds'] == ['b11434-unknown'] and len(doc['mismatches']) == 2
    assert [r['configuration'] for r in _read_tsv(report['files']['tsv'])] == ['none', 'none', 'hot', 'hot']
    with pytest.raises(be.BenchError, match='unique name'):
        br.build_document('spec', [_conf('a', [1]), _conf('a', [1])], {})


def test_batch_and_turns_reports(tmp_path):
    rows = [bb.cell_row(64, 32, 0, [PP, TG], 0, '@@dankfleet-cell maxrss_kib=2048 memlock=infinity', None, 1, 'c'),
            bb.cell_row(0, 0, 0, [], 1, 'error: failed to create context', None, 1, 'c')]
    report = br.write_report('batch', rows, {'host': 'lab'}, str(tmp_path), 'batch')
    tsv = _read_tsv(report['files']['tsv'])
    assert [r['status'] for r in tsv] == ['ok', 'failed'] and tsv[0]['devices'] == 'RPC0/RPC1'
    assert report['findings']['failed'][0]['batch'] == 0
    assert report['summary'][0].startswith('b 64 ub 32 d 0: ok')
    turns = [bt.turn_row(f, t, {'timings': {'prompt_n': 10, 'cache_n': 5 * t}}, 0.1 * t, t) for f in (0, 1) for t in (1, 2)]
    report = br.write_report('turns', turns, {'host': 'lab', 'build': 'b1'}, str(tmp_path), 'turns', plot=False)
    assert sorted(report['files']) == ['json', 'tsv']
    assert json.load(open(report['files']['json']))['per_turn'][1]['cache_n'] == 20


def test_endpoint_errors_name_the_endpoint():
    dead = be.Endpoint('http://127.0.0.1:1', timeout=2)  # nothing listens on port 1: refused at once
    with pytest.raises(be.BenchError, match=r'http://127.0.0.1:1/health did not answer 200 within 0 s'):
        dead.wait_healthy(0)
    with pytest.raises(be.BenchError, match=r'POST http://127.0.0.1:1/completion failed'):
        dead.post_json('/completion', {'prompt': 'x'})
    assert dead.build() is None
