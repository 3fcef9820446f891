#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: endpoint_verify
short_description: The runbook's verification battery against a gated llama-server - vision, tools, slots, window, drafter, defaults
version_added: 0.1.0
description:
  - The verify stage of the C(dankfleet.llm.llama_server) role, run on the target after a passing gate. Like the gate, it
    reads what the shape configures from the live env file O(env_file) (URL, API key, alias, C(PARALLEL), C(CTX_SIZE),
    C(VISION), C(SPEC_TYPE), C(EXTRA_ARGS)) and talks to the endpoint over the collection's client
    (C(module_utils/base/endpoint_client.py)).
  - "The checks, each named and skipped with the reason when the shape does not configure its feature:
    C(stream) - an SSE answer yields chunks and C(data: [DONE]);
    C(tools) - one tool definition, 200 and a well-formed message (tool calls naming the tool with JSON-object
    arguments, or a content string) from the server's tool-call parser (skipped with C(--no-jinja));
    C(reasoning_effort) - one request per effort in O(reasoning_efforts), the map effort -> HTTP status returned in
    RV(contract);
    C(vision) (C(VISION=on)) - a 64x32 PNG drawn by the module (bars, a disc, a triangle) as an C(image_url) data URI:
    200, content, and more prompt tokens than the same text without the image; then one square image of the most
    tokens C(IMAGE_MAX_TOKENS) admits (the projector type's own limit when 0, read off C(MMPROJ_PATH): 2048x2048 for
    a Qwen-VL projector; capped to one slot's context), so the peak the plan booked on the projector's device is
    reached under the gate - 200 and more prompt tokens than the small one; its figures carry C(image_px),
    C(image_tokens) (counted by the server) and C(image_tokens_planned);
    C(slots) - C(PARALLEL) concurrent echo requests, one pinned to each slot with C(id_slot); with a C(SPEC_TYPE) every
    slot's own C(timings.draft_n) must be above 0 (b11434's C(/slots) has no per-slot draft counter, C(/metrics) only
    global ones);
    C(prefix_cache) - one prompt, then that conversation carried on (its answer and one more question) on slot 0,
    the second re-prefilling at most O(prefix_cache_max_reprefill) of the first's tokens (a verbatim repeat is
    always prefilled in full on a hybrid model with C(--ctx-checkpoints 0));
    C(window) - a prompt of O(window_fraction) of one slot's context (sized with C(/tokenize)) accepted and answered,
    its time in the result (O(window_deep) fills one slot to O(window_deep_tokens) instead and records its prefill
    rate); the slot's context is C(CTX_SIZE / PARALLEL), which C(/props) must confirm (its C(n_ctx)
    is read alone only without a C(CTX_SIZE), up to 2097152 tokens), and the filler never outgrows it;
    C(drafter) (a C(SPEC_TYPE)) - the journal of the unit's current start (C(_SYSTEMD_INVOCATION_ID), read with
    C(journalctl) on the target) carries b11434's C(adding speculative implementation '<type>') line for every
    C(SPEC_TYPE) entry b11434 logs at the env file's C(LOG_VERBOSITY) (C(draft-dflash) and C(draft-dspark) at the
    default 3, every other type at trace, C(LOG_VERBOSITY=4)); with a drafter that runs a model (C(draft-mtp),
    C(draft-dflash), C(draft-dspark), C(draft-simple), C(draft-eagle3)) each slot drafts (C(timings.draft_n) > 0)
    on a prompt of new word pairs whose tokens (C(/tokenize)) repeat no n-gram of C(SPEC_NGRAM_MOD_N_MATCH), with at
    most O(drafter_max_tokens) generated and, with an n-gram type in the chain, fewer than C(n_match) minus the chat
    template's tokens, so ngram-mod's lookup window always holds new text and only the model drafter can draft;
    C(defaults) - C(/props) C(default_generation_settings.params) C(temperature), C(top_p), C(top_k), C(min_p),
    C(presence_penalty) equal the env file's C(TEMPERATURE), C(TOP_P), C(TOP_K), C(MIN_P), C(PRESENCE_PENALTY)
    where it sets them (a float32 rounding apart); b11434's C(/props) carries no reasoning budget and only the
    per-request C(n_predict) default, so C(REASONING_BUDGET) is named as not compared;
    C(isolation) - on each slot O(isolation_prompt) greedy (temperature 0, seed 42), then a different
    O(isolation_words)-word conversation on the same slot, then the greedy prompt again and once more with
    C(cache_prompt) false: the three answers are identical, else the finding names the slot and the first
    differing character and token;
    C(settings) - what b11434 reports nowhere in C(/props): the journal of the unit's current start (as C(drafter)
    reads it) carries C(llama_context: flash_attn = enabled|disabled|auto) for every context (C(FLASH_ATTN)), the
    C(llama_kv_cache: size = ... K (<type>): ... V (<type>): ...) lines of the target (C(CACHE_TYPE_K),
    C(CACHE_TYPE_V)) and, after the drafter's load line, of the drafter (C(SPEC_DRAFT_TYPE_K), C(SPEC_DRAFT_TYPE_V)),
    and ngram-mod's C(- n_match=N, n_max=N, n_min=N) (C(SPEC_NGRAM_MOD_N_MATCH), C(SPEC_NGRAM_MOD_N_MAX),
    C(SPEC_NGRAM_MOD_N_MIN)); the main process's argv (C(/proc/<MainPID>/cmdline)) carries C(--reasoning-budget)
    C(REASONING_BUDGET). Only what the env file sets is compared; a difference is a finding naming the env name and
    the inventory variable. b11434 logs those journal lines at trace (C(LOG_VERBOSITY=4)): below it each is reported
    C(not logged at verbosity N), neither passed nor failed."
  - Every answer is read through the shape b11434 gives it (C(module_utils/base/llama_server_answers.py)) before a check
    uses it; one of another shape (a missing C(choices[0].message), a count that is not an integer, JSON nested too
    deep) fails that check with the request and the path inside the answer named. Server text in a finding has its
    control characters escaped.
  - C(stream), C(tools), C(vision), C(slots), C(window), C(drafter), C(defaults), C(isolation) and C(settings) failing are
    RV(findings)
    (RV(passed) false; the role rolls back
    like a failed gate). C(prefix_cache) and timing figures only warn (RV(warn_findings), also as module warnings).
    A RV(contract) that differs from O(previous_contract) is a warning naming each change (RV(contract_changes)).
  - A failing endpoint does not fail the module; it fails only on input it cannot verify from, naming the cause.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  env_file:
    description: The live env file of the service (the llama_server role's C(llama_server_env_file)).
    type: path
    required: true
  host:
    description: Host the checks call; empty is the env file's C(BIND_ADDR) (C(127.0.0.1) when bound to every address).
    type: str
    default: ''
  service:
    description: The unit's name, the C(service) label of the textfile metrics.
    type: str
    default: llama-server.service
  checks:
    description: The checks to run (the others are reported as skipped).
    type: list
    elements: str
    choices: [stream, tools, reasoning_effort, vision, slots, prefix_cache, window, drafter, defaults, isolation, settings]
    default: [stream, tools, reasoning_effort, vision, slots, prefix_cache, window, drafter, defaults, isolation, settings]
  reasoning_efforts:
    description: The efforts C(reasoning_effort) asks, one request each.
    type: list
    elements: str
    default: [low, medium, high, xhigh]
  window_fraction:
    description: The share of one slot's context (C(CTX_SIZE / PARALLEL)) the C(window) prompt fills, above 0 and at most 1.
    type: float
    default: 1.0
  window_warn_seconds:
    description: Warn when the C(window) request takes longer; V(0) never warns.
    type: int
    default: 0
  window_deep:
    description:
      - The C(window) check's deep mode, in place of O(window_fraction) - one slot (slot 0) filled to
        O(window_deep_tokens) with the prompt cache off; the prefill rate (C(timings.prompt_ms), the server's own clock)
        and its time are the check's figures. The runbook proved 140,069 tokens through one slot in 134 s (1043 tok/s).
      - Minutes on a real model, so it runs on demand (C(--tags verify -e llama_server_verify_window_deep=true)).
    type: bool
    default: false
  window_deep_tokens:
    description: The prompt tokens the deep window fills; V(0) fills all of one slot but the chat template and the answer.
      More than one slot holds fails the check naming both.
    type: int
    default: 0
  prefix_cache_max_reprefill:
    description: Tokens of the first request the carried-on conversation of C(prefix_cache) may re-prefill before it warns.
    type: int
    default: 8
  slot_prompt:
    description: The echo-friendly prompt of C(slots) (text a drafter and ngram-mod can match).
    type: str
    default: >-
      Repeat this line exactly, four times: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over
      the lazy dog, the quick brown fox jumps over the lazy dog.
  slot_max_tokens:
    description: C(max_tokens) of each C(slots) request.
    type: int
    default: 64
  request_timeout:
    description: Seconds for each request (the C(window) prefill among them).
    type: int
    default: 300
  drafter_max_tokens:
    description: The most tokens each C(drafter) request generates (fewer with an n-gram type in the chain, see C(drafter)).
    type: int
    default: 32
  isolation_prompt:
    description: The greedy prompt C(isolation) asks each slot three times.
    type: str
    default: Write two sentences about a lighthouse keeper who counts the ships passing in a storm.
  isolation_max_tokens:
    description: C(max_tokens) of each greedy C(isolation) answer.
    type: int
    default: 32
  isolation_words:
    description: Words of filler in the conversation C(isolation) runs between the greedy answers.
    type: int
    default: 600
  previous_contract:
    description: The last recorded client contract of this endpoint (the role reads it from the controller); V({}) for none.
    type: dict
    default: {}
  textfile_dir:
    description: Where to write the node-exporter textfile (C(llm_verify_check{check,service}) 1/0); empty for none.
    type: path
    default: ''
  textfile_dir_optional:
    description: A O(textfile_dir) that does not exist is a warning, not a failure.
    type: bool
    default: false
  textfile_name:
    description: The textfile's name in O(textfile_dir).
    type: str
    default: llm_verify.prom
notes:
  - Check mode sends nothing and writes nothing; RV(would_send) lists every request a run would make, and the skipped
    checks with their reasons.
  - The endpoint is called directly, never through a proxy from the environment. The API key is sent, never returned.
seealso:
  - module: dankfleet.llm.llama_server_gate
attributes:
  check_mode:
    support: partial
    details:
      - Sends no request and writes no textfile; lists what it would send in RV(would_send) and reports
        C(changed=false) although a real run may write the textfile.
  diff_mode:
    support: none
  platform:
    platforms: posix'''

EXAMPLES = r'''
- name: Verify the gated endpoint
  dankfleet.llm.endpoint_verify:
    env_file: /etc/llama-server/llm.env
    service: llm.service
    window_fraction: 0.25
    textfile_dir: /var/lib/prometheus/node-exporter
  register: verify

- name: Fail with the findings
  ansible.builtin.assert:
    that: verify.passed
    fail_msg: "{{ verify.message }}"
'''

RETURN = r'''
passed:
  description: No fatal check failed; null in check mode.
  returned: always
  type: bool
checks:
  description: One entry per check, in order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The check.
      type: str
      returned: always
      sample: slots
    status:
      description: One of C(pass), C(warn), C(fail) or C(skip).
      type: str
      returned: always
    reason:
      description: What it found, or why it was skipped.
      type: str
      returned: always
    fatal:
      description: A failure that fails the deploy.
      type: bool
      returned: always
    figures:
      description: The check's numbers - statuses, tokens, per-slot drafts, seconds.
      type: dict
      returned: always
    seconds:
      description: How long the check took.
      type: float
      returned: always
findings:
  description: "The fatal failures, one line each (C(verify <check>: ...))."
  returned: always
  type: list
  elements: str
warn_findings:
  description: The warnings (figures outside their bound, a changed contract), also shown as module warnings.
  returned: always
  type: list
  elements: str
message:
  description: The verdict line and one line per check.
  returned: always
  type: str
contract:
  description: The client contract - alias, URL, context per slot, slots, modalities, the effort map (effort -> HTTP status).
  returned: success and not check mode
  type: dict
  sample: {alias: llm, url: "http://127.0.0.1:7770/v1", context_per_slot: 163840, slots: 2,
           modalities: {vision: true}, reasoning_efforts: {low: 200, medium: 200, high: 500, xhigh: 200}}
contract_changes:
  description: What moved in RV(contract) since O(previous_contract).
  returned: always
  type: list
  elements: str
would_send:
  description: Every request the checks make (or why a check is skipped), in words.
  returned: always
  type: list
  elements: str
textfile:
  description: The textfile written; null when none.
  returned: always
  type: str
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import endpoint_verify as ev
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import SECRET_KEYS, LlamaEnvError, read_env_file
from ansible_collections.dankfleet.llm.plugins.module_utils.serve.plan_actual import write_textfile

ARGUMENT_SPEC = dict(
    env_file=dict(type='path', required=True),
    host=dict(type='str', default=''),
    service=dict(type='str', default='llama-server.service'),
    checks=dict(type='list', elements='str', choices=list(ev.CHECKS), default=list(ev.CHECKS)),
    reasoning_efforts=dict(type='list', elements='str', default=list(ev.DEFAULTS['reasoning_efforts'])),
    window_fraction=dict(type='float', default=1.0),
    window_warn_seconds=dict(type='int', default=0),
    window_deep=dict(type='bool', default=False),
    window_deep_tokens=dict(type='int', default=0, no_log=False),
    prefix_cache_max_reprefill=dict(type='int', default=8),
    slot_prompt=dict(type='str', default=ev.DEFAULTS['slot_prompt']),
    slot_max_tokens=dict(type='int', default=64, no_log=False),
    request_timeout=dict(type='int', default=300),
    drafter_max_tokens=dict(type='int', default=32, no_log=False),
    isolation_prompt=dict(type='str', default=ev.DEFAULTS['isolation_prompt']),
    isolation_max_tokens=dict(type='int', default=32, no_log=False),
    isolation_words=dict(type='int', default=600),
    previous_contract=dict(type='dict', default={}),
    textfile_dir=dict(type='path', default=''),
    textfile_dir_optional=dict(type='bool', default=False),
    textfile_name=dict(type='str', default='llm_verify.prom'),
)

EMPTY = dict(passed=None, checks=[], findings=[], warn_findings=[], contract_changes=[], would_send=[], textfile=None)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    opts = dict((k, p[k]) for k in ev.DEFAULTS)
    problems = ev.validate_options(opts)
    if '/' in p['textfile_name'] or not p['textfile_name'].strip():
        problems.append('textfile_name=%r: a file name in textfile_dir, no slash' % p['textfile_name'])
    if problems:
        module.fail_json(msg='endpoint_verify: %s. Nothing was sent.' % '; '.join(problems), **EMPTY)
    if module.check_mode and not os.path.exists(p['env_file']):
        module.exit_json(changed=False, **dict(EMPTY, message='check mode: %s does not exist yet; a real run verifies '
                                               'the shape it holds once written' % p['env_file']))
    try:
        env, _ = read_env_file(p['env_file'])
        expect = ev.features(env, host=p['host'], env_file=p['env_file'])
    except (LlamaEnvError, ev.VerifyError) as exc:
        module.fail_json(msg='endpoint_verify: %s. Nothing was sent.' % exc, **EMPTY)
    for name in SECRET_KEYS:               # an error body that echoes a secret is scrubbed from the result
        if env.get(name):
            module.no_log_values.add(env[name])
    would = ev.would_send(expect, opts)
    textfile_dir = p['textfile_dir']
    warnings = []
    if textfile_dir and not os.path.isdir(textfile_dir):
        if not p['textfile_dir_optional']:
            module.fail_json(msg='endpoint_verify: textfile_dir %s does not exist: create it (node-exporter '
                                 '--collector.textfile.directory), leave it empty for no textfile, or set '
                                 'textfile_dir_optional. Nothing was sent.' % textfile_dir, **dict(EMPTY, would_send=would))
        warnings.append('textfile_dir %s is not a directory: no llm_verify_check textfile written' % textfile_dir)
        textfile_dir = ''
    if module.check_mode:
        module.exit_json(changed=False, **dict(EMPTY, would_send=would, message='check mode: would verify %s - %s'
                                               % (expect['base'], '; '.join(would))))
    result = ev.run_verify(expect, env.get('LLAMA_API_KEY', ''), opts, previous_contract=p['previous_contract'],
                           run_command=module.run_command, service=p['service'])
    result['warn_findings'] = warnings + result.pop('warnings')    # 'warnings' is Ansible's own result key
    changed, path = False, None
    if textfile_dir:
        path, changed = write_textfile(textfile_dir, ev.render_textfile(result['checks'], p['service']),
                                       name=p['textfile_name'])
    for line in result['warn_findings']:
        module.warn(line)
    module.exit_json(changed=changed, would_send=would, textfile=path, **result)


if __name__ == '__main__':
    main()
