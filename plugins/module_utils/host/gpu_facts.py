# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU facts for llama.cpp deployments: cards, VRAM, PCIe path, AtomicOps.

Plain Python, no Ansible import, so unit tests drive it against a fake root:
every sysfs path is read relative to ``root`` and every command's output
(``lspci -vvv``, ``nvidia-smi --query-gpu ... --format=csv``, ``rocm-smi
--json``) is handed in as text by the caller.

The AtomicOps verdict follows Linux's pci_enable_atomic_ops_to_root(), the
check amdgpu runs at probe: walking from the card up, every switch port
(upstream or downstream) must advertise AtomicOpsCap Routing+, an upstream
port must not set EgressBlck+, and the root port must complete 32- and 64-bit
AtomicOps. Only then does the kernel set ReqEn+ on the card, and only a card
with ReqEn+ gets the hostcall buffer RCCL's kernels need from ROCr.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import errno
import os
import re

from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import FileRefused, decode_text, open_regular, read_text as _read_file_text
from ansible_collections.dankfleet.llm.plugins.module_utils.base.strict_values import digits, is_finite_number
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import (
    INT_LIMIT, Int, ShapeError, Str, int_text, load_json, num_text, printable)

VENDOR_AMD = '0x1002'
VENDOR_NVIDIA = '0x10de'
MIB = 1024 * 1024
GIB = 1024 * MIB

NVIDIA_SMI_FIELDS = (
    'index', 'name', 'pci.bus_id', 'memory.total', 'memory.used',
    'compute_cap', 'pcie.link.gen.current', 'pcie.link.width.current',
)
NVIDIA_SMI_ARGS = ['--query-gpu=' + ','.join(NVIDIA_SMI_FIELDS), '--format=csv,noheader,nounits']
LSPCI_ARGS = ['-vvv', '-D']
ROCM_SMI_ARGS = ['--showproductname', '--showbus', '--json']

KFD_NODES = '/sys/class/kfd/kfd/topology/nodes'
DRM_CLASS = '/sys/class/drm'
PCI_DEVICES = '/sys/bus/pci/devices'

# gfx targets that exist only as integrated GPUs (APU graphics). gfx1036 is
# Raphael/Granite Ridge: the iGPU of the Ryzen 7000/9000 desktop parts, which
# HIP enumerates after the discrete cards on dankserver (HIP device 2).
INTEGRATED_GFX = frozenset((
    'gfx801', 'gfx902', 'gfx909', 'gfx90c', 'gfx1013', 'gfx1033', 'gfx1035',
    'gfx1036', 'gfx1037', 'gfx1103', 'gfx1150', 'gfx1151', 'gfx1152', 'gfx1153',
))

# PCI device ids of AMD APU graphics, for when the KFD topology (gfx target) is missing.
INTEGRATED_DEVICE_IDS = frozenset((
    '0x13c0',  # Granite Ridge
    '0x1506',  # Mendocino
    '0x150e',  # Strix Point
    '0x1586',  # Strix Halo
    '0x15bf',  # Phoenix
    '0x15c8',  # Phoenix2
    '0x15d8',  # Picasso
    '0x15dd',  # Raven Ridge
    '0x15e7',  # Barcelo
    '0x1636',  # Renoir
    '0x1638',  # Cezanne
    '0x163f',  # Van Gogh
    '0x164c',  # Lucienne
    '0x164e',  # Raphael
    '0x1681',  # Rembrandt
))

# Names lspci may not know yet (pci.ids lags new parts); used only when
# neither rocm-smi, sysfs product_name nor lspci name the card.
KNOWN_NAMES = {
    (VENDOR_AMD, '0x7551'): 'Radeon AI PRO R9700',
    (VENDOR_AMD, '0x164e'): 'Raphael',
}

# PCIe generation by transfer rate, and usable GB/s per lane after line
# encoding (8b/10b for Gen1/2, 128b/130b for Gen3-5, 242/256 FLIT for Gen6).
GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

# What a collective is and why it matters here: the runbook's measurement
# (llama-bench on dankserver, pp4096, two R9700, no RCCL).
COLLECTIVE_MEANING_BLOCKED = (
    'Tensor split (llama.cpp -sm tensor, vLLM TP, and vLLM PP whose stage handoff is an '
    'RCCL send/recv) needs a cross-card collective; RCCL needs a hostcall buffer that ROCr '
    'gives only to a card with PCIe AtomicOps enabled, so on this path every collective dies '
    '(hipErrorIllegalState) and llama.cpp tensor split falls back to a butterfly all-reduce: '
    'measured 271.8 vs 1991.2 tok/s pp4096, a 7x prefill loss. Layer split (-sm layer) needs '
    'no collective: use it.'
)
COLLECTIVE_MEANING_LEGAL = (
    'Every card routes AtomicOps to the CPU and has ReqEn+, so RCCL collectives (tensor split, '
    'vLLM TP) are allowed - allowed, not proven faster: measure before switching. Layer split '
    '(-sm layer) needs no collective and stays valid either way.'
)

# What no real card, link or tool output comes near: a figure outside is refused by name, never recorded.
VRAM_MAX_BYTES = 2 ** 50            # 1 PiB of VRAM on one card
VRAM_MAX_MIB = VRAM_MAX_BYTES // MIB
LINK_WIDTH_MAX = 63                 # the PCIe link width field is 6 bits
LINK_GEN_MAX = 16
LINK_SPEED_MAX_GTS = 1024.0
GPU_INDEX_MAX = 1023
NAME_MAX_CHARS = 256                # a marketing name, a driver, a card
# KFD topology properties the collection reads, bounded by their fields' widths; every other one is an integer.
KFD_PROPERTY_BOUNDS = {
    'location_id': (0, 0xffff), 'domain': (0, 0xffffffff), 'gfx_target_version': (0, 999999),
    'simd_count': (0, 1 << 20), 'cpu_cores_count': (0, 1 << 20),
}
KFD_PROPERTY_MIN, KFD_PROPERTY_MAX = -(2 ** 63), 2 ** 64 - 1     # the kernel prints s64 and u64 properties

_BDF_RE = re.compile(r'^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')
_DRM_CARD_RE = re.compile(r'card([0-9]{1,6})\Z')   # a longer run of digits is no card (and no int() of it)


class GpuFactsError(Exception):
    """Bad or unreadable input; the message names the file and the fix."""


# ---------------------------------------------------------------- sysfs access

def host_path(root, path):
    """The file under ``root`` that stands for the host path ``path``."""
    return os.path.join(root, path.lstrip('/'))


def resolve(root, path):
    """realpath() for a host path inside ``root``: symlinks are followed
    component by component and absolute targets are re-rooted, so a recorded
    tree behaves like the live /sys. Returns a host path ('/sys/devices/...')."""
    todo = [p for p in path.split('/') if p]
    done = []
    hops = 0
    while todo:
        comp = todo.pop(0)
        if comp == '.':
            continue
        if comp == '..':
            if done:
                done.pop()
            continue
        candidate = os.path.join(root, *(done + [comp]))
        if os.path.islink(candidate):
            hops += 1
            if hops > 64:
                raise GpuFactsError('%s: too many levels of symbolic links' % candidate)
            target = os.readlink(candidate)
            if target.startswith('/'):
                done = []
            todo = [p for p in target.split('/') if p] + todo
        else:
            done.append(comp)
    return '/' + '/'.join(done)


SYSFS_MAX_BYTES = 1024 * 1024   # a sysfs attribute is at most a page; KFD properties a few hundred bytes


def read_text(root, path):
    """Stripped content of a host file, or None when it does not exist.

    A regular file only, opened O_NONBLOCK and read to EOF (sysfs says 4096 whatever it holds), at most
    SYSFS_MAX_BYTES, UTF-8: a FIFO, a device or a directory in a recorded tree is refused by name.
    """
    real = host_path(root, path)
    try:
        return _read_file_text(real, 'sysfs attribute', SYSFS_MAX_BYTES).strip()
    except FileRefused as exc:
        if exc.errno == errno.ENOENT or not os.path.lexists(real):
            return None
        raise GpuFactsError('%s; re-record the tree, or read the live /sys' % exc)


def read_int(root, path, what, lo=0, hi=VRAM_MAX_BYTES):
    """A sysfs integer in [lo, hi] (VRAM bytes unless told), None when the file is absent; anything else -- a
    word, 5000 digits, -32 GiB, 10^30 bytes -- is refused naming the file, never recorded."""
    text = read_text(root, path)
    if text is None:
        return None
    try:
        return int_text(text, host_path(root, path), lo, hi)
    except ShapeError as exc:
        raise GpuFactsError('%s (%s); the file is not what the kernel writes there - re-record the tree'
                            % (exc, what))


def read_hex_id(root, path, what):
    text = read_text(root, path)
    if text is None:
        return None
    if not re.match(r'^0x[0-9a-fA-F]{1,8}$', text):
        raise GpuFactsError('%s: expected %s like 0x1002, found %r' % (host_path(root, path), what, text[:60]))
    return '0x%04x' % int(text, 16)


def is_display(root, devpath):
    """PCI base class 0x03: VGA/3D/display controller."""
    text = read_text(root, devpath + '/class')
    if text is None:
        return False
    if not re.match(r'^0x[0-9a-fA-F]{6}$', text):
        raise GpuFactsError('%s: expected a PCI class code like 0x030000, found %r' % (
            host_path(root, devpath + '/class'), text[:60]))
    return int(text, 16) >> 16 == 0x03


def parse_link_speed(text, source='link speed'):
    """'16.0 GT/s PCIe', '8 GT/s', '16GT/s' -> 16.0; 'Unknown' -> None; a rate no link has (5000 digits, which a
    float cast reads as infinity) is refused naming ``source``."""
    if not text:
        return None
    match = re.match(r'^\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s', text)
    if not match:
        return None
    try:
        return float(num_text(match.group(1), source, 0.0, LINK_SPEED_MAX_GTS))
    except ShapeError as exc:
        raise GpuFactsError('%s: expected a PCIe transfer rate in GT/s' % exc)


def link_gen(speed):
    return GEN_BY_GTS.get(speed) if speed is not None else None


def link_gbps(speed, width):
    gen = link_gen(speed)
    if gen is None or not width:
        return None
    return round(LANE_GBPS[gen] * width, 2)


def speed_text(speed):
    return None if speed is None else '%.1f GT/s' % speed


def read_link(root, devpath):
    """(current speed, current width, max speed, max width) from sysfs."""
    def width(name):
        text = read_text(root, devpath + '/' + name)
        if text is None:
            return None
        try:
            value = int_text(text, host_path(root, devpath + '/' + name), 0, LINK_WIDTH_MAX)
        except ShapeError as exc:
            raise GpuFactsError('%s: expected a lane count' % exc)
        return value or None

    def speed(name):
        return parse_link_speed(read_text(root, devpath + '/' + name), host_path(root, devpath + '/' + name))
    return speed('current_link_speed'), width('current_link_width'), speed('max_link_speed'), width('max_link_width')


def pci_chain(devpath):
    """['/sys/devices/pci0000:00/0000:00:01.1', ..., devpath]: the card and its
    upstream bridges, root port first, found by walking '..' parents."""
    chain = []
    cur = devpath
    while _BDF_RE.match(os.path.basename(cur)):
        chain.insert(0, cur)
        cur = os.path.dirname(cur)
    return chain


# ------------------------------------------------------------------ tool text

def _flag(text, name):
    match = re.search(r'(?<![A-Za-z0-9])' + re.escape(name) + r'([+-])', text)
    return None if match is None else match.group(1) == '+'


_LSPCI_HEADER = re.compile(
    r'^(?:(?P<dom>[0-9a-fA-F]{4,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])\s+(?P<rest>\S.*)$')
_PORT_TYPES = (
    ('Root Complex Integrated Endpoint', 'endpoint'),
    ('Legacy Endpoint', 'endpoint'),
    ('Endpoint', 'endpoint'),
    ('Root Port', 'root_port'),
    ('Upstream Port', 'upstream'),
    ('Downstream Port', 'downstream'),
)


def normalize_bdf(text):
    """'0b:00.0', '0000:0b:00.0', '00000000:0B:00.0' -> '0000:0b:00.0'."""
    match = re.match(r'^\s*(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*$', text or '')
    if not match:
        return None
    dom = int(match.group(1) or '0', 16)
    return '%04x:%02x:%02x.%s' % (dom, int(match.group(2), 16), int(match.group(3), 16), match.group(4))


def parse_lspci(text, source):
    """Parse ``lspci -vvv`` (with or without -D) into {bdf: device}.

    device: name, class_name, role (root_port/upstream/downstream/endpoint or
    None), access_denied, link (speed, width) from LnkSta, atomics flags."""
    devices = {}
    cur = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line[0] not in ' \t':
            match = _LSPCI_HEADER.match(line)
            if not match:
                if line.startswith('pcilib:'):
                    continue  # pciutils warnings, not device data
                raise GpuFactsError('%s line %d: expected a device line such as "03:00.0 VGA compatible '
                                    'controller: ..." (output of lspci -vvv), found %r' % (source, lineno, line[:80]))
            bdf = normalize_bdf('%s:%s:%s.%s' % (match.group('dom') or '0', match.group('bus'),
                                                 match.group('dev'), match.group('fn')))
            rest = match.group('rest')
            class_name, _sep, desc = rest.partition(': ')
            desc = re.sub(r'\s*\(prog-if [^)]*\)\s*$', '', desc)
            desc = re.sub(r'\s*\(rev [0-9a-fA-F]+\)\s*$', '', desc)
            cur = {'bdf': bdf, 'class_name': class_name, 'name': desc.strip(), 'role': None,
                   'access_denied': False, 'link': None, 'atomics': None, 'lines': []}
            devices[bdf] = cur
            continue
        if cur is None:
            raise GpuFactsError('%s line %d: indented line before any device line; is this lspci -vvv '
                                'output?' % (source, lineno))
        cur['lines'].append(line.strip())
    if text.strip() and not devices:
        raise GpuFactsError('%s: no device lines found; expected the output of lspci -vvv' % source)
    for dev in devices.values():
        body = '\n'.join(dev.pop('lines'))
        if re.search(r'Capabilities:\s*<access denied>', body):
            dev['access_denied'] = True
        match = re.search(r'Capabilities: \[[0-9a-fA-F]+(?: v\d+)?\] Express (?:\(v\d+\) )?([A-Za-z ]+)', body)
        if match:
            for label, role in _PORT_TYPES:
                if match.group(1).startswith(label):
                    dev['role'] = role
                    break
        match = re.search(r'LnkSta:\s*Speed\s+([0-9.]+|unknown)\s*GT/s[^,\n]*,\s*Width x(\d+)', body)
        if match:
            where = '%s device %s LnkSta' % (source, dev['bdf'])
            try:
                width = int_text(match.group(2), where, 0, LINK_WIDTH_MAX)
            except ShapeError as exc:
                raise GpuFactsError('%s: expected a lane count' % exc)
            dev['link'] = (parse_link_speed(match.group(1) + 'GT/s', where), width or None)
        cap = re.search(r'AtomicOpsCap:([^\n]*)', body)
        ctl = re.search(r'AtomicOpsCtl:([^\n]*)', body)
        if cap or ctl:
            cap_text = cap.group(1) if cap else ''
            ctl_text = ctl.group(1) if ctl else ''
            dev['atomics'] = {
                'routing': _flag(cap_text, 'Routing'),
                'completer_32': _flag(cap_text, '32bit'),
                'completer_64': _flag(cap_text, '64bit'),
                'completer_128cas': _flag(cap_text, '128bitCAS'),
                'requester_enabled': _flag(ctl_text, 'ReqEn'),
                'egress_blocked': _flag(ctl_text, 'EgressBlck'),
            }
    return devices


def _na(value):
    return value is None or value.strip() == '' or value.strip().startswith('[')


# Per NVIDIA_SMI_FIELDS position: the largest value a real GPU reports (integer fields only).
_NVIDIA_SMI_MAX = {0: GPU_INDEX_MAX, 3: VRAM_MAX_MIB, 4: VRAM_MAX_MIB, 6: LINK_GEN_MAX, 7: LINK_WIDTH_MAX}
_NAME = Str(max_len=NAME_MAX_CHARS, name=True)


def parse_nvidia_smi(text, source):
    """Rows of ``nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits``."""
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.strip().startswith('No devices were found'):
            continue
        fields = [f.strip() for f in line.split(',')]
        if fields[0] == 'index':
            continue  # a header line: recorded without noheader
        if len(fields) != len(NVIDIA_SMI_FIELDS):
            raise GpuFactsError('%s line %d: expected %d comma-separated fields (%s), found %d: %s; record it '
                                'with nvidia-smi %s' % (source, lineno, len(NVIDIA_SMI_FIELDS), ','.join(NVIDIA_SMI_FIELDS),
                                                        len(fields), printable(repr(line), limit=100),
                                                        ' '.join(NVIDIA_SMI_ARGS)))

        def num(idx):
            value = fields[idx]
            if _na(value):
                return None
            try:
                where = '%s line %d' % (source, lineno)
                return Int(0, _NVIDIA_SMI_MAX[idx], text=True).read(value, where, NVIDIA_SMI_FIELDS[idx])
            except ShapeError as exc:
                raise GpuFactsError('%s; record it with nvidia-smi %s' % (exc, ' '.join(NVIDIA_SMI_ARGS)))
        try:
            name = _NAME.read(fields[1], '%s line %d' % (source, lineno), 'name')
        except ShapeError as exc:
            raise GpuFactsError(str(exc))
        bus = normalize_bdf(fields[2])
        if bus is None:
            raise GpuFactsError('%s line %d: pci.bus_id %s is not a PCI address like 00000000:19:00.0' % (
                source, lineno, printable(repr(fields[2]), limit=80)))
        cap = fields[5]
        if _na(cap):
            arch = None
        elif re.match(r'[0-9]{1,2}\.[0-9]{1,2}\Z', cap):
            arch = cap.replace('.', '')
        else:
            raise GpuFactsError('%s line %d: compute_cap %s, expected major.minor like 9.0'
                                % (source, lineno, printable(repr(cap), limit=80)))
        gen = num(6)
        rows.append({
            'index': num(0), 'name': name, 'pci_address': bus,
            'memory_total_mib': num(3), 'memory_used_mib': num(4),
            'compute_cap': None if arch is None else cap, 'cuda_arch': arch,
            'link_gen': gen, 'link_width': num(7),
        })
        if rows[-1]['index'] is None:
            raise GpuFactsError('%s line %d: index is %s, expected an integer'
                                % (source, lineno, printable(repr(fields[0]), limit=80)))
    return rows


def parse_rocm_smi(text, source):
    """``rocm-smi --showproductname --showbus --json`` -> {bdf or 'cardN': name}."""
    start = text.find('{')
    if start < 0:
        raise GpuFactsError('%s: no JSON object found; expected rocm-smi %s output' % (source, ' '.join(ROCM_SMI_ARGS)))
    try:
        data = load_json(text[start:], source)
    except ShapeError as exc:
        raise GpuFactsError('%s; expected rocm-smi %s output' % (exc, ' '.join(ROCM_SMI_ARGS)))
    names = {}
    if not isinstance(data, dict):
        raise GpuFactsError('%s: expected a JSON object keyed by card' % source)
    for key, entry in data.items():
        if not isinstance(entry, dict) or not key.startswith('card'):
            continue
        lowered = dict((k.lower(), v) for k, v in entry.items())
        name = lowered.get('marketing name') or lowered.get('card series')
        if not name:
            continue
        try:
            name = _NAME.read(name, source, '%s.marketing name' % printable(key, limit=40))
        except ShapeError as exc:
            raise GpuFactsError(str(exc))
        bus = lowered.get('pci bus')
        bdf = normalize_bdf(bus) if isinstance(bus, str) else None
        names[bdf or key] = name
    return names


def parse_kfd_properties(text, path):
    props = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise GpuFactsError('%s line %d: expected "name value", found %s'
                                % (path, lineno, printable(repr(line), limit=80)))
        lo, hi = KFD_PROPERTY_BOUNDS.get(parts[0], (KFD_PROPERTY_MIN, KFD_PROPERTY_MAX))
        try:
            props[parts[0]] = Int(lo, hi, text=True).read(parts[1], '%s line %d' % (path, lineno),
                                                          printable(parts[0], limit=60))
        except ShapeError as exc:
            raise GpuFactsError('%s; the file is not what the kernel writes there' % exc)
    return props


def gfx_target(version):
    """KFD gfx_target_version (major*10000 + minor*100 + stepping) -> 'gfx1201'."""
    if not version:
        return None
    major, rest = divmod(int(version), 10000)
    minor, step = divmod(rest, 100)
    return 'gfx%d%d%x' % (major, minor, step)


# ----------------------------------------------------------------- collection

def _kfd_gpus(root, warnings):
    """[(node, props)] for GPU nodes in KFD node order = HIP enumeration order."""
    nodes_dir = host_path(root, KFD_NODES)
    if not os.path.isdir(nodes_dir):
        return None
    nodes = []
    for entry in os.listdir(nodes_dir):
        if digits(entry) and len(entry) <= 6:   # a node number, never int() of 5000 digits
            path = KFD_NODES + '/' + entry + '/properties'
            text = read_text(root, path)
            if text is None:
                warnings.append('%s missing; KFD node %s skipped' % (host_path(root, path), entry))
                continue
            props = parse_kfd_properties(text, host_path(root, path))
            if props.get('simd_count', 0) > 0 or props.get('gfx_target_version', 0) > 0:
                nodes.append((int(entry), props))
    nodes.sort()
    return nodes


def _kfd_bdf(props):
    loc = props.get('location_id')
    if loc is None:
        return None
    return '%04x:%02x:%02x.%d' % (props.get('domain', 0), loc >> 8, (loc >> 3) & 0x1f, loc & 7)


def _marketing_name(vendor, device, lspci_dev, rocm_names, product_name, bdf, card):
    for name in (rocm_names.get(bdf), rocm_names.get(card), product_name):
        if name:
            return name
    if lspci_dev and lspci_dev.get('name'):
        desc = re.sub(r'^(Advanced Micro Devices, Inc\. \[AMD/ATI\]|NVIDIA Corporation)\s*', '', lspci_dev['name'])
        inner = re.search(r'\[([^\]]+)\]\s*$', desc)
        return inner.group(1) if inner else desc
    return KNOWN_NAMES.get((vendor, device))


def _chain_info(root, devpath, lspci, fallback_link=None):
    """Path, links and per-hop atomics for the card at sysfs ``devpath``."""
    chain = pci_chain(devpath) if devpath else []
    path = [os.path.basename(p) for p in chain]
    roles = []
    for i, bdf in enumerate(path):
        role = (lspci.get(bdf) or {}).get('role')
        if role is None:  # no lspci: a chain of switches alternates U, D below the root port
            role = 'root_port' if i == 0 else 'endpoint' if i == len(path) - 1 else \
                'upstream' if i % 2 else 'downstream'
        roles.append(role)
    sys_links = [read_link(root, p) for p in chain]
    links = []
    for i in range(1, len(path)):
        if roles[i - 1] not in ('root_port', 'downstream'):
            continue  # upstream port -> its downstream port: inside one switch, no wire
        cur_speed, cur_width, max_c_speed, max_c_width = sys_links[i]
        p_speed, p_width, max_p_speed, max_p_width = sys_links[i - 1]
        speed = cur_speed if cur_speed is not None else p_speed
        width = cur_width if cur_width is not None else p_width
        if speed is None and width is None and (lspci.get(path[i]) or {}).get('link'):
            speed, width = lspci[path[i]]['link']
        caps_s = [s for s in (max_c_speed, max_p_speed) if s is not None]
        caps_w = [w for w in (max_c_width, max_p_width) if w is not None]
        links.append({
            'bridge': path[i - 1], 'device': path[i], 'speed': speed_text(speed), 'gen': link_gen(speed),
            'width': width, 'gbps': link_gbps(speed, width),
            'max_speed': speed_text(min(caps_s)) if caps_s else None,
            'max_width': min(caps_w) if caps_w else None,
        })
    card_link = sys_links[-1][:2] if sys_links else (None, None)
    if card_link == (None, None) and path and (lspci.get(path[-1]) or {}).get('link'):
        card_link = lspci[path[-1]]['link']
    if card_link == (None, None) and fallback_link:
        card_link = fallback_link
    if not links and card_link != (None, None):
        links.append({'bridge': path[-2] if len(path) > 1 else None, 'device': path[-1] if path else None,
                      'speed': speed_text(card_link[0]), 'gen': link_gen(card_link[0]), 'width': card_link[1],
                      'gbps': link_gbps(card_link[0], card_link[1]), 'max_speed': None, 'max_width': None})
    atomics = []
    for bdf, role in zip(path, roles):
        dev = lspci.get(bdf) or {}
        hop = {'bdf': bdf, 'role': role, 'routing': None, 'completer_32': None, 'completer_64': None,
               'completer_128cas': None, 'requester_enabled': None, 'egress_blocked': None,
               'known': bool(dev.get('atomics'))}
        if dev.get('atomics'):
            hop.update(dev['atomics'])
        atomics.append(hop)
    return path, links, card_link, atomics


def atomics_verdict(atomics):
    """(ok, blocking) for one card's hops, root port first, card last.

    ok is True, False, or None (unknown). blocking lists {bdf, reason} in the
    kernel's walk order: from the card upward, so the first is the bridge the
    kernel stops at."""
    if not atomics:
        return None, [{'bdf': None, 'reason': 'no PCIe path known (no sysfs device); AtomicOps unknown'}]
    blocking = []
    unknown = []
    for hop in reversed(atomics[:-1]):
        if not hop.get('known'):
            unknown.append(hop['bdf'])
            continue
        role = hop.get('role')
        if role in ('upstream', 'downstream'):
            if hop.get('routing') is not True:
                blocking.append({'bdf': hop['bdf'], 'reason': 'switch %s port, AtomicOpsCap Routing-: cannot forward '
                                 'AtomicOps toward the CPU' % role})
            if role == 'upstream' and hop.get('egress_blocked'):
                blocking.append({'bdf': hop['bdf'], 'reason': 'switch upstream port, AtomicOpsCtl EgressBlck+: '
                                 'AtomicOps blocked on egress'})
        elif role == 'root_port':
            if not (hop.get('completer_32') and hop.get('completer_64')):
                blocking.append({'bdf': hop['bdf'], 'reason': 'root port, AtomicOpsCap 32bit%s 64bit%s: cannot '
                                 'complete the AtomicOps amdgpu asks for' % (
                                     '+' if hop.get('completer_32') else '-', '+' if hop.get('completer_64') else '-')})
    card = atomics[-1]
    if card.get('known') and card.get('requester_enabled') is False:
        why = ('follows from the bridge(s) above: the kernel sets ReqEn only when the whole path routes AtomicOps'
               if blocking else 'the driver did not enable AtomicOp requests (is amdgpu bound? the kernel checks the '
               'path when it probes the card)')
        blocking.append({'bdf': card['bdf'], 'reason': 'card, AtomicOpsCtl ReqEn-: %s' % why})
    if blocking:
        return False, blocking
    if unknown or not card.get('known') or card.get('requester_enabled') is None:
        missing = unknown + ([] if card.get('known') else [card['bdf']])
        return None, [{'bdf': missing[0] if missing else card['bdf'],
                       'reason': 'AtomicOps unknown: no lspci -vvv capabilities for %s (run lspci as root, or give '
                                 'lspci_output_file)' % ', '.join(missing or [card['bdf']])}]
    return True, []


def finish_card(card):
    """Derived per-card fields from the recorded links and atomics."""
    links = card.get('links') or []
    known = [ln for ln in links if ln.get('gbps') is not None or ln.get('width')]
    if known:
        narrow = min(known, key=lambda ln: (ln.get('gbps') if ln.get('gbps') is not None else float('inf'),
                                            ln.get('width') or 0))
        card['narrowest_link_speed'] = narrow.get('speed')
        card['narrowest_link_gen'] = narrow.get('gen')
        card['narrowest_link_width'] = narrow.get('width')
        card['narrowest_link_gbps'] = narrow.get('gbps')
        card['narrowest_link_bridge'] = narrow.get('bridge')
    else:
        for key in ('narrowest_link_speed', 'narrowest_link_gen', 'narrowest_link_width',
                    'narrowest_link_gbps', 'narrowest_link_bridge'):
            card.setdefault(key, None)
    if isinstance(card.get('atomics'), list):
        ok, blocking = atomics_verdict(card['atomics'])
        card['atomics_ok'] = ok
        card['atomics_blocking'] = blocking
    else:
        card.setdefault('atomics_ok', None)
        card.setdefault('atomics_blocking', [])
    return card


def _amd_cards(root, lspci, rocm_names, warnings):
    drm_dir = host_path(root, DRM_CLASS)
    if not os.path.isdir(drm_dir):
        return []  # an NVIDIA host without nvidia-drm has none; collect() speaks up if no GPU is found
    entries = sorted((int(m.group(1)), e) for e in os.listdir(drm_dir) for m in [_DRM_CARD_RE.match(e)] if m)
    cards = {}
    for _num, entry in entries:
        devpath = resolve(root, DRM_CLASS + '/' + entry + '/device')
        vendor = read_hex_id(root, devpath + '/vendor', 'a PCI vendor id')
        if vendor != VENDOR_AMD:
            continue
        if not is_display(root, devpath):
            continue
        bdf = os.path.basename(devpath)
        if bdf in cards:
            continue
        device = read_hex_id(root, devpath + '/device', 'a PCI device id')
        vram_total = read_int(root, devpath + '/mem_info_vram_total', 'VRAM bytes')
        vram_used = read_int(root, devpath + '/mem_info_vram_used', 'VRAM bytes')
        driver_link = host_path(root, devpath + '/driver')
        driver = os.path.basename(resolve(root, devpath + '/driver')) if os.path.lexists(driver_link) else None
        if vram_total is None:
            warnings.append('%s (%s): no mem_info_vram_total under %s; VRAM unknown (driver: %s; amdgpu must be '
                            'bound)' % (entry, bdf, host_path(root, devpath), driver or 'none'))
        path, links, card_link, atomics = _chain_info(root, devpath, lspci)
        cards[bdf] = {
            'vendor': 'amd', 'vendor_id': vendor, 'device_id': device, 'backend': 'hip',
            'marketing_name': _marketing_name(vendor, device, lspci.get(bdf), rocm_names,
                                              read_text(root, devpath + '/product_name'), bdf, entry),
            'pci_address': bdf, 'drm_card': entry, 'driver': driver,
            'vram_total_bytes': vram_total, 'vram_used_bytes': vram_used if vram_used is not None else 0,
            'vram_reserved_bytes': 0, 'gfx_target': None, 'compute_cap': None, 'integrated': False,
            'runtime_index': None, 'kfd_node': None,
            'link_speed': speed_text(card_link[0]), 'link_gen': link_gen(card_link[0]), 'link_width': card_link[1],
            'path': path, 'links': links, 'atomics': atomics,
        }
    nodes = _kfd_gpus(root, warnings)
    if cards and nodes is None:
        warnings.append('%s does not exist: gfx targets unknown and HIP order assumed to be PCI bus order (is the '
                        'amdkfd part of amdgpu loaded?)' % host_path(root, KFD_NODES))
    order = []
    for node, props in nodes or []:
        bdf = _kfd_bdf(props)
        card = cards.get(bdf)
        if card is None:
            warnings.append('KFD node %d (%s) has no matching AMD DRM card; it is counted in HIP order but not '
                            'reported' % (node, bdf))
            order.append(None)
            continue
        card['kfd_node'] = node
        card['gfx_target'] = gfx_target(props.get('gfx_target_version'))
        if props.get('cpu_cores_count', 0) > 0:
            card['integrated'] = True  # CPU and GPU in one KFD node: an APU
        order.append(bdf)
    for bdf in sorted(b for b in cards if b not in order):
        if nodes is not None:
            warnings.append('%s has no KFD topology node: HIP will not see it (gfx target unknown)' % bdf)
        else:
            order.append(bdf)
    for idx, bdf in enumerate(order):
        if bdf is not None:
            cards[bdf]['runtime_index'] = idx
    for card in cards.values():
        if card['gfx_target'] in INTEGRATED_GFX or card['device_id'] in INTEGRATED_DEVICE_IDS:
            card['integrated'] = True
    return sorted(cards.values(), key=lambda c: (c['runtime_index'] is None, c['runtime_index'], c['pci_address']))


def _nvidia_cards(root, rows, lspci):
    cards = []
    for row in rows:
        bdf = row['pci_address']
        devlink = PCI_DEVICES + '/' + bdf
        devpath = resolve(root, devlink) if os.path.lexists(host_path(root, devlink)) else None
        fallback = None
        if row['link_gen']:
            speeds = dict((g, s) for s, g in GEN_BY_GTS.items())
            fallback = (speeds.get(row['link_gen']), row['link_width'])
        path, links, card_link, atomics = _chain_info(root, devpath, lspci, fallback)
        if devpath is None:
            path, atomics = [bdf], []
        mib = row['memory_total_mib']
        cards.append({
            'vendor': 'nvidia', 'vendor_id': VENDOR_NVIDIA, 'backend': 'cuda',
            'device_id': read_hex_id(root, devpath + '/device', 'a PCI device id') if devpath else None,
            'marketing_name': row['name'], 'pci_address': bdf, 'drm_card': None, 'driver': 'nvidia',
            'vram_total_bytes': None if mib is None else mib * MIB,
            'vram_used_bytes': (row['memory_used_mib'] or 0) * MIB, 'vram_reserved_bytes': 0,
            'gfx_target': None, 'compute_cap': row['compute_cap'], 'cuda_arch': row['cuda_arch'],
            'integrated': False, 'runtime_index': row['index'], 'kfd_node': None,
            'link_speed': speed_text(card_link[0]), 'link_gen': link_gen(card_link[0]), 'link_width': card_link[1],
            'path': path, 'links': links, 'atomics': atomics,
        })
    return sorted(cards, key=lambda c: c['runtime_index'])


def assign_names(cards, include_integrated):
    """llama.cpp device names: ROCm<k>/CUDA<k> in runtime order, hidden
    integrated GPUs skipped (they are left out of HIP_VISIBLE_DEVICES)."""
    counters = {}
    for card in sorted(cards, key=lambda c: (c.get('vendor'), c.get('runtime_index') is None,
                                             c.get('runtime_index'), c.get('pci_address'))):
        prefix = 'ROCm' if card.get('vendor') == 'amd' else 'CUDA'
        hidden = (card.get('integrated') and not include_integrated) or card.get('runtime_index') is None
        card['hidden'] = bool(hidden)
        if hidden:
            card['name'] = None
            card['index'] = None
            continue
        card['index'] = counters.get(prefix, 0)
        card['name'] = '%s%d' % (prefix, card['index'])
        counters[prefix] = card['index'] + 1
    return cards


_KEY_ORDER = (
    'name', 'index', 'hidden', 'integrated', 'vendor', 'backend', 'marketing_name', 'vendor_id', 'device_id',
    'gfx_target', 'compute_cap', 'cuda_arch', 'runtime_index', 'vram_total_bytes', 'vram_used_bytes',
    'vram_reserved_bytes', 'pci_address', 'link_speed', 'link_gen', 'link_width', 'narrowest_link_speed',
    'narrowest_link_gen', 'narrowest_link_width', 'narrowest_link_gbps', 'narrowest_link_bridge', 'atomics_ok',
    'atomics_blocking', 'path', 'links', 'atomics', 'drm_card', 'kfd_node', 'driver',
)


def _ordered(card):
    out = dict((key, card.get(key)) for key in _KEY_ORDER)
    out.update((key, value) for key, value in card.items() if key not in out)
    return out


def summarize(cards, include_integrated, warnings, sources):
    """The module result from a list of cards (live or recorded)."""
    for card in cards:
        finish_card(card)
    assign_names(cards, include_integrated)
    cards = [_ordered(card) for card in cards]
    visible = [c for c in cards if not c['hidden']]
    amd = [c for c in visible if c['vendor'] == 'amd']
    nvidia = [c for c in visible if c['vendor'] == 'nvidia']
    integrated = [c for c in cards if c.get('integrated')]
    if integrated and not include_integrated and not visible:
        warnings.append('only integrated GPUs found (%s); set include_integrated: true to serve on them' % ', '.join(
            '%s %s' % (c['pci_address'], c.get('gfx_target') or '') for c in integrated))
    legal = bool(visible)
    blocking = None
    for card in visible:
        if card['vendor'] != 'amd':
            continue  # NCCL needs no PCIe AtomicOps
        if card['atomics_ok'] is not True:
            legal = False
            if blocking is None:
                first = (card.get('atomics_blocking') or [
                    {'bdf': None, 'reason': "AtomicOps unknown: nothing recorded about this card's PCIe path"}])[0]
                blocking = {'bdf': first['bdf'] or card['pci_address'], 'card': card['name'],
                            'pci_address': card['pci_address'], 'reason': first['reason']}
    archs = sorted(set(c['cuda_arch'] for c in nvidia if c.get('cuda_arch')), key=int)
    targets = sorted(set(c['gfx_target'] for c in amd if c.get('gfx_target')))
    result = {
        'gpus': cards,
        'collectives_legal': legal,
        'blocking_bridge': blocking,
        'hip_visible_devices': ','.join(str(c['runtime_index']) for c in amd),
        'cuda_visible_devices': ','.join(str(c['runtime_index']) for c in nvidia),
        'cuda_architectures': ';'.join(archs),
        'amdgpu_targets': ';'.join(targets),
        'facts_warnings': warnings,
        'sources': sources,
    }
    result['topology'] = render_topology(result)
    return result


def collect(root='/', lspci_text=None, lspci_source='lspci -vvv', nvidia_smi_text=None,
            nvidia_smi_source='nvidia-smi', rocm_smi_text=None, rocm_smi_source='rocm-smi',
            include_integrated=False, warnings=None):
    """Facts of the host (or recorded tree) at ``root``; tool output as text.

    A text of None means the tool was not available; the caller adds why to
    ``warnings``."""
    warnings = list(warnings or [])
    if not os.path.isdir(root):
        raise GpuFactsError('sysfs_root %s does not exist or is not a directory' % root)
    if not os.path.isdir(host_path(root, '/sys')):
        raise GpuFactsError('sysfs_root %s has no sys/ directory; give the directory that contains sys/ '
                            '(/ on a live host)' % root)
    lspci = parse_lspci(lspci_text, lspci_source) if lspci_text is not None else {}
    if lspci and any(d['access_denied'] for d in lspci.values()):
        warnings.append('%s: capabilities read as <access denied>; run it as root (become: true) or AtomicOps '
                        'stay unknown' % lspci_source)
    rocm_names = parse_rocm_smi(rocm_smi_text, rocm_smi_source) if rocm_smi_text else {}
    rows = parse_nvidia_smi(nvidia_smi_text, nvidia_smi_source) if nvidia_smi_text is not None else []
    cards = _amd_cards(root, lspci, rocm_names, warnings) + _nvidia_cards(root, rows, lspci)
    if nvidia_smi_text is None:
        nv_dir = host_path(root, PCI_DEVICES)
        for entry in sorted(os.listdir(nv_dir)) if os.path.isdir(nv_dir) else []:
            dev = PCI_DEVICES + '/' + entry
            if read_text(root, dev + '/vendor') == VENDOR_NVIDIA and is_display(root, resolve(root, dev)):
                warnings.append('NVIDIA GPU %s found in sysfs but no nvidia-smi output; it is not reported (install '
                                'the NVIDIA driver, or give nvidia_smi_output_file)' % entry)
    sources = {'sysfs_root': root, 'lspci': lspci_source if lspci_text is not None else None,
               'nvidia_smi': nvidia_smi_source if nvidia_smi_text is not None else None,
               'rocm_smi': rocm_smi_source if rocm_smi_text else None, 'facts_file': None}
    if lspci_text is None and any(c['vendor'] == 'amd' for c in cards):
        warnings.append('no lspci -vvv output: AtomicOps unknown, so collectives_legal is false until lspci '
                        '(pciutils) runs as root or lspci_output_file is given')
    if not cards:
        drm = host_path(root, DRM_CLASS)
        warnings.append('no GPU found: %s, and %s' % (
            'no AMD card under %s' % drm if os.path.isdir(drm) else '%s does not exist (amdgpu not loaded?)' % drm,
            'nvidia-smi listed none' if nvidia_smi_text is not None else 'no nvidia-smi output'))
    return summarize(cards, include_integrated, warnings, sources)


# A saved result is a few KiB; anything near this is not one (and is not read into memory).
FACTS_FILE_MAX_BYTES = 16 * MIB


class _FactsFileError(Exception):
    pass


_REQUIRED = (('pci_address', str), ('vendor', str), ('vram_total_bytes', int))
_DEFAULTS = (('vram_used_bytes', int, 0), ('vram_reserved_bytes', int, 0), ('integrated', bool, False))


# What each recorded key the result is derived from must hold; null is allowed for all but the required ones.
# A wrong type is refused naming the key (gpus[i].links[j].gbps ...) before anything is derived from it.
def _t_str(v):
    return isinstance(v, str) and len(v) <= 4096 and not _CONTROL.search(v)


def _t_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT_LIMIT


def _t_bool(v):
    return isinstance(v, bool)


def _t_gbps(v):
    return is_finite_number(v) and v >= 0


def _t_digits(v):
    return isinstance(v, str) and digits(v)


def _t_str_list(v):
    return isinstance(v, list) and all(_t_str(x) for x in v)


_CONTROL = re.compile(u'[\x00-\x1f\x7f-\x9f]')   # a recorded name reaches the topology text and the terminal


_CARD_SHAPE = (
    ('runtime_index', _t_uint, 'an integer >= 0 (the HIP/CUDA enumeration index)'),
    ('kfd_node', _t_uint, 'an integer >= 0'),
    ('backend', _t_str, 'a string (hip or cuda)'),
    ('gfx_target', _t_str, 'a string like gfx1201'),
    ('cuda_arch', _t_digits, 'a string of digits like "90"'),
    ('compute_cap', _t_str, 'a string like "9.0"'),
    ('marketing_name', _t_str, 'a string'), ('device_id', _t_str, 'a string'), ('vendor_id', _t_str, 'a string'),
    ('driver', _t_str, 'a string'), ('drm_card', _t_str, 'a string'),
    ('link_speed', _t_str, 'a string like "16.0 GT/s PCIe"'), ('link_gen', _t_uint, 'an integer'),
    ('link_width', _t_uint, 'an integer'),
    ('narrowest_link_speed', _t_str, 'a string'), ('narrowest_link_gen', _t_uint, 'an integer'),
    ('narrowest_link_width', _t_uint, 'an integer'), ('narrowest_link_gbps', _t_gbps, 'a finite number >= 0'),
    ('narrowest_link_bridge', _t_str, 'a PCI address string'),
    ('atomics_ok', _t_bool, 'true, false or null'),
    ('path', _t_str_list, 'a list of PCI address strings, the card first'),
)
_LINK_SHAPE = (
    ('gbps', _t_gbps, 'a finite number >= 0'), ('width', _t_uint, 'an integer'), ('gen', _t_uint, 'an integer'),
    ('speed', _t_str, 'a string like "16.0 GT/s PCIe"'), ('max_speed', _t_str, 'a string'),
    ('bridge', _t_str, 'a PCI address string'), ('device', _t_str, 'a PCI address string'),
)
_HOP_SHAPE = (('bdf', _t_str, 'a PCI address string'), ('role', _t_str, 'a string'))
_BLOCKING_SHAPE = (('bdf', _t_str, 'a PCI address string'), ('reason', _t_str, 'a string'))


def _quote(value):
    return printable(repr(value), limit=80)


def _check_shape(path, where, d, shape):
    for key, ok, what in shape:
        value = d.get(key)
        if value is not None and not ok(value):
            raise GpuFactsError('facts_file %s: %s.%s must be %s, found %s; save the gpu_facts result again (or fix '
                                'that key)' % (path, where, key, what, _quote(value)))


def _check_list_of_dicts(path, where, value, shape):
    if value is None:
        return
    if not isinstance(value, list):
        raise GpuFactsError('facts_file %s: %s must be a list, found %s; save the gpu_facts result again'
                            % (path, where, _quote(value)))
    for j, item in enumerate(value):
        if not isinstance(item, dict):
            raise GpuFactsError('facts_file %s: %s[%d] must be an object, found %s; save the gpu_facts result again'
                                % (path, where, j, _quote(item)))
        _check_shape(path, '%s[%d]' % (where, j), item, shape)


def _check_card(path, i, card):
    where = 'gpus[%d]' % i
    _check_shape(path, where, card, _CARD_SHAPE)
    _check_list_of_dicts(path, where + '.links', card.get('links'), _LINK_SHAPE)
    _check_list_of_dicts(path, where + '.atomics', card.get('atomics'), _HOP_SHAPE)
    for j, hop in enumerate(card.get('atomics') or []):
        if not isinstance(hop.get('bdf'), str):
            raise GpuFactsError('facts_file %s: %s.atomics[%d].bdf must be a PCI address string, found %s'
                                % (path, where, j, _quote(hop.get('bdf'))))
    _check_list_of_dicts(path, where + '.atomics_blocking', card.get('atomics_blocking'), _BLOCKING_SHAPE)


def load_facts(path, include_integrated=False):
    """A recorded gpu_facts result (JSON) -> a fresh result: names, verdicts
    and the topology text are derived again from the recorded cards."""
    try:
        with open_regular(path, _FactsFileError, 'saved gpu_facts result', max_bytes=FACTS_FILE_MAX_BYTES) as handle:
            text = decode_text(handle.read(FACTS_FILE_MAX_BYTES + 1), path, 'saved gpu_facts result')
    except _FactsFileError as exc:
        raise GpuFactsError('facts_file %s: %s' % (path, exc.args[1]))
    except FileRefused as exc:
        raise GpuFactsError('facts_file %s' % exc)
    except (IOError, OSError) as exc:
        raise GpuFactsError('facts_file %s: cannot read (%s)' % (path, exc))
    try:
        # bounded: depth, size, finite numbers, int64 integers (5000 digits and NaN end here, by name)
        data = load_json(text, 'facts_file %s' % path)
    except ShapeError as exc:
        raise GpuFactsError('%s; save a gpu_facts result with to_nice_json' % exc)
    if not isinstance(data, dict) or not isinstance(data.get('gpus'), list):
        raise GpuFactsError('facts_file %s: expected a JSON object with a "gpus" list (a saved gpu_facts '
                            'result)' % path)
    cards = []
    for i, card in enumerate(data['gpus']):
        if not isinstance(card, dict):
            raise GpuFactsError('facts_file %s: gpus[%d] is not an object' % (path, i))
        card = dict(card)
        for key, kind in _REQUIRED:
            if not isinstance(card.get(key), kind) or isinstance(card.get(key), bool):
                raise GpuFactsError('facts_file %s: gpus[%d] needs %s (%s), found %s' % (
                    path, i, key, kind.__name__, _quote(card.get(key))))
        if card['vendor'] not in ('amd', 'nvidia'):
            raise GpuFactsError('facts_file %s: gpus[%d].vendor must be amd or nvidia, found %s' % (
                path, i, _quote(card['vendor'])))
        for key, kind, default in _DEFAULTS:
            value = card.setdefault(key, default)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise GpuFactsError('facts_file %s: gpus[%d].%s must be %s, found %s' % (
                    path, i, key, kind.__name__, _quote(value)))
        for key in ('vram_total_bytes', 'vram_used_bytes', 'vram_reserved_bytes'):
            if not 0 <= card[key] <= VRAM_MAX_BYTES:
                raise GpuFactsError('facts_file %s: gpus[%d].%s is %d: VRAM bytes are from 0 to %d (2**50); save '
                                    'the gpu_facts result again' % (path, i, key, card[key], VRAM_MAX_BYTES))
        _check_card(path, i, card)
        card.setdefault('runtime_index', i)
        card.setdefault('backend', 'hip' if card['vendor'] == 'amd' else 'cuda')
        card.setdefault('gfx_target', None)
        card.setdefault('cuda_arch', None)
        card.setdefault('path', [card['pci_address']])
        card.setdefault('marketing_name', None)
        card.pop('name', None)
        card.pop('index', None)
        cards.append(card)
    recorded = data.get('facts_warnings') or []
    if not _t_str_list(recorded):
        raise GpuFactsError('facts_file %s: facts_warnings must be a list of strings, found %s'
                            % (path, _quote(recorded)))
    if not isinstance(data.get('sources') or {}, dict):
        raise GpuFactsError('facts_file %s: sources must be an object, found %s' % (path, _quote(data.get('sources'))))
    warnings = ['recorded: %s' % w for w in recorded]
    sources = dict(data.get('sources') or {})
    sources['facts_file'] = path
    return summarize(cards, include_integrated, warnings, sources)


# ------------------------------------------------------------------ rendering

def _short(bdf):
    if not bdf:
        return '?'
    return bdf[5:] if bdf.startswith('0000:') else bdf


def _link_label(gen, width, speed):
    if gen:
        head = 'Gen%d' % gen
    elif speed:
        head = speed
    else:
        head = '?'
    return '%s x%s' % (head, width if width else '?')


def _bw_label(gbps):
    if gbps is None:
        return ''
    return ' (~%s GB/s)' % ('%.1f' % gbps if gbps >= 10 else '%.2f' % gbps)


def _path_text(card):
    path = card.get('path') or []
    if not path:
        return 'unknown'
    links = dict((ln.get('device'), ln) for ln in card.get('links') or [] if ln.get('bridge'))
    out = [_short(path[0])]
    for bdf in path[1:]:
        link = links.get(bdf)
        out.append(('-[%s]- ' % _link_label(link.get('gen'), link.get('width'), link.get('speed'))
                    if link else '> ') + _short(bdf))
    return ' '.join(out)


def _card_line(card):
    label = card['name'] or 'hidden'
    what = card.get('marketing_name') or card.get('device_id') or card['vendor']
    arch = card.get('gfx_target') or (('sm_%s' % card['cuda_arch']) if card.get('cuda_arch') else None)
    vram = card.get('vram_total_bytes')
    bits = ['%s (%s)' % (what, arch) if arch else what]
    if card.get('integrated'):
        bits.append('integrated')
    bits.append('%.2f GiB VRAM' % (vram / GIB) if vram is not None else 'VRAM unknown')
    if card.get('runtime_index') is not None:
        bits.append('%s device %d' % ('HIP' if card['vendor'] == 'amd' else 'CUDA', card['runtime_index']))
    return '%-6s %s  %s' % (label, card['pci_address'], ', '.join(bits))


def render_topology(result):
    cards = result['gpus']
    lines = []
    if not cards:
        lines.append('No GPU found.')
    else:
        lines.append('GPU topology: %d card(s), %d integrated. Path legend: -[GenN xW]- is a PCIe link, > is a hop '
                     'inside a switch.' % (len(cards), len([c for c in cards if c.get('integrated')])))
    for card in cards:
        lines.append(_card_line(card))
        if card['hidden'] and card.get('integrated'):
            lines.append('  hidden: integrated GPU, left out of HIP_VISIBLE_DEVICES=%s (set include_integrated to '
                         'use it)' % (result['hip_visible_devices'] or '""'))
            continue
        if card['hidden']:
            lines.append('  hidden: no KFD topology node, so HIP does not enumerate it')
            continue
        lines.append('  PCIe path: %s' % _path_text(card))
        if card.get('narrowest_link_width') or card.get('narrowest_link_speed'):
            lines.append('  narrowest link: %s%s %s' % (
                _link_label(card.get('narrowest_link_gen'), card.get('narrowest_link_width'),
                            card.get('narrowest_link_speed')),
                _bw_label(card.get('narrowest_link_gbps')),
                'below %s' % _short(card['narrowest_link_bridge']) if card.get('narrowest_link_bridge')
                else "(the card's own link)"))
        else:
            lines.append('  narrowest link: unknown')
        for link in card.get('links') or []:
            top, now = parse_link_speed(link.get('max_speed')), parse_link_speed(link.get('speed'))
            if top is not None and now is not None and top > now:
                lines.append('  note: link below %s runs at %s but both ends can do %s; an idle card may train '
                             'down to save power, read again under load' % (
                                 _short(link.get('bridge')), link['speed'], link['max_speed']))
        if card['vendor'] == 'nvidia':
            lines.append('  AtomicOps: not needed (NCCL does not use PCIe AtomicOps)')
        elif card.get('atomics_ok') is True:
            lines.append('  AtomicOps: routed at every bridge, card ReqEn+ -> RCCL can run')
        else:
            blocks = card.get('atomics_blocking') or []
            if card.get('atomics_ok') is False:
                lines.append('  AtomicOps: BLOCKED (walking up from the card, as the kernel checks at probe):')
                lines.extend('    %s %s' % (_short(b['bdf']), b['reason']) for b in blocks)
            else:
                lines.append('  AtomicOps: unknown - %s' % (blocks[0]['reason'] if blocks else 'no data'))
    if result['hip_visible_devices']:
        lines.append('HIP_VISIBLE_DEVICES=%s' % result['hip_visible_devices'])
    if result['cuda_visible_devices']:
        lines.append('CUDA_VISIBLE_DEVICES=%s (CUDA order = nvidia-smi order only with CUDA_DEVICE_ORDER=PCI_BUS_ID)'
                     % result['cuda_visible_devices'])
    visible = [c for c in cards if not c['hidden']]
    if result['collectives_legal']:
        if all(c['vendor'] == 'nvidia' for c in visible):
            lines.append('collectives_legal: true - NCCL collectives need no PCIe AtomicOps.')
        else:
            lines.append('collectives_legal: true - %s' % COLLECTIVE_MEANING_LEGAL)
    else:
        block = result['blocking_bridge']
        if block:
            lines.append('collectives_legal: false - blocked at %s (%s %s): %s' % (
                block['bdf'], block['card'], block['pci_address'], block['reason']))
        else:
            lines.append('collectives_legal: false - no GPU visible.')
        if any(c['vendor'] == 'amd' for c in visible):
            lines.append('  %s' % COLLECTIVE_MEANING_BLOCKED)
    for warning in result['facts_warnings']:
        lines.append('warning: %s' % warning)
    return '\n'.join(lines)
