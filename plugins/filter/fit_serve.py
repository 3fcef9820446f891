# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: fit_serve
short_description: The serve dict P(dankfleet.llm.fit_plan#filter) sizes, from an endpoint's settled serve settings
version_added: 0.1.0
description:
  - Maps the settled C(llama_server_*) values (C(dankfleet_settled.serve), the C(llm_plan) role's C(llm_plan_serve))
    onto the planner's C(serve) dict - a split of V([]) becomes C(auto), a context of V(0) becomes C(max), a
    cache-ram of C(auto) stays C(auto), an n_cpu_moe of C(auto) stays C(auto), so the planner chooses exactly what the
    inventory left open.
  - The logic lives in C(plugins/module_utils/plan/plan_result.py).
options:
  _input:
    description: The settled serve settings (C(backend), C(split_mode), C(tensor_split), C(ctx_size), C(cache_ram),
      C(parallel), C(batch_size), C(ubatch_size), C(cache_type_k), C(cache_type_v), C(flash_attn), C(spec_type),
      C(spec_draft_n_max), C(spec_draft_device), C(n_cpu_moe), C(cpu_moe), C(load_mode), C(mmproj_device), C(mmproj_offload),
      C(image_min_tokens), C(image_max_tokens)).
    type: dict
    required: true
  floor_bytes:
    description: The per-card floor (C(dankfleet_plan_floor_bytes)).
    type: int
    default: 0
  lean_layers:
    description: Layers leaned off the card behind the narrowest link (C(dankfleet_plan_lean_layers)).
    type: int
    default: 0
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Plan what the inventory left open
  ansible.builtin.set_fact:
    __fit: >-
      {{ gpus | dankfleet.llm.fit_plan(model=target,
                                       serve=dankfleet_settled.serve | dankfleet.llm.fit_serve(floor_bytes=1073741824)) }}
"""
RETURN = r"""
_value:
  description: The O(dankfleet.llm.fit_plan#filter:serve) dict.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.plan_result import fit_serve as _fit_serve


def fit_serve(serve, floor_bytes=0, lean_layers=0):
    if not isinstance(serve, dict):
        raise AnsibleFilterError("dankfleet.llm.fit_serve: the input must be the settled serve settings (a dict, "
                                 "dankfleet_settled.serve), got %s" % type(serve).__name__)
    try:
        return _fit_serve(serve, floor_bytes=floor_bytes, lean_layers=lean_layers)
    except (TypeError, ValueError, KeyError) as exc:
        raise AnsibleFilterError("dankfleet.llm.fit_serve: %s; run the settle step first (dankfleet.llm.settle), "
                                 "which types every value" % exc)


class FilterModule(object):
    def filters(self):
        return {"fit_serve": fit_serve}
