#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: spec_bench
short_description: Measure the live llama-server on identical temperature-0 prompts in three shapes
version_added: 0.1.0
description:
  - Waits for C(/health), sends one warm-up token, then for each shape sends the same generated prompt to
    C(/completion) at temperature 0 (C(ignore_eos), no prompt cache) and records decode tok/s, the
    speculative figures from the answer's C(timings) (C(draft_n), C(draft_n_accepted)) and from
    C(/metrics) deltas, the greedy token ids and text, and VRAM per card where a tool can read it.
  - The shapes are C(prose) (an essay to continue), C(echo) (a document to copy verbatim; the share of
    the output copied from the prompt is measured as C(copy_ratio)) and C(structured) (JSON records with
    unique ids, a negative control for self-repetition). The prompts depend only on the sizes and
    O(seed), so every configuration of an A/B gets the same bytes.
  - One call measures whatever configuration is live. The A/B across configurations - reconfigure,
    restart, gate, measure, compare greedy text, restore - is the C(dankfleet.llm.llm_bench) role's
    C(spec) entry point (playbook C(dankfleet.llm.bench_spec)); the comparison is
    M(dankfleet.llm.bench_report).
  - Stdlib only; run it on the host that serves (the endpoint usually binds loopback).
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.endpoint
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  shapes:
    description: Shapes to run, in order.
    type: list
    elements: str
    choices: [prose, echo, structured]
    default: [prose, echo, structured]
  sizes:
    description:
      - Prompt and output sizes. C(prose_words), C(echo_words) (words of filler text),
        C(structured_records) (JSON lines) and C(prose_n_predict), C(echo_n_predict),
        C(structured_n_predict) (tokens to generate). Missing keys take the runbook's shapes
        (700/512, 1000/400, 25/400 - about the 1k/512, 1.5k/400 and structured/400 it measured).
    type: dict
    default: {}
  seed:
    description: Seed of the prompt text generator (not a sampler seed; decoding is greedy).
    type: int
    default: 20260916
  repeats:
    description: Requests per shape; decode tok/s is their median and their greedy text must agree.
    type: int
    default: 1
  copy_span:
    description: Minimum run of tokens, shared with the prompt, that counts as copied for C(copy_ratio).
    type: int
    default: 8
  request:
    description:
      - Extra C(/completion) fields merged over the harness's own (temperature 0 and the rest).
      - For negative controls only - a configuration that sets C(temperature) here is meant to change
        the greedy text and make the comparison fail.
    type: dict
    default: {}
  health_timeout:
    description: Seconds to wait for C(/health) 200 before measuring.
    type: int
    default: 300
  timeout:
    description: Seconds one request may take.
    type: int
    default: 900
attributes:
  check_mode:
    support: full
    details:
      - Nothing is sent; the module reports the shapes it would run.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
  platform:
    platforms: posix
notes:
  - Greedy decoding is deterministic per configuration; speculative decoding verifies every drafted
    token, so the token ids must not change between configurations. The comparison is done by
    M(dankfleet.llm.bench_report) over all configurations' results.
  - Without C(--metrics) on the server the C(metric_*) figures are null; the C(timings) figures remain.
'''

EXAMPLES = r'''
- name: Measure the live configuration
  dankfleet.llm.spec_bench:
    url: http://127.0.0.1:7770
    sizes:
      prose_words: 700
      prose_n_predict: 512
  register: __bench

- name: Decode tok/s on prose
  ansible.builtin.debug:
    msg: "{{ __bench.shapes.prose.decode_tps }} tok/s, acceptance {{ __bench.shapes.prose.acceptance }}"
'''

RETURN = r'''
build:
  description: The llama.cpp build the endpoint reports in C(/props) C(build_info).
  returned: success
  type: str
  sample: b11434-unknown
shapes:
  description:
    - Per shape - C(decode_tps), C(prompt_tps), C(prompt_n), C(predicted_n), C(draft_tokens), C(accepted),
      C(acceptance) (from C(timings)), C(metric_drafts), C(metric_draft_tokens), C(metric_accepted)
      (C(/metrics) deltas), C(copy_ratio), C(repeats), C(repeats_identical), C(tokens) (greedy token ids),
      C(text) and C(digest) (short sha256 of the token ids).
  returned: success
  type: dict
vram_mib:
  description: Used VRAM per card (C(ROCm0), C(CUDA0), ...) after the run; null where nothing can read it.
  returned: success
  type: dict
vram_source:
  description: What read the VRAM (C(nvidia-smi), C(amdgpu sysfs), C(rocm-smi)) or null.
  returned: success
  type: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import ENDPOINT_ARGUMENT_SPEC, BenchError, Endpoint
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_spec import SHAPES, build_prompts, run_configuration

DEFAULT_SIZES = {'prose_words': 700, 'prose_n_predict': 512, 'echo_words': 1000, 'echo_n_predict': 400,
                 'structured_records': 25, 'structured_n_predict': 400}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ENDPOINT_ARGUMENT_SPEC,
            shapes=dict(type='list', elements='str', choices=list(SHAPES), default=list(SHAPES)),
            sizes=dict(type='dict', default={}),
            seed=dict(type='int', default=20260916),
            repeats=dict(type='int', default=1),
            copy_span=dict(type='int', default=8),
            request=dict(type='dict', default={}),
            health_timeout=dict(type='int', default=300),
            timeout=dict(type='int', default=900),
        ),
        supports_check_mode=True,
    )
    params = module.params
    sizes = dict(DEFAULT_SIZES)
    unknown = sorted(set(params['sizes']) - set(DEFAULT_SIZES))
    if unknown:
        module.fail_json(msg='sizes: unknown key(s) %s; the keys are %s' % (', '.join(unknown), ', '.join(sorted(DEFAULT_SIZES))))
    for key, value in params['sizes'].items():
        try:
            sizes[key] = int(value)
        except (TypeError, ValueError):
            module.fail_json(msg='sizes.%s must be a whole number, got %r' % (key, value))
        if sizes[key] < 1:
            module.fail_json(msg='sizes.%s must be at least 1, got %r' % (key, value))
    if params['repeats'] < 1:
        module.fail_json(msg='repeats must be at least 1, got %d' % params['repeats'])
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, msg='check mode: would run shapes %s against %s'
                         % (', '.join(params['shapes']), params['url']))
    endpoint = Endpoint(params['url'], params['api_key'], timeout=params['timeout'])
    try:
        endpoint.wait_healthy(params['health_timeout'])
        prompts = build_prompts(sizes, params['seed'], params['shapes'])
        result = run_configuration(endpoint, prompts, repeats=params['repeats'], copy_span=params['copy_span'],
                                   request_overrides=params['request'], timeout=params['timeout'])
    except BenchError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, sizes=sizes, **result)


if __name__ == '__main__':
    main()
