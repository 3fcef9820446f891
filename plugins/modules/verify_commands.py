#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: verify_commands
short_description: The operator's own battery against a verified llama-server, run on the controller
version_added: 0.1.0
description:
  - Runs the operator's commands (an e2e suite, a crawl, a smoke script) on the controller, in the action plugin's own
    process, after C(dankfleet.llm.endpoint_verify)'s built-in checks; the C(dankfleet.llm.llama_server) role runs it
    from C(llama_server_verify_commands) and rolls back like a failed gate when one fails.
  - Each command runs with the controller's environment plus C(LLM_ENDPOINT_URL) and C(OPENAI_BASE_URL) (O(url)),
    C(LLM_ENDPOINT_ALIAS) and C(OPENAI_MODEL) (O(alias)), C(LLM_ENDPOINT_API_KEY) and C(OPENAI_API_KEY) (O(api_key);
    C(none) for C(OPENAI_API_KEY) when empty). The key is never returned; in a command's output it is blanked.
  - A command is retried up to its C(retries) (the runbook's e2e crawl flaked once, 1 failed of 31, while the service
    stayed healthy); one that still exits non-zero, or outlives its C(timeout) (its whole process group is killed), is
    a RV(findings) line and RV(passed) is false. A pass after a retry is a warning.
  - A bad entry (no program, an unknown key, a timeout that is not a positive integer) fails the task naming it,
    before anything runs.
author:
  - dankfleet engineers (@dankfleet)
options:
  commands:
    description:
      - The battery, in order. Each entry is a dict with C(command) (an argv list, or a string split like a shell
        would, without a shell), C(timeout) (seconds, default 600), C(retries) (default 0) and C(name) (default the
        program's name); a bare string or list is its C(command).
    type: list
    elements: raw
    required: true
  url:
    description: The endpoint's OpenAI base URL as the controller reaches it (C(http://host:port/v1)).
    type: str
    default: ''
  alias:
    description: The model alias the endpoint serves.
    type: str
    default: ''
  api_key:
    description: The endpoint's API key; empty for none.
    type: str
    default: ''
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Runs nothing; RV(would_run) lists each command, its timeout and retries.
  diff_mode:
    support: none
  platform:
    platforms: posix
seealso:
  - module: dankfleet.llm.endpoint_verify
'''

EXAMPLES = r'''
- name: The fleet's e2e suite against the new shape
  dankfleet.llm.verify_commands:
    url: http://gpu-box:7770/v1
    alias: llm
    api_key: "{{ llama_server_api_key }}"
    commands:
      - name: e2e crawl
        command: [npx, playwright, test, e2e/crawl.spec.ts]
        timeout: 900
        retries: 1
  register: battery
'''

RETURN = r'''
passed:
  description: Every command exited 0 within its retries; null in check mode.
  returned: always
  type: bool
results:
  description: One entry per command, in order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The command's name.
      type: str
      returned: always
    rc:
      description: The last attempt's exit status; null when it timed out or could not start.
      type: int
      returned: always
    attempts:
      description: How many times it ran.
      type: int
      returned: always
    seconds:
      description: Time over all attempts.
      type: float
      returned: always
    output_tail:
      description: The last 2000 characters of the last attempt's stdout and stderr, the key blanked, control characters escaped.
      type: str
      returned: always
findings:
  description: One line per command that failed, with its output's end.
  returned: always
  type: list
  elements: str
warn_findings:
  description: Commands that passed only on a retry.
  returned: always
  type: list
  elements: str
would_run:
  description: Each command, its timeout and retries, in words.
  returned: always
  type: list
  elements: str
message:
  description: The verdict line, one line per command, then the findings.
  returned: success
  type: str
'''
