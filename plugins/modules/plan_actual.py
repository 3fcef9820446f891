#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: plan_actual
short_description: Measure what a gated llama-server holds per device and record it against its fit_plan
version_added: 0.1.0
description:
  - Run after a passing gate (after its real request). Reads what the endpoint really holds on every device of the
    plan and records it beside the plan, so the planner learns from every deploy.
  - Per device, in the plan's device names - C(ROCm<i>) the card's C(mem_info_vram_used) (what rocm-smi reports, the
    figure the hip profile was fitted to), with the KFD per-process figures
    (C(/sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>)) of the endpoint's processes beside it where readable;
    C(CUDA<i>) the llama-server process's C(nvidia-smi --query-compute-apps) used_memory on that GPU (uuid mapped to
    the device); C(RPC<i>) the local worker of O(workers) - its GPU figures where it holds any, else its RSS;
    C(CPU) (the cpu backend's single device) the llama-server process's RSS, the plan's host buffers folded in;
    C(host) the llama-server process's RSS beside GPU/RPC devices (recorded, never bounded).
  - Compares each device total with the planner's own bound for the backend (RV(bound)) - C(under) when the actual
    exceeds the plan beyond it, C(over) when the plan exceeds the actual beyond it - and returns the table.
  - Appends one record to C(<state_dir>/plan-vs-actual.json) (time, release, model sha256, serve shape, per device the
    planned weights/kv/recurrent/compute/draft/mmproj/output/overhead/total and the measured total) and, with
    O(textfile_dir), writes a node-exporter textfile with C(llm_plan_device_bytes{device,kind}),
    C(llm_actual_device_bytes{device}) and C(llm_plan_device_bound_bytes{device}); with O(service) every series
    also carries C(unit="<service>"), so the rules of one endpoint never read another's devices.
  - Never fails on a miss - a miss is RV(misses) and a warning. It fails only on bad input (the message names the
    fix) before anything is written.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  plan:
    description:
      - The C(dankfleet.llm.fit_plan) result the deploy was made from (its C(devices) and C(host)). V({}) = no plan -
        the record then holds the measured figures only (devices from the env file's C(DEVICES)).
      - A byte count in it that is not a finite integer (C(NaN), an infinity, text, a fraction) fails naming it
        (C(plan.devices[0].weights_bytes)); so does a C(NaN) in the records file.
    type: dict
    default: {}
  backend:
    description: The planner profile / llama-server backend; picks the readers and the bound.
    type: str
    choices: [hip, cuda, cpu]
    required: true
  pid:
    description: The llama-server process. One of O(pid) and O(service) is required.
    type: int
  service:
    description: The systemd unit whose MainPID is the llama-server process (read with C(systemctl show)).
    type: str
  workers:
    description: RPC workers on this host, each the plan's device name and the worker's pid.
    type: list
    elements: dict
    default: []
    suboptions:
      device:
        description: The plan's device name (C(RPC0)).
        type: str
        required: true
      pid:
        description: The ggml-rpc-server process.
        type: int
        required: true
  env_file:
    description:
      - The live env file of the service; the release (C(LLAMA_RELEASE)), model (C(MODEL_PATH)) and serve shape
        (context, slots, batches, cache types, split, spec) are read from it. The API key is never recorded.
    type: path
    required: true
  state_dir:
    description: Where C(plan-vs-actual.json) lives (the role's state directory).
    type: path
    required: true
  textfile_dir:
    description: The node-exporter textfile collector directory; empty = no textfile.
    type: path
    default: ''
  textfile_dir_optional:
    description: true = a O(textfile_dir) that does not exist is a warning and no textfile (a host without
      node-exporter); false = it is an error.
    type: bool
    default: false
  textfile_name:
    description: File name of the textfile in O(textfile_dir); one plain name (no C(/), not C(..)), or it is refused.
    type: str
    default: llm_plan_actual.prom
  gpus:
    description: C(dankfleet.llm.gpu_info)' C(gpus) (name to PCI address); optional, else the KFD/nvidia-smi order.
    type: list
    elements: dict
    default: []
  visible_devices:
    description: C(HIP_VISIBLE_DEVICES) / C(CUDA_VISIBLE_DEVICES) of the service, used when O(gpus) is empty.
    type: str
    default: ''
  model_sha256:
    description: The model's sha256 when known; empty = gguf_fetch's stamp (C(<model>.verified.json)) when it still
      matches the file and a verification as root wrote it (root-owned, one link, its ctime matching where another
      user can write the model), else the file is hashed. A stamp someone else could have written is not repeated -
      the record's C(model_sha256) is then null and C(model_sha256_source) says C(unverified) and why.
    type: str
    default: ''
  record:
    description: false = measure and report only, write nothing.
    type: bool
    default: true
  verify:
    description:
      - The verify stage's results of this deploy (C(dankfleet.llm.endpoint_verify) - passed, checks, contract), kept in
        the record as its C(verify) key; V({}) for none.
    type: dict
    default: {}
  sysfs_root:
    description: The directory holding C(sys/) and C(proc/) (C(/) on a live host; a recorded tree in tests).
    type: path
    default: /
  nvidia_smi_output_file:
    description: Recorded C(nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits)
      output to read instead of running nvidia-smi (cuda).
    type: path
  nvidia_smi_gpus_file:
    description: Recorded C(nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader,nounits) output.
    type: path
attributes:
  check_mode:
    support: full
    details:
      - Measures and reports; writes neither the record nor the textfile, and reports C(changed=true) when a real
        run would append the record (O(record=true)).
  diff_mode:
    support: none
  platform:
    platforms: linux
notes:
  - The bound is the planner's own - cpu and cuda C(max(1 % of the measured total, 64 MiB)) (benchmarks/fit_accuracy.py),
    hip 0.8 GiB against the card's used VRAM (tests/unit/plugins/module_utils/test_fit_plan_runbook.py).
  - C(benchmarks/fit_accuracy.py --records DIR) folds records collected from hosts into its accuracy report.
'''

EXAMPLES = r'''
- name: Record plan vs actual after the gate
  dankfleet.llm.plan_actual:
    plan: "{{ llm_plan.fit }}"
    backend: hip
    service: llama-server.service
    env_file: /etc/llama-server/llama-server.env
    state_dir: /var/lib/llama-server
    textfile_dir: /var/lib/prometheus/node-exporter
  become: true
  register: __pva

- name: A CPU planner split over a local ggml-rpc-server
  dankfleet.llm.plan_actual:
    plan: "{{ __plan }}"
    backend: cpu
    pid: "{{ __server_pid }}"
    workers: [{device: RPC0, pid: "{{ __rpc_pid }}"}]
    env_file: /etc/llama-server/llama-server.env
    state_dir: /var/lib/llama-server
'''

RETURN = r'''
pid:
  description: The llama-server process measured.
  returned: always
  type: int
devices:
  description: One row per device (the plan's, then C(host)).
  returned: always
  type: list
  elements: dict
  contains:
    device:
      description: The plan's device name, or C(host).
      type: str
      sample: ROCm0
    planned:
      description: The plan's bytes per kind (weights, kv, recurrent, compute, draft, mmproj, output, overhead, total);
        null without a plan.
      type: dict
    actual_bytes:
      description: The measured total; null when it could not be read (see C(source)).
      type: int
    error_bytes:
      description: actual - planned total.
      type: int
    bound_bytes:
      description: The planner's bound at this size; null where not bounded (C(host)).
      type: int
    verdict:
      description: ok, under (actual beyond plan + bound), over, unplanned, unmeasured or reported (C(host)).
      type: str
    source:
      description: Where the actual figure came from.
      type: str
      sample: /sys/bus/pci/devices/0000:03:00.0/mem_info_vram_used
    pid:
      description: The process measured for a process-backed device (C(CPU), C(host), an C(RPC) worker).
      type: int
    rss_anon_bytes:
      description: The anonymous part of that process's RSS (C(RssAnon)).
      type: int
    rss_file_bytes:
      description: The file-backed part of that process's RSS (C(RssFile)).
      type: int
misses:
  description: Devices outside the bound (verdict under or over).
  returned: always
  type: list
  elements: str
underestimated:
  description: Devices whose actual exceeds the plan beyond the bound (what C(LlmPlanUnderestimated) alerts on).
  returned: always
  type: list
  elements: str
table:
  description: The plan-vs-actual table in MiB, one line per device.
  returned: always
  type: str
bound:
  description: The bound applied (rel, abs bytes, source).
  returned: always
  type: dict
record:
  description: The record appended (or that would be appended in check mode).
  returned: always
  type: dict
records_path:
  description: The plan-vs-actual.json path.
  returned: always
  type: str
  sample: /var/lib/llama-server/plan-vs-actual.json
records:
  description: How many records the file holds now (null in check mode or with O(record=false)).
  returned: always
  type: int
textfile:
  description: The textfile written (null without O(textfile_dir)).
  returned: always
  type: str
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual as pa
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import ShapeError, printable

ARGUMENT_SPEC = dict(
    plan=dict(type='dict', default={}),
    backend=dict(type='str', required=True, choices=['hip', 'cuda', 'cpu']),
    pid=dict(type='int'),
    service=dict(type='str'),
    workers=dict(type='list', elements='dict', default=[],
                 options=dict(device=dict(type='str', required=True), pid=dict(type='int', required=True))),
    env_file=dict(type='path', required=True),
    state_dir=dict(type='path', required=True),
    textfile_dir=dict(type='path', default=''),
    textfile_dir_optional=dict(type='bool', default=False),
    textfile_name=dict(type='str', default=pa.TEXTFILE_NAME),
    gpus=dict(type='list', elements='dict', default=[]),
    visible_devices=dict(type='str', default=''),
    model_sha256=dict(type='str', default='', no_log=False),
    record=dict(type='bool', default=True),
    verify=dict(type='dict', default={}),
    sysfs_root=dict(type='path', default='/'),
    nvidia_smi_output_file=dict(type='path'),
    nvidia_smi_gpus_file=dict(type='path'),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True,
                           required_one_of=[('pid', 'service')], mutually_exclusive=[('pid', 'service')])
    try:
        result, warnings = pa.run(module.params, module.run_command, module.get_bin_path,
                                  check_mode=module.check_mode)
    except pa.PlanActualError as exc:
        module.fail_json(msg=printable(str(exc), lines=True), changed=exc.changed)
    except ShapeError as exc:     # a value of the wrong shape that no reader above named: still by name, never a trace
        module.fail_json(msg=printable(str(exc)), changed=False)
    for warning in warnings:
        module.warn(printable(warning, lines=True))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
