#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: llama_bench_sweep
short_description: Sweep batch x ubatch (x depth) with llama-bench, one transient systemd unit per cell
version_added: 0.1.0
description:
  - Runs C(llama-bench) once per (batch, ubatch, depth) cell, each as its own transient unit
    (C(systemd-run --wait --collect --pipe)) with the service's C(LimitMEMLOCK) and C(User), so a cell that
    cannot allocate (llama-bench calls C(exit(1))) costs one row, not the sweep, and the memlock limit is the
    unit's, not the shell's (an SSH shell gets 8 MiB).
  - Devices and tensor split are given in the service's comma form (C(ROCm0,ROCm1), C(36,29)) and written
    with llama-bench's own separator (C(-dev ROCm0/ROCm1), C(-ts 36/29)); llama-bench reads a comma as a
    sweep, so the comma form would bench each card on its own. Every row records the device list
    llama-bench reports, which is the proof.
  - Records per cell the prefill (C(pp)) and decode (C(tg)) rates, the peak RSS of the bench process, the
    peak VRAM per card (sampled with nvidia-smi, the amdgpu sysfs counters or rocm-smi while the cell
    runs; null where none exists) and the memlock limit the cell really ran with.
  - There is no C(-c) in llama-bench; a test's context is n_prompt + n_gen + depth, and only O(depths) puts
    KV in front of the measurement. No drafter takes part, so the decode rate is the drafterless baseline.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  llama_bench:
    description: Path of C(llama-bench) on the host.
    type: path
    required: true
  model:
    description: GGUF to bench.
    type: path
    required: true
  batch_sizes:
    description: Values of C(-b).
    type: list
    elements: int
    required: true
  ubatch_sizes:
    description: Values of C(-ub); a ubatch larger than the batch is skipped.
    type: list
    elements: int
    required: true
  depths:
    description: Values of C(-d) (KV positions filled before each test).
    type: list
    elements: int
    default: [0]
  n_prompt:
    description: C(-p), the prefill test's prompt length.
    type: int
    default: 4096
  n_gen:
    description: C(-n), the decode test's length.
    type: int
    default: 128
  repetitions:
    description: C(-r).
    type: int
    default: 3
  devices:
    description: The service's device list, comma form or list (C(ROCm0,ROCm1)); empty lets llama-bench choose.
    type: raw
  tensor_split:
    description: The service's tensor split, comma form or list (C(36,29)); empty for none.
    type: raw
  rpc:
    description: RPC servers (C(host:port)) to register before the devices are resolved (their devices are C(RPC0), C(RPC1), ...).
    type: list
    elements: str
    default: []
  split_mode:
    description: C(-sm).
    type: str
    choices: [none, layer, row, tensor]
    default: layer
  n_gpu_layers:
    description: C(-ngl).
    type: int
    default: 999
  flash_attn:
    description: C(-fa).
    type: str
    choices: ['on', 'off', auto]
    default: 'on'
  cache_type_k:
    description: C(-ctk).
    type: str
    default: f16
  cache_type_v:
    description: C(-ctv).
    type: str
    default: f16
  threads:
    description: C(-t); 0 keeps llama-bench's default.
    type: int
    default: 0
  extra_args:
    description: More llama-bench arguments, appended as given (use llama-bench's own separators).
    type: list
    elements: str
    default: []
  transient_unit:
    description: Run each cell as a transient systemd unit. False runs it from the module's own process (a host without systemd).
    type: bool
    default: true
  user:
    description: C(User=) of the transient unit - the service user, who can open the GPU devices.
    type: str
    default: root
  limit_memlock:
    description: C(LimitMEMLOCK=) of the transient unit, as the service sets it.
    type: str
    default: infinity
  environment:
    description: Environment of the cells (for example C(HIP_VISIBLE_DEVICES=0,1) to hide an iGPU, as the unit does).
    type: dict
    default: {}
  unit_prefix:
    description: Prefix of the transient units' names (C(<prefix>-b2048-ub512-d0-<random>)).
    type: str
    default: llm-bench
  cell_timeout:
    description: Seconds one cell may run (C(RuntimeMaxSec) of its unit).
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    details:
      - No cell runs; the module returns the command of every cell. A sweep leaves nothing behind either way.
  diff_mode:
    support: N/A
    details:
      - The transient units end with their cell; nothing is left to diff.
  platform:
    platforms: linux
notes:
  - A failed cell is a row with C(status=failed) and the tail of llama-bench's stderr; the module itself fails
    only when nothing can run at all (missing binary or model, no systemd for O(transient_unit)).
  - Output is read as JSON Lines (C(-o jsonl)) so the tests a cell finished before dying are kept.
'''

EXAMPLES = r'''
- name: The runbook's sweep on both cards (service form in, llama-bench form out)
  dankfleet.llm.llama_bench_sweep:
    llama_bench: /opt/llama.cpp/current/bin/llama-bench
    model: /srv/models/model.gguf
    batch_sizes: [2048, 4096, 6144]
    ubatch_sizes: [256, 512, 1024, 1536]
    depths: [0, 32768]
    devices: ROCm0,ROCm1
    tensor_split: 36,29
    user: llm
    environment:
      HIP_VISIBLE_DEVICES: "0,1"
  become: true
  register: __sweep
'''

RETURN = r'''
rows:
  description:
    - One per cell - C(batch), C(ubatch), C(depth), C(status) (C(ok), C(partial), C(failed)), C(pp_tps), C(tg_tps),
      C(pp_stddev), C(tg_stddev), C(peak_rss_mib), C(peak_vram_mib) (per card), C(memlock), C(devices) and
      C(tensor_split) (as llama-bench reports them), C(n_tests), C(build), C(backends), C(rc), C(wall_s),
      C(error), C(command).
  returned: always
  type: list
  elements: dict
commands:
  description: The llama-bench command line of every cell (in check mode, what would run).
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_batch import (
    cell_argv, cells, memlock_warnings, run_cell, validate)


def _last_line(text):
    lines = (text or '').strip().splitlines()
    return lines[-1] if lines else ''


def main():
    module = AnsibleModule(
        argument_spec=dict(
            llama_bench=dict(type='path', required=True),
            model=dict(type='path', required=True),
            batch_sizes=dict(type='list', elements='int', required=True),
            ubatch_sizes=dict(type='list', elements='int', required=True),
            depths=dict(type='list', elements='int', default=[0]),
            n_prompt=dict(type='int', default=4096),
            n_gen=dict(type='int', default=128),
            repetitions=dict(type='int', default=3),
            devices=dict(type='raw'),
            tensor_split=dict(type='raw'),
            rpc=dict(type='list', elements='str', default=[]),
            split_mode=dict(type='str', choices=['none', 'layer', 'row', 'tensor'], default='layer'),
            n_gpu_layers=dict(type='int', default=999),
            flash_attn=dict(type='str', choices=['on', 'off', 'auto'], default='on'),
            cache_type_k=dict(type='str', default='f16'),
            cache_type_v=dict(type='str', default='f16'),
            threads=dict(type='int', default=0),
            extra_args=dict(type='list', elements='str', default=[]),
            transient_unit=dict(type='bool', default=True),
            user=dict(type='str', default='root'),
            limit_memlock=dict(type='str', default='infinity'),
            environment=dict(type='dict', default={}),
            unit_prefix=dict(type='str', default='llm-bench'),
            cell_timeout=dict(type='int', default=3600),
        ),
        supports_check_mode=True,
    )
    config = dict(module.params)
    config['environment'] = dict((k, str(v)) for k, v in (config['environment'] or {}).items())
    plan = cells(config['batch_sizes'], config['ubatch_sizes'], config['depths'])
    try:
        commands = [' '.join(cell_argv(config, b, ub, d)) for b, ub, d in plan]
        if module.check_mode:
            module.exit_json(changed=False, skipped=True, rows=[], commands=commands,
                             msg='check mode: would run %d cells' % len(plan))
        validate(config)
        rows = [run_cell(config, b, ub, d) for b, ub, d in plan]
    except BenchError as exc:
        module.fail_json(msg=str(exc), rows=[], commands=[])
    for warning in memlock_warnings(rows, config['limit_memlock'] if config['transient_unit'] else None):
        module.warn(warning)
    failed = [r for r in rows if r['status'] != 'ok']
    if failed:
        module.warn('%d of %d cells did not complete: %s' % (
            len(failed), len(rows), '; '.join('b%d/ub%d/d%d: %s' % (r['batch'], r['ubatch'], r['depth'], _last_line(r['error']))
                                              for r in failed)))
    module.exit_json(changed=False, rows=rows, commands=commands)


if __name__ == '__main__':
    main()
