# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: plan_headers
short_description: The GGUF header facts the plan is made with, by the role each file plays
version_added: 0.1.0
description:
  - What the C(llm_plan) role passes P(dankfleet.llm.fit_plan#filter) as C(model), C(drafter) and C(mmproj).
  - C(reads=recorded) - the controller's records (C(recorded), role -> the parsed record) and what the manifest's
    urls gave (the plan's C(url_headers)); else what the facts' one call read on the host (C(on_host)) when the
    plan's own read was skipped, else that read's loop results (C(read), keyed by each item's C(key)).
options:
  _input:
    description: The unfinished C(llm_plan) (C(url_headers)).
    type: dict
    required: true
  reads:
    description: C(host) or C(recorded).
    type: str
    required: true
  recorded:
    description: role -> the parsed header record (C(reads=recorded)).
    type: dict
  on_host:
    description: role -> the header facts the facts' call read on the host.
    type: dict
  read:
    description: The registered result of the plan's own gguf_info loop.
    type: dict
  skipped:
    description: Whether that loop was skipped.
    type: bool
    default: false
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: The headers
  ansible.builtin.debug:
    msg: "{{ llm_plan | dankfleet.llm.plan_headers('host', on_host=headers, skipped=true) }}"
"""
RETURN = r"""
_value:
  description: role -> header facts.
  type: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.plan_result import plan_headers as _headers
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def plan_headers(plan, reads, recorded=None, on_host=None, read=None, skipped=False):
    return call("plan_headers", _headers, plan, reads, recorded, on_host, read, skipped)


class FilterModule(object):
    def filters(self):
        return {"plan_headers": plan_headers}
