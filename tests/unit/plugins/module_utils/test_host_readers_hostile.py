"""Issue 33, the host's readers: what /proc, sysfs, nvidia-smi, rocm-smi, a saved facts file, gguf_fetch's stamp,
the plan-vs-actual history and the watch's journal and state say is read through a shape.

Generators, not cases: a recorded real output (the repo's nvidia-smi csv, a /proc/<pid>/status, the b650 KFD
properties and sysfs tree, the saved facts, a rocm-smi answer, the plan-vs-actual history, a stamp, a journal
entry, a watch state) with hostile text or any JSON value put at one position. Every run ends in the real
answer's result or a named refusal (the surface's own error, or ShapeError, naming where) within its deadline:
never another exception, and never a figure outside what a host can hold recorded as a fact. Then the issue's
own cases by name.
"""
import hashlib
import importlib.util
import json
import os
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.bench import bench_vram as bv
from ansible_collections.dankfleet.llm.plugins.module_utils.host import gpu_facts as gf
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual as pa
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.tests.fixtures.gpu import make_boards as boards
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
FIXTURES = os.path.join(REPO, 'tests', 'fixtures')
DEADLINE_S = 30.0    # the issue's per-case limit; a loaded CI runner is slow, a hang is not
GIB = 1024 ** 3
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return handle.read()


def watch_script():
    spec = importlib.util.spec_from_file_location('llm_watch', os.path.join(REPO, 'roles', 'llama_server', 'files',
                                                                            'llm_watch.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


W = watch_script()
SMI = fixture('gpu', 'nvidia-smi-h200-x2.csv')
# /proc/<pid>/status as the kernel writes it (the fields the reader takes, in the kernel's layout)
PROC_STATUS = ('Name:\tllama-server\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t6517\nPid:\t6517\nPPid:\t1\n'
               'VmPeak:\t 9876540 kB\nVmSize:\t 9876540 kB\nVmHWM:\t 2146304 kB\nVmRSS:\t 2097152 kB\n'
               'RssAnon:\t  409600 kB\nRssFile:\t 1687552 kB\nRssShmem:\t       0 kB\nThreads:\t17\n')
COMPUTE_APPS = '6517, GPU-3f0c7a8e-1d2b-4c5d-8e9f-0a1b2c3d4e5f, 81234\n7001, GPU-9a8b7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4, 512\n'
GPU_UUIDS = ('0, GPU-3f0c7a8e-1d2b-4c5d-8e9f-0a1b2c3d4e5f, 00000000:00:06.0\n'
             '1, GPU-9a8b7c6d-5e4f-3a2b-1c0d-e9f8a7b6c5d4, 00000000:00:07.0\n')
ROCM_VRAM = {'card0': {'VRAM Total Memory (B)': '34208743424', 'VRAM Total Used Memory (B)': '1048576'},
             'card1': {'VRAM Total Memory (B)': '34208743424', 'VRAM Total Used Memory (B)': '31000000000'}}
ROCM_NAMES = {'card0': {'Card Series': 'Radeon AI PRO R9700', 'PCI Bus': '0000:03:00.0'},
              'card1': {'Card Series': 'Radeon AI PRO R9700', 'PCI Bus': '0000:0b:00.0'}}
JOURNAL_ENTRY = {'__CURSOR': 's=0c7e;i=1;b=recorded', '__REALTIME_TIMESTAMP': '1758060000000001',
                 '_TRANSPORT': 'stdout', '_SYSTEMD_UNIT': 'frank-medium.service', 'SYSLOG_IDENTIFIER': 'frank-medium',
                 'MESSAGE': 'slot update_slots: id  1 | task 812 | forcing full prompt re-processing due to lack of cache'}
BOUNDS_FIELDS = ('memory_total_mib', 'memory_used_mib', 'link_gen', 'link_width', 'index')


def outcome(call, errors):
    """('ok', result) or ('refused', message), within the deadline; any other exception fails the test."""
    started = time.monotonic()
    try:
        result = ('ok', call())
    except errors as exc:
        assert str(exc).strip(), 'a refusal names its cause'
        result = ('refused', str(exc))
    assert time.monotonic() - started < DEADLINE_S
    return result


def csv_with(text, line, field, value):
    """text with one comma-separated field of one line replaced."""
    lines = text.splitlines()
    fields = [f.strip() for f in lines[line % len(lines)].split(',')]
    fields[field % len(fields)] = value
    lines[line % len(lines)] = ', '.join(fields)
    return '\n'.join(lines) + '\n'


@pytest.fixture(scope='module')
def scratch(tmp_path_factory):
    return str(tmp_path_factory.mktemp('hostile'))


def write(path, text, mode='w'):
    """A new file at path (a fresh owner and mode, as a rename leaves it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    with open(path, mode) as handle:
        handle.write(text)


# ------------------------------------------------------------------------------------------- nvidia-smi

def test_the_recorded_answers_read_as_they_always_did():
    rows = gf.parse_nvidia_smi(SMI, 'smi')
    assert [(r['index'], r['memory_total_mib'], r['link_width']) for r in rows] == [(0, 143771, 16), (1, 143771, 16)]
    assert [r['used_bytes'] for r in pa.parse_compute_apps(COMPUTE_APPS)] == [81234 * 1024 ** 2, 512 * 1024 ** 2]
    assert [r['index'] for r in pa.parse_gpu_uuids(GPU_UUIDS)] == [0, 1]
    assert [c['used_mib'] for c in bv.parse_nvidia_smi_memory('0, 81234, 143771\n')] == [81234.0]
    assert [c['used_mib'] for c in bv.parse_rocm_smi_memory(json.dumps(ROCM_VRAM))] == [1.0, 31000000000 / 1048576.0]


@SETTINGS
@given(line=st.integers(0, 1), field=st.integers(0, 7), value=hostile.hostile_text())
def test_gpu_facts_nvidia_smi_rows(line, field, value):
    kind, got = outcome(lambda: gf.parse_nvidia_smi(csv_with(SMI, line, field, value), 'smi.csv'), gf.GpuFactsError)
    if kind == 'refused':
        assert 'smi.csv' in got
        return
    for row in got:
        assert 0 <= row['index'] <= gf.GPU_INDEX_MAX
        for key in ('memory_total_mib', 'memory_used_mib'):
            assert row[key] is None or 0 <= row[key] <= gf.VRAM_MAX_MIB
        assert row['link_width'] is None or 0 <= row['link_width'] <= gf.LINK_WIDTH_MAX
        assert not tr._CONTROL.search(row['name'])


@SETTINGS
@given(which=st.sampled_from(['apps', 'uuids']), line=st.integers(0, 1), field=st.integers(0, 2),
       value=hostile.hostile_text())
def test_plan_actual_nvidia_smi_rows(which, line, field, value):
    text = csv_with(COMPUTE_APPS if which == 'apps' else GPU_UUIDS, line, field, value)
    parse = pa.parse_compute_apps if which == 'apps' else pa.parse_gpu_uuids
    kind, got = outcome(lambda: parse(text, 'smi.csv'), pa.PlanActualError)
    if kind == 'refused':
        assert 'smi.csv' in got
        return
    for row in got:
        if which == 'apps':
            assert 1 <= row['pid'] <= pa.PID_MAX
            assert row['used_bytes'] is None or 0 <= row['used_bytes'] <= gf.VRAM_MAX_BYTES
        else:
            assert 0 <= row['index'] <= gf.GPU_INDEX_MAX
        assert row.get('gpu_uuid', row.get('uuid')) is None or not tr._CONTROL.search(row.get('gpu_uuid', row.get('uuid')))


@SETTINGS
@given(field=st.integers(0, 2), value=hostile.hostile_text())
def test_bench_nvidia_smi_memory(field, value):
    kind, got = outcome(lambda: bv.parse_nvidia_smi_memory(csv_with('0, 81234, 143771', 0, field, value)),
                        tr.ShapeError)
    if kind == 'ok':
        for card in got:
            assert 0 <= card['used_mib'] <= gf.VRAM_MAX_MIB and 0 <= card['total_mib'] <= gf.VRAM_MAX_MIB


# ------------------------------------------------------------------------------------------- /proc, sysfs, KFD

@SETTINGS
@given(key=st.sampled_from(['VmRSS', 'RssAnon', 'RssFile', 'Name']), value=hostile.hostile_text(),
       unit=st.sampled_from([' kB', '', ' MB']))
def test_proc_status(scratch, key, value, unit):
    lines = [ln if not ln.startswith(key + ':') else '%s:\t%s%s' % (key, value, unit) for ln in PROC_STATUS.splitlines()]
    write(os.path.join(scratch, 'proc', '6517', 'status'), '\n'.join(lines) + '\n')
    kind, got = outcome(lambda: pa.process_memory(scratch, 6517), pa.PlanActualError)
    if kind == 'refused':
        assert '/proc/6517/status' in got
    elif got is not None:
        for k in ('rss_bytes', 'rss_anon_bytes', 'rss_file_bytes'):
            assert k not in got or 0 <= got[k] <= pa.RSS_MAX_BYTES
        assert got['name'] is None or not tr._CONTROL.search(got['name'])
        if key != 'Name':       # the real answer, or the hostile figure read exactly
            assert got[{'VmRSS': 'rss_bytes', 'RssAnon': 'rss_anon_bytes', 'RssFile': 'rss_file_bytes'}[key]] \
                == int(value.strip()) * 1024


@pytest.fixture(scope='module')
def b650(tmp_path_factory):
    return boards.build_tree('b650', str(tmp_path_factory.mktemp('b650') / 'b650'))


def kfd_properties(root):
    base = os.path.join(root, gf.KFD_NODES.lstrip('/'))
    if not os.path.isdir(base):
        base = os.path.join(root, 'sys/devices/virtual/kfd/kfd/topology/nodes')
    return os.path.join(base, '2', 'properties')


@SETTINGS
@given(index=st.integers(0, 40), value=hostile.hostile_text())
def test_kfd_properties(b650, index, value):
    text = open(kfd_properties(b650)).read()
    lines = text.splitlines()
    name = lines[index % len(lines)].split()[0]
    lines[index % len(lines)] = '%s %s' % (name, value)
    kind, got = outcome(lambda: gf.parse_kfd_properties('\n'.join(lines), 'properties'), gf.GpuFactsError)
    if kind == 'ok':
        for key, (lo, hi) in gf.KFD_PROPERTY_BOUNDS.items():
            assert key not in got or lo <= got[key] <= hi
        assert all(gf.KFD_PROPERTY_MIN <= v <= gf.KFD_PROPERTY_MAX for v in got.values())


@SETTINGS
@given(value=hostile.hostile_text(), name=st.sampled_from(['mem_info_vram_total', 'mem_info_vram_used']))
def test_sysfs_vram(scratch, value, name):
    path = '/sys/class/drm/card0/device/' + name
    write(os.path.join(scratch, path.lstrip('/')), value)
    kind, got = outcome(lambda: gf.read_int(scratch, path, 'VRAM bytes'), gf.GpuFactsError)
    if kind == 'ok':
        assert got is None or 0 <= got <= gf.VRAM_MAX_BYTES
    # the bench's reader of the same files
    write(os.path.join(scratch, 'sys/class/drm/card0/device/mem_info_vram_total' if name.endswith('used')
                       else 'sys/class/drm/card0/device/mem_info_vram_used'), '1048576\n')
    kind, got = outcome(lambda: bv.read_amdgpu_sysfs(scratch), tr.ShapeError)
    if kind == 'ok':
        assert all(0 <= c['used_mib'] <= gf.VRAM_MAX_MIB and 0 <= c['total_mib'] <= gf.VRAM_MAX_MIB for c in got)


# ------------------------------------------------------------------------------------------- JSON from tools and files

@SETTINGS
@given(case=hostile.hostile_answers(ROCM_VRAM))
def test_rocm_smi_memory(case):
    _path, answer = case
    kind, got = outcome(lambda: bv.parse_rocm_smi_memory(hostile.dumps(answer)), tr.ShapeError)
    if kind == 'ok':
        for card in got:
            assert 0 <= card['used_mib'] <= gf.VRAM_MAX_MIB
            assert card['total_mib'] is None or 0 <= card['total_mib'] <= gf.VRAM_MAX_MIB


@SETTINGS
@given(case=hostile.hostile_answers(ROCM_NAMES))
def test_rocm_smi_names(case):
    _path, answer = case
    kind, got = outcome(lambda: gf.parse_rocm_smi(hostile.dumps(answer), 'rocm.json'), gf.GpuFactsError)
    if kind == 'ok':
        assert all(isinstance(v, str) and not tr._CONTROL.search(v) for v in got.values())
    else:
        assert 'rocm.json' in got


FACTS = json.loads(fixture('gpu', 'b650.facts.json'))


@SETTINGS
@given(case=hostile.hostile_answers(FACTS))
def test_saved_facts_file(scratch, case):
    _path, answer = case
    path = os.path.join(scratch, 'facts.json')
    write(path, hostile.dumps(answer))
    kind, got = outcome(lambda: gf.load_facts(path), gf.GpuFactsError)
    if kind == 'refused':
        assert path in got
        return
    for card in got['gpus']:
        for key in ('vram_total_bytes', 'vram_used_bytes', 'vram_reserved_bytes'):
            assert card.get(key) is None or 0 <= card[key] <= gf.VRAM_MAX_BYTES


HISTORY = json.loads(fixture('plan_actual', 'b11434-cuda-h200-27b', 'plan-vs-actual.json'))


@SETTINGS
@given(case=hostile.hostile_answers(HISTORY))
def test_plan_actual_history(scratch, case):
    _path, answer = case
    path = os.path.join(scratch, pa.RECORD_FILE)
    write(path, hostile.dumps(answer))
    kind, got = outcome(lambda: pa.load_records(path), pa.PlanActualError)
    if kind == 'ok':
        assert isinstance(got, list) and all(isinstance(r, dict) for r in got)
        json.dumps(got, allow_nan=False)      # what append_record writes back: finite, JSON


# ------------------------------------------------------------------------------------------- the stamp

def model_with_stamp(directory, content=b'GGUF' + b'\0' * 60):
    model = os.path.join(directory, 'm.gguf')
    with open(model, 'wb') as handle:
        handle.write(content)
    st = os.stat(model)
    sha = hashlib.sha256(content).hexdigest()
    stamp = {'version': 1, 'file': 'm.gguf', 'size': st.st_size, 'mtime_ns': st.st_mtime_ns, 'inode': st.st_ino,
             'ctime_ns': st.st_ctime_ns, 'sha256': sha, 'verified_at': '2026-12-04T00:00:00Z', 'source': 'https://x/m'}
    return model, stamp, sha


@SETTINGS
@given(data=st.data())
def test_a_stamp_of_any_shape_never_names_a_hash_the_file_does_not_have(data):
    directory = tempfile.mkdtemp()
    model, stamp, sha = model_with_stamp(directory)
    _path, answer = data.draw(hostile.hostile_answers(stamp))
    write(model + pa.STAMP_SUFFIX, hostile.dumps(answer))
    os.chmod(model + pa.STAMP_SUFFIX, 0o644)
    got, source = pa.model_sha256(model)
    assert got in (sha, None) and (source in ('stamp', 'hashed') or source.startswith('unverified: '))
    assert not tr._CONTROL.search(source)


# ------------------------------------------------------------------------------------------- the watch

STATE = {'version': 1, 'cursor': 's=0c7e;i=6', 'realtime_usec': 1758060000000006,
         'imported': {'a' * 64: {'path': '/root/k.json', 'lines': 2}},
         'counts': dict((key, 1) for key in W.empty_state()['counts'])}


@SETTINGS
@given(case=hostile.hostile_answers(STATE))
def test_watch_state(case):
    _path, answer = case
    kind, got = outcome(lambda: W.read_state(answer, 'state.json'), W.StateError)
    if kind == 'ok':
        assert W.read_state(json.loads(json.dumps(got)), 'again') == got     # what it writes it reads back
        assert all(isinstance(v, int) and 0 <= v <= W.COUNT_MAX for v in got['counts'].values())
    else:
        assert got.startswith('state.json')


@SETTINGS
@given(case=hostile.hostile_answers(JOURNAL_ENTRY))
def test_watch_journal_entries(case):
    path, answer = case
    state = W.empty_state()
    kind, got = outcome(lambda: W.count([answer], state, 'frank-medium.service'), ())
    assert kind == 'ok'
    W.read_state(json.loads(json.dumps(state)), 'after')        # the state stays of its shape
    if not isinstance(answer, dict) or answer.get('_SYSTEMD_UNIT') != 'frank-medium.service':
        assert got == 0    # a line is the unit's only by journald's word


def test_the_watch_reads_control_characters_as_the_typed_reader_does():
    """llm_watch.py is a stdlib script on the host (no module_utils): its copy of the rule must agree."""
    assert W._CONTROL.pattern == tr._CONTROL.pattern


# ------------------------------------------------------------------------------------------- the issue's cases

@pytest.mark.parametrize('value', ['9' * 5000, '-1', str(10 ** 30)])
def test_issue_5000_digit_and_impossible_smi_figures_are_refused_by_name(value):
    with pytest.raises(gf.GpuFactsError, match=r'smi.csv line 1 memory.total'):
        gf.parse_nvidia_smi(csv_with(SMI, 0, 3, value), 'smi.csv')
    with pytest.raises(pa.PlanActualError, match=r'smi.csv line 1 used_memory'):
        pa.parse_compute_apps(csv_with(COMPUTE_APPS, 0, 2, value), 'smi.csv')
    with pytest.raises(tr.ShapeError, match=r'nvidia-smi line 1 memory.used'):
        bv.parse_nvidia_smi_memory('0, %s, 143771\n' % value)


@pytest.mark.parametrize('value', ['9' * 5000, str(10 ** 30)])
def test_issue_vmrss_no_host_holds_is_refused_not_recorded(tmp_path, value):
    write(str(tmp_path / 'proc' / '6517' / 'status'), PROC_STATUS.replace('2097152', value))
    with pytest.raises(pa.PlanActualError, match=r'/proc/6517/status VmRSS: .*out of range|/proc/6517/status VmRSS'):
        pa.process_memory(str(tmp_path), 6517)


@pytest.mark.parametrize('value', [str(-32 * GIB), str(10 ** 30), '9' * 5000, '0x10'])
def test_issue_sysfs_vram_negative_or_huge_is_refused_not_recorded(tmp_path, value):
    root = boards.build_tree('b650', str(tmp_path / 'b650'))
    card = os.path.join(root, gf.resolve(root, '/sys/class/drm/card0/device').lstrip('/'), 'mem_info_vram_total')
    write(card, value + '\n')
    with pytest.raises(gf.GpuFactsError, match=r'mem_info_vram_total'):
        gf.collect(root)
    write(os.path.join(str(tmp_path), 'sys/class/drm/card0/device/mem_info_vram_used'), value + '\n')
    write(os.path.join(str(tmp_path), 'sys/class/drm/card0/device/mem_info_vram_total'), '1048576\n')
    with pytest.raises(tr.ShapeError, match=r'mem_info_vram_used'):
        bv.read_amdgpu_sysfs(str(tmp_path))
    cards, source = _read_vram_of(str(tmp_path))
    assert cards == [] and source.startswith('refused: ') and 'mem_info_vram_used' in source


def _read_vram_of(root):
    saved = bv.read_amdgpu_sysfs
    try:
        bv.read_amdgpu_sysfs = lambda _root='/': saved(root)
        bv._which, which = (lambda name: None), bv._which
        return bv.read_vram()
    finally:
        bv.read_amdgpu_sysfs = saved
        bv._which = which


def test_issue_a_saved_facts_file_with_impossible_vram_is_refused(tmp_path):
    for value in (-32 * GIB, 10 ** 18, 10 ** 30):
        facts = json.loads(json.dumps(FACTS))
        facts['gpus'][0]['vram_total_bytes'] = value
        path = str(tmp_path / 'facts.json')
        write(path, json.dumps(facts))
        with pytest.raises(gf.GpuFactsError, match=r'facts.json'):
            gf.load_facts(path)


NOBODY = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason='needs root to give the stamp or the model another owner')
def test_issue_a_stamp_the_service_user_could_write_is_not_repeated(tmp_path):
    model, stamp, sha = model_with_stamp(str(tmp_path))
    forged = dict(stamp, sha256='f' * 64)
    write(model + pa.STAMP_SUFFIX, json.dumps(forged))
    # root-owned, one link, matching size/mtime/inode/ctime: a verification as root wrote it, and it is believed
    assert pa.model_sha256(model) == ('f' * 64, 'stamp')
    # the service user's stamp: not repeated
    os.chown(model + pa.STAMP_SUFFIX, NOBODY, NOBODY)
    got, source = pa.model_sha256(model)
    assert got is None and source.startswith('unverified: ') and 'uid %d' % NOBODY in source
    # a root stamp without ctime, on a model the service user can rewrite in place and set its mtime back
    write(model + pa.STAMP_SUFFIX, json.dumps(dict((k, v) for k, v in forged.items() if k != 'ctime_ns')))
    os.chown(model, NOBODY, NOBODY)
    got, source = pa.model_sha256(model)
    assert got is None and source.startswith('unverified: ') and 'no ctime_ns' in source
    # a root stamp recording a ctime the model no longer has (bytes rewritten, mtime set back): hashed, the truth
    st = os.stat(model)
    write(model + pa.STAMP_SUFFIX, json.dumps(dict(forged, ctime_ns=st.st_ctime_ns - 1)))
    assert pa.model_sha256(model) == (sha, 'hashed')
    # group- or world-writable, or a second link: anyone could have written it
    write(model + pa.STAMP_SUFFIX, json.dumps(dict(forged, ctime_ns=os.stat(model).st_ctime_ns)))
    os.chmod(model + pa.STAMP_SUFFIX, 0o666)
    assert pa.model_sha256(model)[0] is None
    os.chmod(model + pa.STAMP_SUFFIX, 0o644)
    os.link(model + pa.STAMP_SUFFIX, str(tmp_path / 'other'))
    assert pa.model_sha256(model)[0] is None


def test_a_card_gpu_facts_could_not_name_is_read_not_refused():
    # the rehearsal's board has an integrated GPU gpu_facts names null: the plan places nothing on it
    got = pa._GPUS.read([{"name": "ROCm0", "pci_address": "0000:03:00.0"}, {"name": None, "pci_address": None},
                         {"pci_address": "0000:7a:00.0"}], "plan_actual", "gpus")
    assert [g.get("name") for g in got] == ["ROCm0", None, None]
    with pytest.raises(tr.ShapeError, match=r"gpus\[0\]\.name"):
        pa._GPUS.read([{"name": "ROCm0\n"}], "plan_actual", "gpus")
