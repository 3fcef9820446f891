# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: rpc_worker_facts
short_description: The llama.cpp RPC workers' facts as P(dankfleet.llm.rpc_devices#filter) reads them
version_added: 0.1.0
description:
  - One record per worker host (C(inventory_hostname), C(dankfleet_private_address), C(llama_rpc_worker_devices),
    C(llama_rpc_worker_backend) (default C(cpu)), C(ansible_facts.memtotal_mb), C(gpu_facts)), its GPUs from its
    own published plan (C(llm_plan.gpu_facts)) when it ran the C(llm_plan) role, else its C(gpu_facts).
options:
  _input:
    description: The worker hosts' names.
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: raw
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: The workers' devices
  ansible.builtin.debug:
    msg: "{{ llm_plan_rpc_workers | dankfleet.llm.rpc_worker_facts(hostvars) | dankfleet.llm.rpc_devices(gpu_facts) }}"
"""
RETURN = r"""
_value:
  description: One record per worker, in order.
  type: list
  elements: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.serve.rpc_fleet import worker_facts
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def _records(hosts, hostvars):
    return [worker_facts(host, hostvars[host]) for host in hosts]


def rpc_worker_facts(hosts, hostvars):
    return call("rpc_worker_facts", _records, list(hosts), hostvars)


class FilterModule(object):
    def filters(self):
        return {"rpc_worker_facts": rpc_worker_facts}
