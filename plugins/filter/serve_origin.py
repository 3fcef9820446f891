# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: serve_origin
short_description: Which of the planned serve values the inventory pinned
version_added: 0.1.0
description:
  - >-
    C({tensor_split, ctx_size, cache_ram, n_cpu_moe}), each C(pinned) (the inventory set it) or C(planned) (it is
    left open - a split of C([]), a context of C(0), a cache-ram or n_cpu_moe of C(auto) - for the planner): the one
    rule of C(plugins/module_utils/plan/shape.py).
options:
  _input:
    description: The settled serve settings (C(llm_plan_serve), C(dankfleet_settled.serve)).
    type: dict
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Where the context comes from
  ansible.builtin.debug:
    msg: "{{ (llm_plan_serve | dankfleet.llm.serve_origin).ctx_size }}"
"""
RETURN = r"""
_value:
  description: key -> C(pinned) or C(planned).
  type: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import origin
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def serve_origin(serve):
    return call("serve_origin", origin, serve)


class FilterModule(object):
    def filters(self):
        return {"serve_origin": serve_origin}
