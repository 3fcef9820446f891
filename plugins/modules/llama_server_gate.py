#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: llama_server_gate
short_description: Prove a live llama-server shape after a (re)start - health, a real request, slots, drafter, one process
version_added: 0.1.0
description:
  - The gate of the C(dankfleet.llm.llama_server) role, run on the target after every restart. Its expectations come
    from the live env file O(env_file) (so the same checks prove a rolled-back shape) - the URL (O(host) or the bind
    address, C(127.0.0.1) when bound to every address, and C(LISTEN_PORT)), the API key, the alias, the slots
    (C(PARALLEL)), the context per slot (C(CTX_SIZE / PARALLEL)), vision, the speculative types and the RPC workers.
  - "Checks, in order: before - the unit's C(NRestarts), C(MainPID), C(ActiveState); 1 - C(/health) answers 200 within
    RV(health_timeout) s; 1b (C(RPC) set) - this start's journal shows every RPC worker as a device with free memory;
    2 - a real chat completion with the alias returns at least one token; 3 - C(/v1/models) lists the alias and
    C(/props) has the slots, the context per slot and the vision modality the env file asks for; 4 (C(SPEC_TYPE) set) -
    after a generation on a prompt a drafter can match, C(llamacpp:spec_decode_num_drafts_total) on C(/metrics) is
    a finite number above 0 (a C(NaN) or C(+Inf) counter fails the step, as does a completion token count that
    is not a finite integer); 5 - the same process served every step (C(NRestarts) and C(MainPID) unchanged, still active)."
  - Every answer is read through the shape b11434 gives it (C(module_utils/base/llama_server_answers.py)), C(/metrics) by the
    exposition format's grammar; one of another shape (a chat answer without C(choices[0].message), a C(/props) whose
    C(modalities) is not an object, a C(1_0) sample) fails its step with the request and the path named.
  - The first failing step of 1-4 ends the HTTP checks; step 5 is still read, so a finding also says when the service
    died on the request.
  - A failing shape does not fail the module - it returns RV(passed) false with RV(findings), and the caller decides
    (the role fails with them and rolls back). The module fails only on input it cannot gate from (bad options, an
    unreadable env file, one without C(ALIAS), C(LISTEN_PORT) or C(MODEL_PATH)), naming the cause; nothing is checked then.
  - Reads the env file with the collection's one env-file reader (C(module_utils/base/llama_env.py), systemd's
    C(EnvironmentFile=) rules) and talks to the endpoint with C(module_utils/base/endpoint_client.py). The API key is sent,
    never returned.
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
  service:
    description: The systemd unit that runs llama-server (C(llama-server.service)); steps before, 1b and 5 read it.
    type: str
    required: true
  label:
    description: Which shape this is, in every finding and the passed line (C(new shape), C(previous shape) ...).
    type: str
    default: new shape
  host:
    description: Host the gate calls; empty is the env file's C(BIND_ADDR) (C(127.0.0.1) when bound to every address).
    type: str
    default: ''
  health_timeout:
    description: Seconds for C(/health) to answer 200; V(0) derives them from the payload (see O(health_timeout_base)).
    type: int
    default: 0
  health_timeout_base:
    description:
      - With O(health_timeout=0), the timeout is this many seconds plus the payload the load reads (model, the drafter
        of a model-backed C(SPEC_TYPE), the mmproj with C(VISION=on)) at O(load_mib_per_s), rounded up.
    type: int
    default: 60
  load_mib_per_s:
    description: The load rate, in MiB/s, the derived timeout assumes.
    type: float
    default: 200
  prompt:
    description: The real request of step 2.
    type: str
    default: 'Reply with one word: ready.'
  max_tokens:
    description: C(max_tokens) of the step-2 request.
    type: int
    default: 8
  spec_prompt:
    description: A prompt a drafter can match (repetitive text), generated on before step 4 reads C(/metrics).
    type: str
    default: >-
      Repeat this line exactly, twice: the quick brown fox jumps over the lazy dog, the quick brown fox jumps over the
      lazy dog, the quick brown fox jumps over the lazy dog.
  spec_max_tokens:
    description: C(max_tokens) of the step-4 generation.
    type: int
    default: 64
  request_timeout:
    description:
      - Seconds for each generation request, the whole request (connect, headers and body together, not per socket
        read). Each C(/health) request has at most 10 s and never outlasts RV(health_timeout); C(/v1/models),
        C(/props) and C(/metrics) 30 s each; no answer may be longer than 16 MiB.
    type: int
    default: 120
notes:
  - Check mode reads the env file and the payload sizes and returns RV(checks), what a run would check, with
    RV(passed) null; it sends no request. An env file that does not exist yet is reported, not refused, in check mode.
  - The endpoint is called directly, never through a proxy from the environment.
seealso:
  - module: dankfleet.llm.plan_actual
attributes:
  check_mode:
    support: full
    details:
      - Sends no request; reports what would be checked.
  diff_mode:
    support: N/A
    details:
      - The gate changes nothing.
  platform:
    platforms: linux'''

EXAMPLES = r'''
- name: Gate the restarted service
  dankfleet.llm.llama_server_gate:
    env_file: /etc/llama-server/llama-server.env
    service: llama-server.service
    label: new shape
  register: gate

- name: Fail with the gate's findings
  ansible.builtin.assert:
    that: gate.passed
    fail_msg: "{{ gate.message }}"
    success_msg: "{{ gate.message }}"
'''

RETURN = r'''
passed:
  description: Whether every check passed; null in check mode.
  returned: always
  type: bool
  sample: true
findings:
  description:
    - "One line per failing step, C(gate (<label>) step <n>: ...) - the first failing step of 1-4, then step 5 when the
      service also did not stay up. Empty when the gate passed."
  returned: always
  type: list
  elements: str
  sample: ["gate (new shape) step 2: POST /v1/chat/completions (model llm) answered HTTP 500 with 0 completion token(s): ..."]
message:
  description: The passed line (URL, alias, release, slots, tokens, drafts, MainPID, NRestarts), or the findings joined by newlines.
  returned: always
  type: str
  sample: >-
    gate (new shape) passed: http://127.0.0.1:7770 alias llm, release b11434-hip, 2 slot(s) of 163840,
    8 token(s) answered, MainPID 4711, NRestarts 0.
expected:
  description: What the shape must show, from the env file (never the API key).
  returned: always
  type: dict
  contains:
    label: {description: O(label), type: str, returned: always}
    base: {description: The URL the gate calls., type: str, returned: always, sample: "http://127.0.0.1:7770"}
    alias: {description: C(ALIAS), type: str, returned: always}
    slots: {description: C(PARALLEL), type: int, returned: always}
    slot_ctx: {description: C(CTX_SIZE // PARALLEL); 0 when C(CTX_SIZE) is unset (not checked)., type: int, returned: always}
    vision: {description: C(VISION=on), type: bool, returned: always}
    spec: {description: C(SPEC_TYPE), type: str, returned: always}
    release: {description: C(LLAMA_RELEASE), type: str, returned: always}
    rpc: {description: The C(RPC) endpoints., type: list, elements: str, returned: always}
    payload: {description: The files the load reads., type: list, elements: str, returned: always}
health_timeout:
  description: Seconds /health had (O(health_timeout), or derived from RV(payload_bytes)).
  returned: always
  type: int
  sample: 62
payload_bytes:
  description: Bytes of the payload files (an absent one counts 0).
  returned: always
  type: int
checks:
  description: The checks this shape gets, in words, in order.
  returned: always
  type: list
  elements: str
checked:
  description: The steps that ran (C(before), C(1), C(1b), C(2), C(3), C(4), C(5)); empty in check mode.
  returned: always
  type: list
  elements: str
health_seconds:
  description: Seconds until /health answered 200; null when it never did.
  returned: always
  type: float
completion_tokens:
  description: Completion tokens of the step-2 request; null when step 2 did not run.
  returned: always
  type: int
drafts:
  description: C(llamacpp:spec_decode_num_drafts_total) after the step-4 generation; null without C(SPEC_TYPE).
  returned: always
  type: float
main_pid:
  description: The unit's MainPID after the checks.
  returned: always
  type: str
n_restarts:
  description: The unit's NRestarts after the checks.
  returned: always
  type: str
active_state:
  description: The unit's ActiveState after the checks.
  returned: always
  type: str
build_info:
  description: The build C(/props) reports (C(b11434-unknown)); null when step 3 did not run.
  returned: always
  type: str
spec_chat_status:
  description: The HTTP status of step 4's request to the drafter's shape; null when step 4 did not run.
  returned: always
  type: int
env_problems:
  description: Lines of the env file systemd would not read as written (they do not fail the gate; the role's validator refuses them).
  returned: always
  type: list
  elements: str
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import llama_server_gate as lg
from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import endpoint_problem
from ansible_collections.dankfleet.llm.plugins.module_utils.base.http_client import url_credentials
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import SECRET_KEYS, LlamaEnvError, read_env_file

D = lg.DEFAULTS
ARGUMENT_SPEC = dict(
    env_file=dict(type='path', required=True),
    service=dict(type='str', required=True),
    label=dict(type='str', default=D['label']),
    host=dict(type='str', default=D['host']),
    health_timeout=dict(type='int', default=D['health_timeout']),
    health_timeout_base=dict(type='int', default=D['health_timeout_base']),
    load_mib_per_s=dict(type='float', default=D['load_mib_per_s']),
    prompt=dict(type='str', default=D['prompt']),
    max_tokens=dict(type='int', default=D['max_tokens'], no_log=False),
    spec_prompt=dict(type='str', default=D['spec_prompt']),
    spec_max_tokens=dict(type='int', default=D['spec_max_tokens'], no_log=False),
    request_timeout=dict(type='int', default=D['request_timeout']),
)
EMPTY = dict(passed=None, findings=[], message='', expected={}, health_timeout=None, payload_bytes=None, checks=[],
             checked=[], health_seconds=None, completion_tokens=None, drafts=None, main_pid=None, n_restarts=None,
             active_state=None, build_info=None, spec_chat_status=None, env_problems=[])


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    problems = lg.validate_options(p)
    if not p['service'].strip():
        problems.append('service is empty: name the unit that runs llama-server (llama-server.service)')
    if problems:
        module.fail_json(msg='llama_server_gate: %s. Nothing was checked.' % '; '.join(problems), **EMPTY)

    if module.check_mode and not os.path.exists(p['env_file']):
        absent = 'check mode: %s does not exist yet; a real run gates the shape it holds once written' % p['env_file']
        module.exit_json(changed=False, **dict(EMPTY, message=absent))
    try:
        env, env_problems = read_env_file(p['env_file'])
        expect = lg.expectations(env, host=p['host'], label=p['label'], env_file=p['env_file'])
        size = lg.payload_bytes(expect['payload'])
        timeout = lg.health_timeout(size, p['health_timeout'], p['health_timeout_base'], p['load_mib_per_s'])
    except (LlamaEnvError, lg.GateError) as exc:
        module.fail_json(msg='llama_server_gate (%s): %s. Nothing was checked.' % (p['label'], exc), **EMPTY)
    key = env.get('LLAMA_API_KEY', '')
    for name in SECRET_KEYS:               # an error body that echoes a secret is scrubbed from the result
        if env.get(name):
            module.no_log_values.add(env[name])
            if env[name].strip():
                module.no_log_values.add(env[name].strip())
    for secret in url_credentials(expect['base']):
        module.no_log_values.add(secret)
    problem = endpoint_problem(expect['base'], key)
    if problem:
        module.fail_json(msg='llama_server_gate (%s): %s (from %s). Nothing was checked.'
                         % (p['label'], problem.replace('api_key', 'LLAMA_API_KEY'), p['env_file']), **EMPTY)
    checks = lg.planned_checks(expect, p['service'], timeout)
    base = dict(EMPTY, expected=expect, health_timeout=timeout, payload_bytes=size, checks=checks,
                env_problems=env_problems)
    if module.check_mode:
        would = 'check mode: would gate (%s) %s - %s' % (p['label'], expect['base'], '; '.join(checks))
        module.exit_json(changed=False, **dict(base, message=would))

    opts = dict((k, p[k]) for k in lg.DEFAULTS if k in p)
    result = lg.run_gate(expect, key, p['service'], timeout, module.run_command, opts)
    base.update(result)
    module.exit_json(changed=False, **base)


if __name__ == '__main__':
    main()
