#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: turn_latency_bench
short_description: Agent-loop turn latency - N concurrent families re-sending a growing document over M turns
version_added: 0.1.0
description:
  - Starts O(families) agent loops at once against C(/v1/chat/completions). A family's first turn sends a long
    document; each later turn re-sends the whole conversation (document, the model's answers, a new chunk of
    O(growth_words) words of "tool output"), the way an agent loop does.
  - Records per turn the wall latency, the prompt tokens the server served from its cache (C(timings.cache_n))
    and the ones it had to prefill (C(timings.prompt_n)). With one slot a second family waits for the first
    family's prefill; with a slot each and a working prefix cache, turn 2 onward prefills only the new chunk.
  - Stdlib only; run it on the host that serves.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.endpoint
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  model:
    description: C(model) field of the requests (the endpoint's alias); empty leaves it out.
    type: str
    default: ''
  families:
    description: Concurrent agent loops.
    type: int
    default: 2
  turns:
    description: Turns per family.
    type: int
    default: 2
  document_words:
    description: Words of the first turn's document (about 1.5 tokens a word on the runbook's model).
    type: int
    default: 20000
  growth_words:
    description: Words of new tool output each later turn appends.
    type: int
    default: 1000
  n_predict:
    description: Tokens each turn generates (C(max_tokens), C(ignore_eos) so every turn costs the same decode).
    type: int
    default: 64
  shared_document:
    description: All families send the same document (they then share a cached prefix across slots).
    type: bool
    default: false
  seed:
    description: Seed of the document text generator.
    type: int
    default: 20260916
  timeout:
    description: Seconds one turn may take.
    type: int
    default: 1800
attributes:
  check_mode:
    support: full
    details:
      - Nothing is sent.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
  platform:
    platforms: posix
'''

EXAMPLES = r'''
- name: The runbook's 2 families x 2 turns over a ~30k-token document
  dankfleet.llm.turn_latency_bench:
    url: http://127.0.0.1:7770
    model: llm
    families: 2
    turns: 2
    document_words: 20000
  register: __turns
'''

RETURN = r'''
rows:
  description:
    - One per (family, turn) - C(family), C(turn), C(status), C(latency_ms), C(prompt_n), C(cache_n), C(cache_ratio),
      C(predicted_n), C(prompt_ms), C(predicted_ms), C(prompt_tokens), C(started_s) (since the start), C(error).
  returned: success
  type: list
  elements: dict
per_turn:
  description: Per turn index - median and max latency, summed C(cache_n) and C(prompt_n) over the families.
  returned: success
  type: list
  elements: dict
build:
  description: The llama.cpp build the endpoint reports in C(/props).
  returned: success
  type: str
slots:
  description: C(total_slots) from C(/props) - how many families can be served at once.
  returned: success
  type: int
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import ENDPOINT_ARGUMENT_SPEC, BENCH_PROPS, BenchError, Endpoint
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_turns import run_turns, summarize_turns


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ENDPOINT_ARGUMENT_SPEC,
            model=dict(type='str', default=''),
            families=dict(type='int', default=2),
            turns=dict(type='int', default=2),
            document_words=dict(type='int', default=20000),
            growth_words=dict(type='int', default=1000),
            n_predict=dict(type='int', default=64),
            shared_document=dict(type='bool', default=False),
            seed=dict(type='int', default=20260916),
            timeout=dict(type='int', default=1800),
        ),
        supports_check_mode=True,
    )
    params = module.params
    for key in ('families', 'turns', 'document_words', 'n_predict'):
        if params[key] < 1:
            module.fail_json(msg='%s must be at least 1, got %d' % (key, params[key]))
    if params['growth_words'] < 0:
        module.fail_json(msg='growth_words must not be negative, got %d' % params['growth_words'])
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, rows=[], per_turn=[],
                         msg='check mode: would run %d families x %d turns against %s'
                         % (params['families'], params['turns'], params['url']))
    endpoint = Endpoint(params['url'], params['api_key'], timeout=params['timeout'])
    try:
        endpoint.wait_healthy(300)
        props = endpoint.get_json('/props', timeout=30, shape=BENCH_PROPS)
        rows = run_turns(endpoint, dict(params))
    except BenchError as exc:
        module.fail_json(msg=str(exc))
    failed = [r for r in rows if r['status'] != 'ok']
    if failed:
        module.warn('%d turn(s) failed: %s' % (len(failed), '; '.join('family %d turn %d: %s' % (
            r['family'], r['turn'], r['error']) for r in failed)))
    module.exit_json(changed=False, rows=rows, per_turn=summarize_turns(rows), build=props.get('build_info'),
                     slots=props.get('total_slots'))


if __name__ == '__main__':
    main()
