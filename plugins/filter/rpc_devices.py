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
options:
  _input:
    description: The workers' hostvars, C(groups['llm_rpc_workers'] | map('extract', hostvars)).
    type: list
    elements: dict
    required: true
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

from ansible.errors import AnsibleFilterError

try:
    from ansible_collections.dankfleet.llm.plugins.module_utils import rpc_fleet
except ImportError:  # pragma: no cover - only when the collection is not on the path
    rpc_fleet = None

MIB = 1024 * 1024


def _workers(hosts):
    """Worker dicts from hostvars (map('extract', hostvars) of the llm_rpc_workers group)."""
    out = []
    for hv in hosts or []:
        if not hasattr(hv, "get"):
            raise AnsibleFilterError("expected the workers' hostvars (groups['llm_rpc_workers'] | map('extract', hostvars)), "
                                     "got %r" % (hv,))
        facts = hv.get("ansible_facts") or {}
        gpus = hv.get("gpu_facts")
        backend = hv.get("llama_rpc_worker_backend") or "cpu"
        memtotal = facts.get("memtotal_mb") or hv.get("ansible_memtotal_mb")
        if backend == "cpu" and memtotal:
            gpus = [{"name": "CPU", "vram_total_bytes": int(memtotal) * MIB}]
        out.append({"host": hv.get("inventory_hostname"), "address": hv.get("dankfleet_private_address"),
                    "devices": hv.get("llama_rpc_worker_devices"), "backend": backend, "gpus": gpus})
    return out


def _call(name, fn, *args):
    if rpc_fleet is None:
        raise AnsibleFilterError("dankfleet.llm.%s: plugins/module_utils/rpc_fleet.py could not be imported" % name)
    try:
        return fn(*args)
    except rpc_fleet.RpcFleetError as exc:
        raise AnsibleFilterError("dankfleet.llm.%s: %s; nothing was changed" % (name, exc))


def rpc_devices(hosts, local_gpus=None):
    return _call("rpc_devices", rpc_fleet.rpc_devices, _workers(hosts), local_gpus)


class FilterModule(object):
    def filters(self):
        return {"rpc_devices": rpc_devices}
