# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: rpc_devices
short_description: fit_plan's device list for a head and its llama.cpp RPC workers
version_added: 0.1.0
description:
  - C(RPC0), C(RPC1), ... in C(--rpc) order (see M(dankfleet.llm.rpc_endpoints)), each with its C(host),
    C(endpoint), the worker's device and backend (C(llama_rpc_worker_backend), default C(cpu)) and memory
    (the worker's C(gpu_facts), or its RAM for a CPU worker), then the head's own GPUs -- llama.cpp's device
    order (RPC servers first). Pass the result to P(dankfleet.llm.fit_plan#filter) as its input; it charges
    each RPC device the worker process's own overhead for that backend and names the host in its table.
extends_documentation_fragment:
  - dankfleet.llm.rpc_workers
options:
  local_gpus:
    description: The head's own GPUs (gpu_facts' result or its C(gpus) list); empty for a CPU head.
    type: raw
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Plan over the head's GPUs and every worker device
  ansible.builtin.set_fact:
    plan: >-
      {{ groups['llm_rpc_workers'] | map('extract', hostvars) | dankfleet.llm.rpc_devices(gpu_facts)
         | dankfleet.llm.fit_plan(model=facts, serve=serve) }}
"""
RETURN = r"""
_value:
  description: Devices as fit_plan takes them (C(name), C(vram_total_bytes), C(host), C(endpoint), C(rpc_backend)).
  type: list
  elements: dict
"""

from ansible_collections.dankfleet.llm.plugins.plugin_utils.rpc_filter import call


def rpc_devices(hosts, local_gpus=None):
    return call("rpc_devices", "rpc_devices", call("rpc_devices", "workers_from_hostvars", hosts), local_gpus)


class FilterModule(object):
    def filters(self):
        return {"rpc_devices": rpc_devices}
