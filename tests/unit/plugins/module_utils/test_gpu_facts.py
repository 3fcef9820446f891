"""dankfleet.llm.gpu_info against the runbook's two recorded boards.

B650: ROCm1 behind the chipset (Gen4 x1, AtomicOpsCap Routing-) -> no collective.
B850 ProArt: both cards on CPU root ports (Gen5 x8, Routing+, ReqEn+) -> collective legal.
The trees are written by tests/fixtures/gpu/make_boards.py into a temp dir; the
lspci -vvv text, nvidia-smi csv and facts JSON are the committed recordings.
"""
import ast
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.host import gpu_facts as gf
from ansible_collections.dankfleet.llm.plugins.modules import gpu_info as gpu_facts_module
from ansible_collections.dankfleet.llm.tests.fixtures.gpu import make_boards as boards
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import ansible_doc, ansible_env

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
FIXTURES = os.path.join(REPO, 'tests', 'fixtures', 'gpu')

R9700_VRAM = 34208743424
MIB = 1024 * 1024


def fixture_text(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


@pytest.fixture(scope='module')
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp('boards')
    return dict((b, boards.build_tree(b, str(base / b))) for b in boards.BOARDS)


@pytest.fixture
def tree_copy(trees, tmp_path):
    """A private copy of a board's tree that a test may break."""
    def make(board):
        dest = str(tmp_path / board)
        shutil.copytree(trees[board], dest, symlinks=True)
        return dest
    return make


def collect(root, board, **kw):
    kw.setdefault('lspci_text', fixture_text(board + '.lspci.txt'))
    kw.setdefault('lspci_source', board + '.lspci.txt')
    return gf.collect(root, **kw)


def by_address(result):
    return dict((g['pci_address'], g) for g in result['gpus'])


def real_dir(root, bdf):
    return os.path.join(root, gf.resolve(root, '/sys/bus/pci/devices/' + bdf).lstrip('/'))


# ------------------------------------------------------------- the two boards

def test_b650_second_card_behind_chipset_blocks_collectives(trees):
    result = collect(trees['b650'], 'b650')
    cards = by_address(result)
    rocm0, rocm1 = cards['0000:03:00.0'], cards['0000:0b:00.0']
    assert (rocm0['name'], rocm1['name']) == ('ROCm0', 'ROCm1')
    assert result['collectives_legal'] is False
    assert result['blocking_bridge']['bdf'] == '0000:06:09.0'  # the chipset port the runbook names
    assert result['blocking_bridge']['card'] == 'ROCm1'
    assert 'Routing-' in result['blocking_bridge']['reason']
    assert rocm1['path'] == ['0000:00:02.1', '0000:05:00.0', '0000:06:09.0', '0000:09:00.0',
                             '0000:0a:00.0', '0000:0b:00.0']
    assert (rocm1['narrowest_link_gen'], rocm1['narrowest_link_width']) == (4, 1)
    assert rocm1['narrowest_link_speed'] == '16.0 GT/s'
    assert rocm1['narrowest_link_bridge'] == '0000:06:09.0'
    assert rocm1['narrowest_link_gbps'] == pytest.approx(1.97, abs=0.01)
    assert rocm1['atomics_ok'] is False
    assert [b['bdf'] for b in rocm1['atomics_blocking']] == ['0000:06:09.0', '0000:05:00.0', '0000:0b:00.0']
    hops = dict((h['bdf'], h) for h in rocm1['atomics'])
    assert hops['0000:06:09.0']['routing'] is False and hops['0000:05:00.0']['routing'] is False
    assert hops['0000:00:02.1']['routing'] is True and hops['0000:0b:00.0']['requester_enabled'] is False
    # ROCm0: CPU root port 00:01.1 Gen4 x16 -> the card's switch -> card, atomics fine
    assert rocm0['path'] == ['0000:00:01.1', '0000:01:00.0', '0000:02:00.0', '0000:03:00.0']
    assert (rocm0['narrowest_link_gen'], rocm0['narrowest_link_width']) == (4, 16)
    assert rocm0['narrowest_link_bridge'] == '0000:00:01.1'
    assert rocm0['atomics_ok'] is True and rocm0['atomics_blocking'] == []


def test_b850_both_cards_on_cpu_root_ports_collectives_legal(trees):
    result = collect(trees['b850-proart'], 'b850-proart')
    cards = by_address(result)
    assert result['collectives_legal'] is True
    assert result['blocking_bridge'] is None
    for bdf, root, name in (('0000:03:00.0', '0000:00:01.1', 'ROCm0'), ('0000:06:00.0', '0000:00:01.2', 'ROCm1')):
        card = cards[bdf]
        assert card['name'] == name
        assert card['path'][0] == root
        assert (card['narrowest_link_gen'], card['narrowest_link_width'], card['narrowest_link_bridge']) == (5, 8, root)
        assert card['atomics_ok'] is True
        assert all(h['routing'] is True for h in card['atomics'] if h['role'] in ('upstream', 'downstream', 'root_port'))
        assert card['atomics'][-1]['requester_enabled'] is True
    # the chipset (Routing-) is still on the board, but on no GPU's path: it must not matter
    assert 'Routing-' in fixture_text('b850-proart.lspci.txt')


@pytest.mark.parametrize('board,igpu', [('b650', '0000:0e:00.0'), ('b850-proart', '0000:0a:00.0')])
def test_igpu_reported_marked_and_left_out_of_hip_visible_devices(trees, board, igpu):
    result = collect(trees[board], board)
    cards = by_address(result)
    assert len(result['gpus']) == 3
    raphael = cards[igpu]
    assert raphael['gfx_target'] == 'gfx1036'
    assert raphael['integrated'] is True and raphael['hidden'] is True
    assert raphael['name'] is None and raphael['index'] is None
    assert raphael['runtime_index'] == 2  # the runbook: the iGPU enumerates as HIP device 2
    assert result['hip_visible_devices'] == '0,1'
    assert result['amdgpu_targets'] == 'gfx1201'
    assert 'left out of HIP_VISIBLE_DEVICES=0,1' in result['topology']


def test_include_integrated_names_the_igpu(trees):
    result = collect(trees['b650'], 'b650', include_integrated=True)
    assert by_address(result)['0000:0e:00.0']['name'] == 'ROCm2'
    assert result['hip_visible_devices'] == '0,1,2'
    assert result['amdgpu_targets'] == 'gfx1036;gfx1201'


def test_planner_contract_fields(trees):
    """fit_plan takes this result as is: these keys and types must hold."""
    result = collect(trees['b650'], 'b650')
    for card in result['gpus']:
        for key in ('name', 'vram_total_bytes', 'vram_used_bytes', 'vram_reserved_bytes', 'integrated',
                    'narrowest_link_width'):
            assert key in card, key
    discrete = [c for c in result['gpus'] if not c['integrated']]
    assert [c['vram_total_bytes'] for c in discrete] == [R9700_VRAM, R9700_VRAM]
    assert all(c['vram_reserved_bytes'] == 0 for c in discrete)
    assert all(isinstance(c['vram_used_bytes'], int) and c['vram_used_bytes'] > 0 for c in discrete)
    assert [c['narrowest_link_width'] for c in discrete] == [16, 1]
    assert all(c['vendor'] == 'amd' and c['vendor_id'] == '0x1002' and c['device_id'] == '0x7551' for c in discrete)
    assert all(c['gfx_target'] == 'gfx1201' and c['marketing_name'] == 'Radeon AI PRO R9700' for c in discrete)


def test_topology_text(trees):
    b650 = collect(trees['b650'], 'b650')['topology']
    assert 'ROCm1  0000:0b:00.0' in b650
    assert 'PCIe path: 00:02.1 -[Gen4 x4]- 05:00.0 > 06:09.0 -[Gen4 x1]- 09:00.0 > 0a:00.0 -[Gen5 x16]- 0b:00.0' in b650
    assert 'narrowest link: Gen4 x1 (~1.97 GB/s) below 06:09.0' in b650
    assert 'narrowest link: Gen4 x16 (~31.5 GB/s) below 00:01.1' in b650
    assert 'collectives_legal: false - blocked at 0000:06:09.0' in b650
    assert '7x prefill loss' in b650 and 'Layer split (-sm layer) needs no collective' in b650
    b850 = collect(trees['b850-proart'], 'b850-proart')['topology']
    assert 'narrowest link: Gen5 x8 (~31.5 GB/s) below 00:01.2' in b850
    assert 'collectives_legal: true' in b850 and 'BLOCKED' not in b850


def test_hip_order_follows_kfd_nodes_not_drm_numbers(tree_copy):
    root = tree_copy('b650')
    nodes = os.path.join(root, 'sys/devices/virtual/kfd/kfd/topology/nodes')
    os.rename(os.path.join(nodes, '1'), os.path.join(nodes, 'x'))
    os.rename(os.path.join(nodes, '2'), os.path.join(nodes, '1'))
    os.rename(os.path.join(nodes, 'x'), os.path.join(nodes, '2'))
    cards = by_address(collect(root, 'b650'))
    assert cards['0000:0b:00.0']['name'] == 'ROCm0' and cards['0000:0b:00.0']['drm_card'] == 'card1'
    assert cards['0000:03:00.0']['name'] == 'ROCm1'


# ------------------------------------------------------ missing tools and paths

def test_without_lspci_atomics_unknown_but_links_still_read(trees):
    result = collect(trees['b650'], 'b650', lspci_text=None)
    assert result['collectives_legal'] is False
    assert 'unknown' in result['blocking_bridge']['reason']
    assert any('lspci' in w for w in result['facts_warnings'])
    rocm1 = by_address(result)['0000:0b:00.0']
    assert rocm1['atomics_ok'] is None
    assert (rocm1['narrowest_link_width'], rocm1['narrowest_link_bridge']) == (1, '0000:06:09.0')


def test_lspci_without_root_says_become(trees):
    text = fixture_text('b650.lspci.txt')
    denied = '\n'.join(line if not line.startswith('\t') else
                       ('\tCapabilities: <access denied>' if line.startswith('\tCapabilities: [58]') else
                        line) for line in text.splitlines()
                       if not line.startswith('\t\t'))
    result = collect(trees['b650'], 'b650', lspci_text=denied)
    assert any('become: true' in w for w in result['facts_warnings'])
    assert result['collectives_legal'] is False
    assert by_address(result)['0000:03:00.0']['atomics_ok'] is None


def test_without_kfd_gfx_unknown_igpu_still_integrated(tree_copy):
    root = tree_copy('b650')
    shutil.rmtree(os.path.join(root, 'sys/devices/virtual/kfd'))
    result = collect(root, 'b650')
    assert any('/sys/class/kfd/kfd/topology/nodes does not exist' in w for w in result['facts_warnings'])
    cards = by_address(result)
    assert cards['0000:0e:00.0']['integrated'] is True  # known Raphael device id 0x164e
    assert cards['0000:03:00.0']['gfx_target'] is None
    assert result['hip_visible_devices'] == '0,1'


def test_card_without_kfd_node_is_hidden_and_named_in_a_warning(tree_copy):
    root = tree_copy('b850-proart')
    shutil.rmtree(os.path.join(root, 'sys/devices/virtual/kfd/kfd/topology/nodes/2'))
    result = collect(root, 'b850-proart')
    card = by_address(result)['0000:06:00.0']
    assert card['hidden'] is True and card['name'] is None and card['runtime_index'] is None
    assert any('0000:06:00.0 has no KFD topology node' in w for w in result['facts_warnings'])
    assert 'no KFD topology node, so HIP does not enumerate it' in result['topology']
    assert result['hip_visible_devices'] == '0'  # the iGPU (node 3) is HIP device 1 now, still hidden


def test_no_drm_no_gpu(tmp_path):
    (tmp_path / 'sys').mkdir()
    result = gf.collect(str(tmp_path))
    assert result['gpus'] == [] and result['collectives_legal'] is False
    assert any('no GPU found' in w for w in result['facts_warnings'])
    assert 'No GPU found.' in result['topology']


def test_nvidia_card_without_nvidia_smi_is_named_in_a_warning(tmp_path):
    dev = tmp_path / 'sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0'
    dev.mkdir(parents=True)
    (dev / 'vendor').write_text('0x10de\n')
    (dev / 'class').write_text('0x030000\n')
    links = tmp_path / 'sys/bus/pci/devices'
    links.mkdir(parents=True)
    os.symlink('../../../devices/pci0000:00/0000:00:01.1/0000:01:00.0', str(links / '0000:01:00.0'))
    result = gf.collect(str(tmp_path))
    assert any('0000:01:00.0' in w and 'nvidia-smi' in w for w in result['facts_warnings'])


def test_missing_sysfs_root(tmp_path):
    with pytest.raises(gf.GpuFactsError, match='does not exist'):
        gf.collect(str(tmp_path / 'nope'))
    with pytest.raises(gf.GpuFactsError, match='has no sys/ directory'):
        gf.collect(str(tmp_path))


def test_card_without_vram_files_warns(tree_copy):
    root = tree_copy('b850-proart')
    os.remove(os.path.join(real_dir(root, '0000:06:00.0'), 'mem_info_vram_total'))
    result = collect(root, 'b850-proart')
    assert by_address(result)['0000:06:00.0']['vram_total_bytes'] is None
    assert any('mem_info_vram_total' in w and 'amdgpu' in w for w in result['facts_warnings'])


# -------------------------------------------------------- malformed input

def test_malformed_vram_file_names_the_file(tree_copy):
    root = tree_copy('b650')
    path = os.path.join(real_dir(root, '0000:03:00.0'), 'mem_info_vram_total')
    with open(path, 'w') as handle:
        handle.write('lots\n')
    with pytest.raises(gf.GpuFactsError) as err:
        collect(root, 'b650')
    assert path in str(err.value) and "'lots'" in str(err.value)


def test_malformed_kfd_properties_names_the_file_and_line(tree_copy):
    root = tree_copy('b650')
    path = os.path.join(root, 'sys/devices/virtual/kfd/kfd/topology/nodes/2/properties')
    with open(path, 'a') as handle:
        handle.write('gfx_target_version twelve\n')
    with pytest.raises(gf.GpuFactsError, match=r'nodes/2/properties line \d+ gfx_target_version'):
        collect(root, 'b650')


def test_malformed_lspci_names_the_source():
    with pytest.raises(gf.GpuFactsError, match=r'my.lspci.txt line 1: expected a device line'):
        gf.parse_lspci('this is not lspci\n', 'my.lspci.txt')
    with pytest.raises(gf.GpuFactsError, match=r'my.lspci.txt line 1: indented line before any device'):
        gf.parse_lspci('\tLnkSta: Speed 16GT/s, Width x16\n', 'my.lspci.txt')


def test_malformed_nvidia_smi_names_the_file_and_line():
    with pytest.raises(gf.GpuFactsError, match=r'smi.csv line 2: expected 8 comma-separated fields'):
        gf.parse_nvidia_smi('0, NVIDIA H200, 00000000:19:00.0, 143771, 4, 9.0, 5, 16\n0, NVIDIA H200\n', 'smi.csv')
    with pytest.raises(gf.GpuFactsError, match=r'smi.csv line 1: compute_cap'):
        gf.parse_nvidia_smi('0, NVIDIA H200, 00000000:19:00.0, 143771, 4, sm90, 5, 16\n', 'smi.csv')
    with pytest.raises(gf.GpuFactsError, match=r'smi.csv line 1 memory.total'):
        gf.parse_nvidia_smi('0, NVIDIA H200, 00000000:19:00.0, lots, 4, 9.0, 5, 16\n', 'smi.csv')


def test_malformed_rocm_smi_names_the_source():
    with pytest.raises(gf.GpuFactsError, match='rocm.json: not JSON'):
        gf.parse_rocm_smi('{"card0": ', 'rocm.json')


# ---------------------------------------------------------------- NVIDIA

def h200_vm_tree(base):
    """The device machine's sysfs as recorded (h200-vm.sysfs.json): the H200 sits on pci0000:00."""
    with open(os.path.join(FIXTURES, 'h200-vm.sysfs.json')) as handle:
        recorded = json.load(handle)['devices']
    for path, attrs in recorded.items():
        devdir = base / path.lstrip('/')
        devdir.mkdir(parents=True)
        for name, value in attrs.items():
            (devdir / name).write_text(value + '\n')
        links = base / 'sys/bus/pci/devices'
        links.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(str(devdir), str(links)), str(links / os.path.basename(path)))
    return str(base)


def test_nvidia_h200_recorded_on_the_device_machine(tmp_path):
    root = h200_vm_tree(tmp_path)
    result = gf.collect(root, nvidia_smi_text=fixture_text('nvidia-smi-h200.csv'),
                        nvidia_smi_source='nvidia-smi-h200.csv')
    (card,) = result['gpus']
    assert card['name'] == 'CUDA0' and card['vendor'] == 'nvidia' and card['marketing_name'] == 'NVIDIA H200'
    assert card['vram_total_bytes'] == 143771 * MIB and card['vram_used_bytes'] == 0
    assert card['compute_cap'] == '9.0' and card['pci_address'] == '0000:00:06.0'
    assert card['device_id'] == '0x2335' and card['path'] == ['0000:00:06.0']
    assert (card['link_gen'], card['link_width']) == (5, 16)
    assert (card['narrowest_link_gen'], card['narrowest_link_width']) == (5, 16)
    assert card['narrowest_link_bridge'] is None
    assert result['cuda_architectures'] == '90'
    assert result['cuda_visible_devices'] == '0' and result['hip_visible_devices'] == ''
    assert result['collectives_legal'] is True  # NCCL needs no PCIe AtomicOps
    assert result['facts_warnings'] == []  # no lspci there, and an NVIDIA host does not need it
    assert "Gen5 x16 (~63.0 GB/s) (the card's own link)" in result['topology']
    assert 'NCCL' in result['topology']


def test_nvidia_without_sysfs_uses_nvidia_smi_link(tmp_path):
    (tmp_path / 'sys').mkdir()
    result = gf.collect(str(tmp_path), nvidia_smi_text='0, NVIDIA H200, 00000000:19:00.0, 143771, 4, 9.0, 4, 8\n')
    (card,) = result['gpus']
    assert (card['link_gen'], card['link_width'], card['narrowest_link_width']) == (4, 8, 8)
    assert card['vram_used_bytes'] == 4 * MIB and card['pci_address'] == '0000:19:00.0'


def test_nvidia_two_h200_and_rtx3090(tmp_path):
    (tmp_path / 'sys').mkdir()
    two = gf.collect(str(tmp_path), nvidia_smi_text=fixture_text('nvidia-smi-h200-x2.csv'))
    assert [(c['name'], c['pci_address']) for c in two['gpus']] == [('CUDA0', '0000:00:06.0'),
                                                                    ('CUDA1', '0000:00:07.0')]
    assert two['cuda_visible_devices'] == '0,1'
    zealot = gf.collect(str(tmp_path), nvidia_smi_text=fixture_text('nvidia-smi-rtx3090.csv'))
    (card,) = zealot['gpus']
    assert card['marketing_name'] == 'NVIDIA GeForce RTX 3090' and card['vram_total_bytes'] == 24576 * MIB
    assert zealot['cuda_architectures'] == '86'


def test_nvidia_smi_header_and_na_fields_tolerated():
    rows = gf.parse_nvidia_smi('index, name, pci.bus_id, memory.total, memory.used, compute_cap, '
                               'pcie.link.gen.current, pcie.link.width.current\n'
                               '0, NVIDIA H200, 00000000:19:00.0, 143771, [N/A], 9.0, [N/A], [N/A]\n', 'x')
    assert rows[0]['memory_used_mib'] is None and rows[0]['link_gen'] is None
    assert gf.parse_nvidia_smi('No devices were found\n', 'x') == []


def test_rocm_smi_marketing_name_wins(trees):
    text = 'WARNING: something\n' + json.dumps({'card0': {'PCI Bus': '0000:03:00.0', 'Card Series': 'AMD Radeon AI PRO R9700'}})
    result = collect(trees['b650'], 'b650', rocm_smi_text=text)
    cards = by_address(result)
    assert cards['0000:03:00.0']['marketing_name'] == 'AMD Radeon AI PRO R9700'
    assert cards['0000:0b:00.0']['marketing_name'] == 'Radeon AI PRO R9700'  # from lspci


# ------------------------------------------------------ units and parsers

@pytest.mark.parametrize('version,target', [(120001, 'gfx1201'), (100306, 'gfx1036'), (90010, 'gfx90a'),
                                            (90402, 'gfx942'), (110000, 'gfx1100'), (0, None)])
def test_gfx_target(version, target):
    assert gf.gfx_target(version) == target


@pytest.mark.parametrize('text,speed', [('16.0 GT/s PCIe', 16.0), ('8 GT/s', 8.0), ('2.5 GT/s PCIe', 2.5),
                                        ('Unknown', None), ('', None)])
def test_link_speed(text, speed):
    assert gf.parse_link_speed(text) == speed


def test_idle_downtrained_link_is_pointed_out(tree_copy):
    root = tree_copy('b850-proart')
    with open(os.path.join(real_dir(root, '0000:04:00.0'), 'current_link_speed'), 'w') as handle:
        handle.write('2.5 GT/s PCIe\n')
    result = collect(root, 'b850-proart')
    rocm1 = by_address(result)['0000:06:00.0']
    assert (rocm1['narrowest_link_gen'], rocm1['narrowest_link_width']) == (1, 8)
    assert 'link below 00:01.2 runs at 2.5 GT/s but both ends can do 32.0 GT/s' in result['topology']


def test_root_port_without_completer_blocks():
    hops = [{'bdf': 'r', 'role': 'root_port', 'known': True, 'routing': False, 'completer_32': False,
             'completer_64': False},
            {'bdf': 'c', 'role': 'endpoint', 'known': True, 'requester_enabled': False}]
    ok, blocking = gf.atomics_verdict(hops)
    assert ok is False and blocking[0]['bdf'] == 'r' and '32bit- 64bit-' in blocking[0]['reason']
    hops[0].update(completer_32=True, completer_64=True)  # Routing- on a root port is fine (kernel rule)
    hops[1]['requester_enabled'] = True
    assert gf.atomics_verdict(hops) == (True, [])


def test_egress_blocking_upstream_port_blocks():
    hops = [{'bdf': 'r', 'role': 'root_port', 'known': True, 'completer_32': True, 'completer_64': True},
            {'bdf': 'u', 'role': 'upstream', 'known': True, 'routing': True, 'egress_blocked': True},
            {'bdf': 'd', 'role': 'downstream', 'known': True, 'routing': True},
            {'bdf': 'c', 'role': 'endpoint', 'known': True, 'requester_enabled': True}]
    ok, blocking = gf.atomics_verdict(hops)
    assert ok is False and [b['bdf'] for b in blocking] == ['u'] and 'EgressBlck+' in blocking[0]['reason']


# ----------------------------------------------------------- recorded facts

@pytest.mark.parametrize('board', sorted(boards.BOARDS))
def test_committed_recordings_match_the_generator(trees, board):
    assert fixture_text(board + '.lspci.txt') == boards.lspci_text(board), \
        'regenerate: tests/fixtures/gpu/make_boards.py --lspci-dir tests/fixtures/gpu'
    with open(os.path.join(FIXTURES, board + '.facts.json')) as handle:
        committed = json.load(handle)
    fresh = json.loads(json.dumps(boards.recorded_facts(board, trees[board])))
    assert committed == fresh, 'regenerate: tests/fixtures/gpu/make_boards.py --facts-dir tests/fixtures/gpu'


@pytest.mark.parametrize('board,legal', [('b650', False), ('b850-proart', True)])
def test_facts_file_round_trip(board, legal):
    result = gf.load_facts(os.path.join(FIXTURES, board + '.facts.json'))
    assert result['collectives_legal'] is legal
    assert [c['name'] for c in result['gpus']] == ['ROCm0', 'ROCm1', None]
    assert result['hip_visible_devices'] == '0,1'
    assert result['sources']['facts_file'].endswith(board + '.facts.json')


def test_facts_file_verdict_is_derived_again(tmp_path):
    with open(os.path.join(FIXTURES, 'b850-proart.facts.json')) as handle:
        data = json.load(handle)
    rocm1 = [c for c in data['gpus'] if c['name'] == 'ROCm1'][0]
    [hop for hop in rocm1['atomics'] if hop['bdf'] == '0000:04:00.0'][0]['routing'] = False
    path = tmp_path / 'edited.json'
    path.write_text(json.dumps(data))
    result = gf.load_facts(str(path))
    assert result['collectives_legal'] is False and result['blocking_bridge']['bdf'] == '0000:04:00.0'


def test_facts_file_minimal_hand_written(tmp_path):
    path = tmp_path / 'new-board.json'
    path.write_text(json.dumps({'gpus': [
        {'pci_address': '0000:03:00.0', 'vendor': 'amd', 'vram_total_bytes': R9700_VRAM},
        {'pci_address': '0000:06:00.0', 'vendor': 'amd', 'vram_total_bytes': R9700_VRAM, 'narrowest_link_width': 8},
    ]}))
    result = gf.load_facts(str(path))
    assert [c['name'] for c in result['gpus']] == ['ROCm0', 'ROCm1']
    assert [c['narrowest_link_width'] for c in result['gpus']] == [None, 8]
    assert result['collectives_legal'] is False  # no atomics recorded: unknown is not legal


@pytest.mark.parametrize('content,match', [
    ('not json', 'not JSON'),
    ('[]', 'expected a JSON object with a "gpus" list'),
    ('{"gpus": [{"vendor": "amd", "vram_total_bytes": 1}]}', r'gpus\[0\] needs pci_address'),
    ('{"gpus": [{"pci_address": "0000:03:00.0", "vendor": "intel", "vram_total_bytes": 1}]}', 'amd or nvidia'),
    ('{"gpus": [{"pci_address": "0000:03:00.0", "vendor": "amd", "vram_total_bytes": "32G"}]}',
     r'gpus\[0\] needs vram_total_bytes \(int\)'),
    ('{"gpus": [{"pci_address": "0000:03:00.0", "vendor": "amd", "vram_total_bytes": 1, "integrated": "no"}]}',
     r'gpus\[0\].integrated must be bool'),
])
def test_facts_file_errors_name_the_file(tmp_path, content, match):
    path = tmp_path / 'bad.json'
    path.write_text(content)
    with pytest.raises(gf.GpuFactsError, match=match) as err:
        gf.load_facts(str(path))
    assert str(path) in str(err.value)


# -------------------------------------------------- the module through Ansible

MODULE = os.path.join(REPO, 'plugins', 'modules', 'gpu_info.py')


def test_documentation_matches_argument_spec():
    tree = ast.parse(open(MODULE).read())
    doc = [n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == 'DOCUMENTATION'][0]
    options = yaml.safe_load(doc)['options']
    spec = gpu_facts_module.ARGUMENT_SPEC
    assert set(options) == set(spec)
    for name, entry in spec.items():
        assert options[name]['type'] == entry['type'], name
        assert options[name].get('default') == entry.get('default'), name


def ansible(*args, check=True):
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'),
                      ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_STDOUT_CALLBACK='ansible.posix.json',
                      ANSIBLE_INVENTORY_UNPARSED_WARNING='false', ANSIBLE_LOCALHOST_WARNING='false')
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible'), 'localhost', '-i', 'localhost,', '-c', 'local',
           '-e', 'ansible_python_interpreter=%s' % sys.executable, '-m', 'dankfleet.llm.gpu_info'] + list(args)
    if check:
        cmd.append('--check')
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = json.loads(proc.stdout)
    return out['plays'][0]['tasks'][0]['hosts']['localhost']


@pytest.mark.parametrize('check', [True, False])
def test_module_reads_recorded_tree(trees, check):
    res = ansible('-a', 'sysfs_root=%s lspci_output_file=%s' % (
        trees['b650'], os.path.join(FIXTURES, 'b650.lspci.txt')), check=check)
    assert not res.get('failed'), res.get('msg')
    assert res['changed'] is False
    assert res['collectives_legal'] is False and res['blocking_bridge']['bdf'] == '0000:06:09.0'
    assert [g['name'] for g in res['gpus']] == ['ROCm0', 'ROCm1', None]
    assert res['hip_visible_devices'] == '0,1'
    assert 'Gen4 x1 (~1.97 GB/s) below 06:09.0' in res['topology']


def test_module_facts_file_and_nvidia_file(trees, tmp_path):
    res = ansible('-a', 'facts_file=%s' % os.path.join(FIXTURES, 'b850-proart.facts.json'))
    assert not res.get('failed'), res.get('msg')
    assert res['collectives_legal'] is True and res['changed'] is False
    (tmp_path / 'sys').mkdir()
    res = ansible('-a', 'sysfs_root=%s nvidia_smi_output_file=%s' % (
        tmp_path, os.path.join(FIXTURES, 'nvidia-smi-h200.csv')))
    assert res['cuda_architectures'] == '90' and res['gpus'][0]['name'] == 'CUDA0'


def test_module_errors_are_messages_not_tracebacks(trees, tmp_path):
    missing = str(tmp_path / 'missing.txt')
    res = ansible('-a', 'sysfs_root=%s lspci_output_file=%s' % (trees['b650'], missing))
    assert res['failed'] and 'lspci_output_file %s: cannot read' % missing in res['msg']
    bad = tmp_path / 'bad.csv'
    bad.write_text('0, NVIDIA H200\n')
    res = ansible('-a', 'sysfs_root=%s nvidia_smi_output_file=%s' % (trees['b650'], bad))
    assert res['failed'] and '%s line 1: expected 8 comma-separated fields' % bad in res['msg']
    assert 'Traceback' not in res.get('module_stderr', '')
    res = ansible('-a', 'facts_file=%s sysfs_root=/' % os.path.join(FIXTURES, 'b650.facts.json'))
    assert res['failed'] and 'mutually exclusive' in res['msg']


def test_module_live_host_does_not_fail():
    """The live path (sysfs_root=/, tools run if present) must answer on any host, GPU or not."""
    res = ansible()
    assert not res.get('failed'), res.get('msg')
    assert isinstance(res['gpus'], list)
    if not res['gpus']:
        assert res['facts_warnings']


def test_ansible_doc_renders():
    text = ansible_doc('dankfleet.llm.gpu_info')
    assert 'sysfs_root' in text and 'collectives_legal' in text
