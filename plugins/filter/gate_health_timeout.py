# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: gate_health_timeout
short_description: The seconds the llama_server gate gives /health, from the payload the load reads
version_added: 0.1.0
description:
  - O(override) when above 0, else O(base) plus the payload (model, the drafter of a model-backed spec type, the
    mmproj with vision) read at O(mib_per_s) MiB/s, rounded up.
  - The one formula of the gate (C(module_utils/serve/llama_server_gate.py)); the C(dankfleet.llm.llama_server_gate) module
    applies it to the live env file's payload, this filter to a payload a play is about to deploy (a dry run's report).
options:
  _input:
    description: Bytes of the payload files.
    type: int
    required: true
  override:
    description: The role's C(llama_server_gate_health_timeout); above 0 it is the answer.
    type: int
    default: 0
  base:
    description: The role's C(llama_server_gate_health_timeout_base).
    type: int
    default: 60
  mib_per_s:
    description: The role's C(llama_server_gate_load_mib_per_s); above 0.
    type: float
    default: 200
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Say how long the gate would wait for /health
  ansible.builtin.debug:
    msg: "/health within {{ payload_bytes | dankfleet.llm.gate_health_timeout(0, 60, 200) }} s"
"""
RETURN = r"""
_value:
  description: Seconds.
  type: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dankfleet.llm.plugins.module_utils.serve.llama_server_gate import GateError, health_timeout


def gate_health_timeout(payload_bytes, override=0, base=60, mib_per_s=200.0):
    try:
        return health_timeout(int(payload_bytes), int(override), int(base), float(mib_per_s))
    except (GateError, TypeError, ValueError) as exc:
        raise AnsibleFilterError('dankfleet.llm.gate_health_timeout: %s (payload_bytes=%r, override=%r, base=%r, '
                                 'mib_per_s=%r); nothing was changed' % (exc, payload_bytes, override, base, mib_per_s))


class FilterModule(object):
    def filters(self):
        return {"gate_health_timeout": gate_health_timeout}
