#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_info
short_description: Report the GPUs llama.cpp will see, their VRAM, PCIe path and AtomicOps verdict
version_added: 0.1.0
description:
  - Reads AMD cards from sysfs (C(/sys/class/drm/card*/device) - vendor C(0x1002), device id,
    C(mem_info_vram_total)/C(mem_info_vram_used)) and the KFD topology
    (C(/sys/class/kfd/kfd/topology/nodes/*/properties)) for the gfx target and the HIP
    enumeration order; NVIDIA cards from
    C(nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,memory.used,compute_cap,pcie.link.gen.current,pcie.link.width.current
    --format=csv,noheader,nounits).
  - Walks each card's PCIe path from its root port through every bridge (sysfs C(..) parents,
    C(current_link_speed)/C(current_link_width)) and names the narrowest link.
  - Reads the AtomicOps bits of every hop from C(lspci -vvv -D) (DevCap2 C(AtomicOpsCap Routing+/-),
    DevCtl2 C(AtomicOpsCtl ReqEn+/-)) and derives RV(collectives_legal) with the rule Linux applies
    when amdgpu probes a card (C(pci_enable_atomic_ops_to_root)); when it is false it names the
    blocking bridge. RCCL collectives (tensor split, vLLM TP/PP) need it; llama.cpp layer split does not.
  - Integrated GPUs (for example the Raphael iGPU, gfx1036) are reported and marked, get no llama.cpp
    device name and are left out of RV(hip_visible_devices) unless O(include_integrated=true).
  - Reads only; never changes the host. C(lspci) needs root (C(become)) to show the capabilities.
  - With O(facts_file) the live host is not read at all; a recorded result (for example of a board
    that is not installed yet) is loaded and the verdicts and names are derived again from it.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
  - dankfleet.llm.attributes.info_module
options:
  sysfs_root:
    description:
      - Directory that contains C(sys/), read in place of the host's C(/). Defaults to C(/), the live host.
      - C(lspci), C(nvidia-smi) and C(rocm-smi) run only when this is C(/); for a recorded tree give
        their output with O(lspci_output_file), O(nvidia_smi_output_file) and O(rocm_smi_output_file).
    type: path
  facts_file:
    description:
      - JSON file holding a saved result of this module (at least C(gpus)), for example of the board
        before it is installed. Names, C(collectives_legal), C(hip_visible_devices) and the
        C(topology) text are derived again from its cards.
      - Each card needs C(pci_address), C(vendor) (C(amd) or C(nvidia)) and C(vram_total_bytes).
      - Every other recorded key the result is derived from (C(runtime_index), C(cuda_arch), C(links),
        C(atomics), C(path), the C(narrowest_link_*) values, C(facts_warnings), C(sources) ...) is checked for its
        type before anything is derived; a wrong one fails naming it (C(gpus[0].links[1].gbps)). NaN and
        infinities are refused.
      - Must be a regular file of at most 16 MiB; a FIFO or a device is refused without blocking.
    type: path
  lspci_output_file:
    description:
      - File with the output of C(lspci -vvv) (with or without C(-D)), used instead of running C(lspci).
    type: path
  nvidia_smi_output_file:
    description:
      - File with the output of the C(nvidia-smi --query-gpu) command above, used instead of running it.
    type: path
  rocm_smi_output_file:
    description:
      - File with the output of C(rocm-smi --showproductname --showbus --json), used for marketing names.
      - Optional; without it names come from sysfs C(product_name) or C(lspci).
    type: path
  include_integrated:
    description:
      - Count integrated GPUs as devices to serve on (name them, put them in RV(hip_visible_devices)).
      - Leave false on hosts with discrete cards; set true on an APU-only host (for example Strix Halo).
    type: bool
    default: false
  gguf_paths:
    description:
      - Also look for these GGUF files (a name, for example the payload role, mapped to each path) where the module
        runs and read their headers, in the same call, as M(dankfleet.llm.gguf_info) with C(paths) does; the result
        is RV(gguf_files). One round trip gives a plan both its devices and its payload.
      - A missing or unreadable file is reported there, never failed. The paths are taken as given (absolute).
    type: dict
attributes:
  platform:
    platforms: linux
notes:
  - HIP order is the KFD node order; llama.cpp names the cards that stay visible C(ROCm0), C(ROCm1), ...
  - CUDA names follow the nvidia-smi index (PCI bus order); CUDA uses that order only with
    C(CUDA_DEVICE_ORDER=PCI_BUS_ID).
  - Link speeds are read as they are at that moment; an idle card may train its link down, which
    the C(topology) text points out.
'''

EXAMPLES = r'''
- name: Read the GPUs of the host
  dankfleet.llm.gpu_info:
  become: true
  register: __gpus

- name: Show the topology verdict
  ansible.builtin.debug:
    msg: "{{ __gpus.topology }}"

- name: Plan against recorded facts of a board that is not installed yet
  dankfleet.llm.gpu_info:
    facts_file: "{{ playbook_dir }}/files/b850-proart.facts.json"
  delegate_to: localhost
  register: __gpus_new_board

- name: Read a recorded sysfs tree with its lspci -vvv text
  dankfleet.llm.gpu_info:
    sysfs_root: /srv/recorded/b650
    lspci_output_file: /srv/recorded/b650.lspci.txt
'''

RETURN = r'''
gpus:
  description:
    - One entry per card, discrete cards first in HIP/CUDA order, hidden integrated GPUs included.
    - Also holds C(links) (per PCIe link - C(bridge), C(device), C(speed), C(gen), C(width), C(gbps),
      C(max_speed), C(max_width)), C(atomics) (per hop - C(bdf), C(role), C(routing), C(completer_32),
      C(completer_64), C(completer_128cas), C(requester_enabled), C(egress_blocked), C(known)),
      C(atomics_blocking), C(runtime_index), C(drm_card), C(kfd_node), C(driver), C(backend), C(hidden).
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: llama.cpp device name (C(ROCm0), C(CUDA0)); null for a hidden integrated GPU.
      type: str
      sample: ROCm1
    index:
      description: The number in RV(gpus[].name); null when hidden.
      type: int
    runtime_index:
      description:
        - Index in the runtime's own enumeration (HIP order from the KFD topology, or the nvidia-smi index),
          counting hidden GPUs; this is what RV(hip_visible_devices) lists.
      type: int
      sample: 2
    hidden:
      description: True when llama.cpp will not see the card (an integrated GPU left out of RV(hip_visible_devices)).
      type: bool
    vendor:
      description: C(amd) or C(nvidia).
      type: str
    vendor_id:
      description: PCI vendor id.
      type: str
      sample: '0x1002'
    device_id:
      description: PCI device id.
      type: str
      sample: '0x7551'
    marketing_name:
      description: Card name from rocm-smi, sysfs C(product_name), lspci or nvidia-smi.
      type: str
      sample: Radeon AI PRO R9700
    gfx_target:
      description: AMD gfx target from the KFD topology.
      type: str
      sample: gfx1201
    compute_cap:
      description: NVIDIA compute capability.
      type: str
      sample: '9.0'
    vram_total_bytes:
      description: VRAM in bytes (C(mem_info_vram_total) or nvidia-smi memory.total).
      type: int
      sample: 34208743424
    vram_used_bytes:
      description: VRAM in use at the time of reading.
      type: int
    vram_reserved_bytes:
      description: VRAM held back from use; 0 unless known.
      type: int
    integrated:
      description: True for an integrated GPU (APU graphics such as the Raphael gfx1036).
      type: bool
    pci_address:
      description: PCI address of the card.
      type: str
      sample: '0000:0b:00.0'
    link_speed:
      description: The card's own current link speed.
      type: str
      sample: 32.0 GT/s
    link_width:
      description: The card's own current link width (lanes).
      type: int
    narrowest_link_speed:
      description: Speed of the slowest link between the root port and the card.
      type: str
      sample: 16.0 GT/s
    narrowest_link_gen:
      description: PCIe generation of that link.
      type: int
      sample: 4
    narrowest_link_width:
      description: Width of that link.
      type: int
      sample: 1
    narrowest_link_gbps:
      description: Usable GB/s of that link after line encoding.
      type: float
      sample: 1.97
    narrowest_link_bridge:
      description: The port above that link.
      type: str
      sample: '0000:06:09.0'
    path:
      description: PCI addresses from the root port to the card.
      type: list
      elements: str
    atomics_ok:
      description: True when AtomicOps reach the CPU from this card, false when blocked, null when unknown.
      type: bool
    atomics_blocking:
      description: The hops (PCI addresses) that block AtomicOps on the way to the CPU; empty when none does.
      type: list
      elements: str
    atomics:
      description:
        - Per hop from the card to the root port - C(bdf), C(role), C(routing), C(completer_32), C(completer_64),
          C(completer_128cas), C(requester_enabled), C(egress_blocked), C(known).
      type: list
      elements: dict
    links:
      description:
        - Per PCIe link from the root port down - C(bridge), C(device), C(speed), C(gen), C(width), C(gbps),
          C(max_speed), C(max_width).
      type: list
      elements: dict
    link_gen:
      description: PCIe generation of the card's own current link.
      type: int
      sample: 5
    backend:
      description: The llama.cpp backend that drives the card, C(hip) or C(cuda).
      type: str
    cuda_arch:
      description: NVIDIA CUDA architecture (compute capability without the dot), null for AMD.
      type: str
      sample: '90'
    drm_card:
      description: The C(/sys/class/drm) entry of an AMD card.
      type: str
      sample: card1
    kfd_node:
      description: The KFD topology node of an AMD card.
      type: int
    driver:
      description: The kernel driver bound to the card.
      type: str
      sample: amdgpu
collectives_legal:
  description:
    - True when every visible card can take part in a collective; for AMD cards every hop routes
      AtomicOps and the card has C(ReqEn+). False when blocked or unknown.
  returned: always
  type: bool
blocking_bridge:
  description: The first hop (walking up from the card) that blocks AtomicOps, with C(bdf), C(card), C(pci_address), C(reason).
  returned: always
  type: dict
  sample: {bdf: '0000:06:09.0', card: ROCm1, pci_address: '0000:0b:00.0',
           reason: 'switch downstream port, AtomicOpsCap Routing-: cannot forward AtomicOps toward the CPU'}
hip_visible_devices:
  description: Value for C(HIP_VISIBLE_DEVICES), integrated GPUs left out; empty without AMD cards.
  returned: always
  type: str
  sample: '0,1'
cuda_visible_devices:
  description: Value for C(CUDA_VISIBLE_DEVICES) (nvidia-smi indexes); empty without NVIDIA cards.
  returned: always
  type: str
cuda_architectures:
  description: C(CMAKE_CUDA_ARCHITECTURES) for the NVIDIA cards, from compute_cap.
  returned: always
  type: str
  sample: '90'
amdgpu_targets:
  description: C(AMDGPU_TARGETS) for the visible AMD cards.
  returned: always
  type: str
  sample: gfx1201
topology:
  description: Text a person reads - per card the PCIe path, narrowest link and AtomicOps, then what C(collectives_legal) means.
  returned: always
  type: str
facts_warnings:
  description: What could not be read and what to do about it (also shown as task warnings).
  returned: always
  type: list
  elements: str
sources:
  description: Where the facts came from (C(sysfs_root), C(lspci), C(nvidia_smi), C(rocm_smi), C(facts_file)).
  returned: always
  type: dict
gguf_files:
  description:
    - With O(gguf_paths), each name mapped to C(path), C(exists) and either the file's header facts (the keys
      M(dankfleet.llm.gguf_info) returns) or C(error) - what M(dankfleet.llm.gguf_info) returns as C(files).
  returned: when O(gguf_paths) is given
  type: dict
  sample: {"target": {"path": "/var/lib/dankfleet/models/m/m.gguf", "exists": false}}
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_files
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import read_text
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gpu_facts import (
    GpuFactsError, LSPCI_ARGS, NVIDIA_SMI_ARGS, ROCM_SMI_ARGS, collect, load_facts)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import ShapeError, printable


def _read_file(module, option):
    """A tool's saved output: a regular UTF-8 file (never a FIFO or a device), at most 16 MiB."""
    path = module.params[option]
    try:
        return read_text(path, 'saved %s' % option.replace('_output_file', ' output'))
    except (IOError, OSError) as exc:
        module.fail_json(msg=printable('%s %s: cannot read (%s)' % (option, path, getattr(exc, 'cause', None) or exc)))


def _run_tool(module, name, args, warnings, required_for):
    """Tool stdout, or None with a warning saying what is missing and why it matters."""
    binary = module.get_bin_path(name)
    command = '%s %s' % (name, ' '.join(args))
    if binary is None:
        if required_for:
            warnings.append('%s not found; %s' % (name, required_for))
        return None, command
    rc, out, err = module.run_command([binary] + args, environ_update={'LC_ALL': 'C'})
    if rc != 0:
        # A stale nvidia-smi on a host whose NVIDIA card left (dankserver after the RTX 3090)
        # fails here; that must not stop facts of the AMD cards.
        detail = (err or out or '').strip().splitlines()
        warnings.append('%s exited %d (%s); its facts are missing'
                        % (command, rc, printable(detail[0], limit=300) if detail else 'no output'))
        return None, command
    return out, command


ARGUMENT_SPEC = dict(
    sysfs_root=dict(type='path'),
    facts_file=dict(type='path'),
    lspci_output_file=dict(type='path'),
    nvidia_smi_output_file=dict(type='path'),
    rocm_smi_output_file=dict(type='path'),
    include_integrated=dict(type='bool', default=False),
    gguf_paths=dict(type='dict'),
)
MUTUALLY_EXCLUSIVE = [
    ('facts_file', 'sysfs_root'), ('facts_file', 'lspci_output_file'),
    ('facts_file', 'nvidia_smi_output_file'), ('facts_file', 'rocm_smi_output_file'),
]


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE,
                           supports_check_mode=True)
    params = module.params
    try:
        payload = {} if params['gguf_paths'] is None else {'gguf_files': gguf_files(params['gguf_paths'])}
        if params['facts_file']:
            result = load_facts(params['facts_file'], params['include_integrated'])
            module.exit_json(changed=False, **dict(result, **payload))  # recorded warnings stay in facts_warnings
        root = params['sysfs_root'] or '/'
        live = os.path.realpath(root) == '/'
        warnings = []
        texts = {}
        for key, option, tool, args, why in (
                # a missing lspci matters only for AMD cards; collect() says so when it does
                ('lspci', 'lspci_output_file', 'lspci', LSPCI_ARGS, None),
                ('nvidia_smi', 'nvidia_smi_output_file', 'nvidia-smi', NVIDIA_SMI_ARGS, None),
                ('rocm_smi', 'rocm_smi_output_file', 'rocm-smi', ROCM_SMI_ARGS, None)):
            if params[option]:
                texts[key] = (_read_file(module, option), params[option])
            elif live:
                text, command = _run_tool(module, tool, args, warnings, why)
                texts[key] = (text, command)
            else:
                texts[key] = (None, None)
        result = collect(
            root=root,
            lspci_text=texts['lspci'][0], lspci_source=texts['lspci'][1] or 'lspci',
            nvidia_smi_text=texts['nvidia_smi'][0], nvidia_smi_source=texts['nvidia_smi'][1] or 'nvidia-smi',
            rocm_smi_text=texts['rocm_smi'][0], rocm_smi_source=texts['rocm_smi'][1] or 'rocm-smi',
            include_integrated=params['include_integrated'], warnings=warnings)
    except (GpuFactsError, ShapeError) as exc:   # a value of the wrong shape from a file or a tool, by name
        module.fail_json(msg=printable(str(exc)))
    for warning in result['facts_warnings']:
        module.warn(printable(warning))
    module.exit_json(changed=False, **dict(result, **payload))


if __name__ == '__main__':
    main()
