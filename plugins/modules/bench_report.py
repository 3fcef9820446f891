#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: bench_report
short_description: Write a benchmark's results as TSV, JSON and a PNG plot; fail a spec A/B whose greedy text moved
version_added: 0.1.0
description:
  - Takes the raw results of one harness - M(dankfleet.llm.spec_bench) per configuration, the rows of
    M(dankfleet.llm.llama_bench_sweep) or of M(dankfleet.llm.turn_latency_bench) - and writes
    C(<dest>/<name>.tsv), C(<name>.json) (with O(meta) - the configurations, the host, the llama.cpp build) and
    C(<name>.png).
  - The plots - C(spec) decode tok/s per configuration per shape as grouped bars with the acceptance on each bar;
    C(batch) the batch x ubatch sweep as heatmaps of prefill, decode and peak memory, one row per depth;
    C(turns) latency per turn per family beside the cached vs prefilled prompt tokens.
  - For C(spec) it compares the greedy token ids of every configuration on every shape against the first
    configuration that ran. Any difference fails the module - after the files are written - with a message
    naming both configurations, the shape and the first differing token and character. Speculative decoding
    may never change an answer. A configuration that failed to run fails it too.
  - Runs on the controller (C(delegate_to) C(localhost)); the plot needs matplotlib in the controller's Python.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  kind:
    description: Which harness the results come from.
    type: str
    required: true
    choices: [spec, batch, turns]
  results:
    description:
      - C(spec) - one dict per configuration, C(name) plus the M(dankfleet.llm.spec_bench) result (C(shapes), C(build),
        C(vram_mib)) or C(error) when it could not be measured; C(vars) and C(request) are kept in the JSON.
      - C(batch), C(turns) - the modules' C(rows).
    type: list
    elements: dict
    required: true
  meta:
    description: Recorded in the JSON and the plot title (C(host), C(label), C(build), the sweep's parameters...).
    type: dict
    default: {}
  dest:
    description: Directory for the files; created when missing.
    type: path
    required: true
  name:
    description: File name without extension.
    type: str
    required: true
  plot:
    description: Render the PNG.
    type: bool
    default: true
attributes:
  check_mode:
    support: partial
    details:
      - No file is written; the comparison still runs and is reported, but with C(changed=false) although a real
        run writes the files.
  diff_mode:
    support: none
  platform:
    platforms: posix'''

EXAMPLES = r'''
- name: Write the A/B and fail on a greedy-text mismatch
  dankfleet.llm.bench_report:
    kind: spec
    results: "{{ __llm_bench_spec_results }}"
    meta:
      host: "{{ inventory_hostname }}"
    dest: "{{ playbook_dir }}/benchmarks/results"
    name: "{{ inventory_hostname }}-spec"
  delegate_to: localhost
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
'''

RETURN = r'''
files:
  description: Paths written, by kind of file (C(tsv), C(json), C(png)).
  returned: success
  type: dict
rows:
  description: The rows of the TSV.
  returned: always
  type: list
  elements: dict
mismatches:
  description:
    - C(spec) only - each greedy-text difference; C(shape), C(reference), C(configuration), C(token), C(char),
      C(message).
  returned: always
  type: list
  elements: dict
incomplete:
  description: Configurations, cells or turns that did not complete.
  returned: always
  type: list
  elements: dict
summary:
  description: One line of figures per row, for the play's output.
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_report import build_document, summary_lines, write_report


def main():
    module = AnsibleModule(
        argument_spec=dict(
            kind=dict(type='str', required=True, choices=['spec', 'batch', 'turns']),
            results=dict(type='list', elements='dict', required=True),
            meta=dict(type='dict', default={}),
            dest=dict(type='path', required=True),
            name=dict(type='str', required=True),
            plot=dict(type='bool', default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if '/' in p['name'] or not p['name'].strip():
        module.fail_json(msg='name must be a plain file name without "/", got %r' % p['name'])
    try:
        if module.check_mode:
            rows, _, _, findings = build_document(p['kind'], p['results'], p['meta'])
            files = {}
        else:
            report = write_report(p['kind'], p['results'], p['meta'], p['dest'], p['name'], p['plot'])
            rows, findings, files = report['rows'], report['findings'], report['files']
    except BenchError as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=bool(files), files=files, rows=rows, mismatches=findings['mismatches'],
                  incomplete=findings['failed'], summary=summary_lines(p['kind'], rows))
    if p['kind'] == 'spec' and (findings['mismatches'] or findings['failed']):
        lines = []
        if findings['mismatches']:
            lines.append('GREEDY TEXT MISMATCH - speculation changed the answer:')
            lines.extend('  ' + m['message'] for m in findings['mismatches'])
        if findings['failed']:
            lines.append('configuration(s) that could not be measured:')
            lines.extend('  %s: %s' % (f['name'], f['error']) for f in findings['failed'])
        if files:
            lines.append('results: %s' % ', '.join(files[k] for k in sorted(files)))
        module.fail_json(msg='\n'.join(lines), **dict((k, v) for k, v in result.items() if k != 'rows'))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
