# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
name: serve_shadowed
short_description: Name the extra llama-server arguments and environment that would override a planned or guarded setting
version_added: 0.1.0
description:
  - The launcher of C(dankfleet.llm.llama_server) passes every planned and preflight-checked setting as a flag
    and appends C(llama_server_extra_args) after them; llama.cpp takes the last occurrence of a flag and reads
    C(LLAMA_ARG_<FLAG>) from the environment. An extra C(--ctx-size)/C(-c), C(--tensor-split)/C(-ts),
    C(--device)/C(-dev), C(--split-mode)/C(-sm), C(--gpu-layers)/C(-ngl) ... would silently replace what
    C(dankfleet.llm.fit_plan) sized, and an extra C(HIP_VISIBLE_DEVICES) or C(CUDA_VISIBLE_DEVICES) would
    un-hide a device C(gpu_facts) hid.
  - Returns one message per offending entry, naming it and the role variable to set instead; an empty list
    when there is none. Flags that place weights or KV where the planner does not size them (C(-ot),
    C(--main-gpu), C(--rpc), C(--cpu-moe), C(--no-kv-offload) ...) are named too.
  - The logic lives in C(plugins/module_utils/plan/serve_guard.py).
positional: _input
options:
  _input:
    description: C(llama_server_extra_args), a list of arguments (each C(--flag), C(--flag=value) or a value).
    type: list
    elements: str
    required: true
  extra_env:
    description: C(llama_server_extra_env), a dict of environment names to values.
    type: dict
    default: {}
author:
  - dankfleet engineers (@dankfleet)
"""

EXAMPLES = r"""
- name: Refuse extra args and env that shadow a planned or guarded setting
  vars:
    _shadowed: "{{ llama_server_extra_args | dankfleet.llm.serve_shadowed(extra_env=llama_server_extra_env) }}"
  ansible.builtin.assert:
    that: _shadowed | length == 0
    fail_msg: "{{ _shadowed | join(' | ') }}. Nothing was changed."
"""

RETURN = r"""
_value:
  description: One message per offending argument or environment name (empty when none).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence

try:
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.serve_guard import shadowed
except ImportError:  # pragma: no cover - only when the collection is not on the path
    shadowed = None


def serve_shadowed(extra_args, extra_env=None):
    if shadowed is None:
        raise AnsibleFilterError("dankfleet.llm.serve_shadowed: plugins/module_utils/plan/serve_guard.py could not be imported")
    if extra_args is None:
        extra_args = []
    if not is_sequence(extra_args):
        raise AnsibleFilterError("dankfleet.llm.serve_shadowed: llama_server_extra_args must be a list of strings, got %s"
                                 % type(extra_args).__name__)
    if extra_env is None:
        extra_env = {}
    if not isinstance(extra_env, dict):
        raise AnsibleFilterError("dankfleet.llm.serve_shadowed: llama_server_extra_env must be a dict, got %s"
                                 % type(extra_env).__name__)
    return shadowed([str(a) for a in extra_args], extra_env)


class FilterModule(object):
    def filters(self):
        return {"serve_shadowed": serve_shadowed}
