# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""VRAM per card right now, read the way the fleet reads it: what a benchmark records beside its figures.

nvidia-smi, the amdgpu sysfs counters rocm-smi itself reads, or rocm-smi; every figure bounded by what a card
can hold (``VRAM_MAX_*``, the host's GPU reader's bounds in host/gpu_facts.py) and a figure outside them
refused by name (ShapeError), never recorded. Runs on the target, so stdlib only; the batch sweep
(bench_batch) and the speculative A/B (bench_spec) call ``read_vram`` and ``vram_summary``.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os
import re
import subprocess

from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import read_text
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import (
    Int, Num, ShapeError, int_text, kind, load_json, printable)
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gpu_facts import MIB, VRAM_MAX_BYTES, VRAM_MAX_MIB

NVIDIA_SMI_MEMORY = ['--query-gpu=index,memory.used,memory.total', '--format=csv,noheader,nounits']
ROCM_SMI_MEMORY = ['--showmeminfo', 'vram', '--json']


def _which(name):
    for directory in os.environ.get('PATH', '/usr/bin:/bin').split(os.pathsep) + ['/opt/rocm/bin']:
        path = os.path.join(directory, name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


_SMI_INDEX = re.compile(r'[0-9]{1,4}\Z')
_VRAM_MIB = Num(0, VRAM_MAX_MIB, text=True)
_VRAM_BYTES = Int(0, VRAM_MAX_BYTES, text=True)


def parse_nvidia_smi_memory(text, source='nvidia-smi'):
    """``nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits`` -> cards.

    Lines that are no card (a header, "No devices were found") are passed over and a card whose figures are
    [N/A] is left out; a card's figure that is not a MiB count a GPU can hold (5000 digits, -1, 1e30) is
    refused (ShapeError naming the line and field), never recorded."""
    cards = []
    for lineno, line in enumerate(text.splitlines(), 1):
        fields = [f.strip() for f in line.split(',')]
        if len(fields) != 3 or not _SMI_INDEX.match(fields[0]):
            continue
        if any(f.startswith('[') and f.endswith(']') for f in fields[1:]):
            continue     # [N/A], [Insufficient Permissions]
        where = '%s line %d' % (source, lineno)
        cards.append({'card': 'CUDA%d' % int(fields[0]), 'used_mib': float(_VRAM_MIB.read(fields[1], where, 'memory.used')),
                      'total_mib': float(_VRAM_MIB.read(fields[2], where, 'memory.total'))})
    return cards


def parse_rocm_smi_memory(text, source='rocm-smi'):
    """``rocm-smi --showmeminfo vram --json`` -> cards (bytes in the JSON, MiB out). No JSON at all is no card;
    JSON that is not an object of cards, or a VRAM figure no card holds, is refused (ShapeError)."""
    start = text.find('{')
    if start < 0:
        return []
    data = load_json(text[start:], source)
    if not isinstance(data, dict):
        raise ShapeError(source, '', 'expected a JSON object keyed by card, got %s' % kind(data))
    cards = []
    for key in sorted(data, key=_card_order):
        entry = data[key]
        if not isinstance(entry, dict):
            continue
        used = total = None
        for name, value in entry.items():
            low = name.lower()
            if 'vram' in low and 'used' in low:
                used = _VRAM_BYTES.read(value, source, '%s.%s' % (key, name))
            elif 'vram' in low and 'total' in low:
                total = _VRAM_BYTES.read(value, source, '%s.%s' % (key, name))
        if used is None:
            continue
        cards.append({'card': 'ROCm%d' % len(cards), 'source_card': key, 'used_mib': used / float(MIB),
                      'total_mib': total / float(MIB) if total is not None else None})
    return cards


def _card_order(name):
    digits = re.sub(r'\D', '', name)[:9]
    return (int(digits) if digits else 0, name)


def read_amdgpu_sysfs(root='/'):
    """Used/total VRAM of every amdgpu card from sysfs (what rocm-smi reads), in card order. A card whose files
    are gone is passed over; a figure that is not a byte count a card holds is refused (ShapeError)."""
    cards = []
    pattern = os.path.join(root, 'sys/class/drm/card[0-9]*/device/mem_info_vram_used')
    for used_path in sorted(glob.glob(pattern), key=lambda p: _card_order(p.split('/drm/')[1].split('/')[0])):
        device = os.path.dirname(used_path)
        total_path = os.path.join(device, 'mem_info_vram_total')
        try:  # sysfs attributes: regular files, read to EOF without blocking, a page at most
            used_text = read_text(used_path, 'sysfs attribute', 1 << 16)
            total_text = read_text(total_path, 'sysfs attribute', 1 << 16)
        except (IOError, OSError):
            continue
        used = int_text(used_text, used_path, 0, VRAM_MAX_BYTES)
        total = int_text(total_text, total_path, 0, VRAM_MAX_BYTES)
        cards.append({'card': 'ROCm%d' % len(cards), 'source_card': used_path.split('/drm/')[1].split('/')[0],
                      'used_mib': used / float(MIB), 'total_mib': total / float(MIB)})
    return cards


def read_vram():
    """VRAM per card right now: (cards, source) - ([], None) where nothing can measure it (a CPU host).

    Cards are ``{card, used_mib, total_mib}``; ``card`` is the llama.cpp-style name in runtime order.
    Integrated GPUs that the service hides are still listed: the reader cannot know the unit's
    HIP_VISIBLE_DEVICES; compare by ``source_card`` when that matters. A reader whose output is not of its
    shape ends the search: ([], 'refused: <where and why>') - no figure, and the refusal recorded by name.
    """
    readers = (('nvidia-smi', lambda: _smi_cards('nvidia-smi', NVIDIA_SMI_MEMORY, parse_nvidia_smi_memory)),
               ('amdgpu sysfs', lambda: read_amdgpu_sysfs('/')),
               ('rocm-smi', lambda: _smi_cards('rocm-smi', ROCM_SMI_MEMORY, parse_rocm_smi_memory)))
    for source, read in readers:
        try:
            cards = read()
        except ShapeError as exc:
            return [], 'refused: %s' % printable(str(exc), limit=300)
        if cards:
            return cards, source
    return [], None


def _smi_cards(command, args, parse):
    """Cards from a vendor tool's output: [] where the tool is missing, fails or prints none."""
    path = _which(command)
    text = _run([path] + args) if path else None
    return parse(text) if text is not None else []


def _run(argv):
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, _ = proc.communicate()
    except (IOError, OSError):
        return None
    if proc.returncode != 0:
        return None
    return out.decode('utf-8', 'replace')


def vram_summary(cards):
    """{card: used MiB} rounded to 0.1, or None when nothing was measurable."""
    if not cards:
        return None
    return dict((c['card'], round(c['used_mib'], 1)) for c in cards)
