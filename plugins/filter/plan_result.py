# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: plan_result
short_description: The plan an endpoint is served with, from a P(dankfleet.llm.fit_plan#filter) result
version_added: 0.1.0
description:
  - Builds the planned part of the C(llm_plan) result the C(dankfleet.llm.llm_plan) role publishes and the
    C(dankfleet.llm.llama_server) role takes as its one plan input (C(llama_server_llm_plan)) - the split, the
    context, the cache-ram and the MoE blocks whose experts stay on the host (C(n_cpu_moe)) to serve with, where
    each came from (C(pinned) by the inventory, C(planned) by the planner), the fit, and the capacity table.
  - The fit's errors and warnings name the inventory variables the operator edits (C(llama_server_ctx_size),
    C(dankfleet_plan_floor_bytes)) instead of the planner's C(serve.*) fields.
  - The logic lives in C(plugins/module_utils/plan/plan_result.py).
options:
  _input:
    description: The result of P(dankfleet.llm.fit_plan#filter).
    type: dict
    required: true
  serve:
    description: The serve settings the fit sized - the settled ones (a split of V([]), a context of V(0), a cache-ram
      of C(auto), an n_cpu_moe of C(auto) are open) or the planner's own C(serve) dict (C(auto), C(max), C(auto),
      C(auto)).
    type: dict
    required: true
  host:
    description: The host the capacity table names.
    type: str
    default: this host
  reads:
    description: Where the payload's headers were read - C(host) or C(recorded) (on the controller).
    type: str
    default: host
    choices: [host, recorded]
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Serve what the planner chose
  ansible.builtin.include_role:
    name: dankfleet.llm.llama_server
  vars:
    llama_server_llm_plan: "{{ __fit | dankfleet.llm.plan_result(serve=__serve, host=inventory_hostname) }}"
"""
RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    planned:
      description: Always true (a fit was made).
      type: bool
    fits:
      description: The fit's verdict.
      type: bool
    tensor_split:
      description: The split to serve with (the pinned one, or the planner's; V([]) on one device).
      type: list
      elements: raw
    ctx_size:
      description: The context to serve with.
      type: int
    cache_ram:
      description: The C(--cache-ram) MiB to serve with, or C(auto) when the planner gave none.
      type: raw
    n_cpu_moe:
      description: The C(--n-cpu-moe) to serve with - the pinned one, or the planner's choice (its
        C(n_cpu_moe_choice)) where it was left C(auto); V(0) where C(auto) left nothing to choose.
      type: int
    origin:
      description: C(pinned) or C(planned), for C(tensor_split), C(ctx_size), C(cache_ram) and C(n_cpu_moe).
      type: dict
    shape:
      description: The complete serve shape the C(dankfleet.llm.llama_server) role writes into its env file as it is -
        every settled serve setting, the four values above filled in (C(cache_ram) in MiB, never C(auto)), and C(origin).
      type: dict
    fit:
      description: The fit, its C(errors) and C(warnings) naming inventory variables.
      type: dict
    devices:
      description: The devices' names, in split order.
      type: list
      elements: str
    capacity:
      description: C(fits), C(summary) (one line) and C(lines) (the table) of the host.
      type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.plan_result import plan_result as _plan_result


def plan_result(fit, serve=None, host="this host", reads="host"):
    if not isinstance(fit, dict) or not isinstance(serve, dict):
        raise AnsibleFilterError("dankfleet.llm.plan_result: the input is a fit_plan result and serve= the serve "
                                 "settings it sized (both dicts)")
    if reads not in ("host", "recorded"):
        raise AnsibleFilterError("dankfleet.llm.plan_result: reads is host or recorded, got %r" % (reads,))
    try:
        return _plan_result(fit, serve, host=host, reads=reads)
    except (TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError("dankfleet.llm.plan_result: malformed fit or serve (%s: %s); pass "
                                 "dankfleet.llm.fit_plan's result as is" % (type(exc).__name__, exc))


class FilterModule(object):
    def filters(self):
        return {"plan_result": plan_result}
