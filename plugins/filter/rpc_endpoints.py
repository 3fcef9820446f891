# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: rpc_endpoints
short_description: The head's llama.cpp C(--rpc) list from the llm_rpc_workers group
version_added: 0.1.0
description:
  - One C(address:port) per worker device, workers in group order and each worker's
    C(llama_rpc_worker_devices) in list order -- the order llama.cpp names them C(RPC0), C(RPC1), ...
  - Each worker's C(dankfleet_private_address) must be one private IP (RFC 1918, C(fc00::/7), C(100.64/10) or
    loopback); C(0.0.0.0), C(::) and public addresses are refused with the reason (ggml-rpc-server has no
    authentication).
extends_documentation_fragment:
  - dankfleet.llm.rpc_workers
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: The head's --rpc list
  ansible.builtin.set_fact:
    llama_server_rpc: "{{ groups['llm_rpc_workers'] | default([]) | map('extract', hostvars) | dankfleet.llm.rpc_endpoints }}"
"""
RETURN = r"""
_value:
  description: C(address:port) strings (IPv6 in brackets).
  type: list
  elements: str
"""

from ansible_collections.dankfleet.llm.plugins.plugin_utils.rpc_filter import call


def rpc_endpoints(hosts):
    return call("rpc_endpoints", "rpc_endpoints", call("rpc_endpoints", "workers_from_hostvars", hosts))


class FilterModule(object):
    def filters(self):
        return {"rpc_endpoints": rpc_endpoints}
