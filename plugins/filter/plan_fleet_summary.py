# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: plan_fleet_summary
short_description: The llm_plan role's fleet summary, one verdict per host
version_added: 0.1.0
description:
  - >-
    C(fleet: N host(s), F fit, D do not fit, U not planned), then one row per host from the C(llm_plan) it
    published - its capacity summary when planned, C(cannot plan) with the reason, C(plans after the fetch) for a
    payload not on the host yet, else C(stopped before the plan).
options:
  _input:
    description: The hosts, in order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars); each host's C(llm_plan) is read from it (a host without one stopped before the plan).
    type: dict
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Fleet summary
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | dankfleet.llm.plan_fleet_summary(hostvars) }}"
  run_once: true
"""
RETURN = r"""
_value:
  description: The summary line, then one line per host.
  type: list
  elements: str
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.plan_fleet import fleet_summary
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def _plans(hosts, hostvars):
    plans = {}
    for host in hosts:
        found = hostvars[host]
        if "llm_plan" in found:
            plans[host] = found["llm_plan"]
    return fleet_summary(hosts, plans)


def plan_fleet_summary(hosts, hostvars):
    return call("plan_fleet_summary", _plans, list(hosts), hostvars)


class FilterModule(object):
    def filters(self):
        return {"plan_fleet_summary": plan_fleet_summary}
