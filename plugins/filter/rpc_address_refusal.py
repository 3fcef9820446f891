# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: rpc_address_refusal
short_description: Why ggml-rpc-server may not bind to (or admit) an address, or an empty string
version_added: 0.1.0
description:
  - ggml-rpc-server has no authentication, so it binds only to one private IP -- RFC 1918, C(fc00::/7),
    C(100.64/10) or loopback. Returns C('') for such an address, otherwise the reason (C(0.0.0.0)/C(::) listen
    everywhere, a public address is reachable from the internet, a name could resolve to either).
options:
  _input:
    description: The address.
    type: str
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Refuse an open bind address
  ansible.builtin.assert:
    that: (llama_rpc_worker_address | dankfleet.llm.rpc_address_refusal) == ''
    fail_msg: "{{ llama_rpc_worker_address | dankfleet.llm.rpc_address_refusal }}"
"""
RETURN = r"""
_value:
  description: C('') or the reason.
  type: str
"""

from ansible_collections.dankfleet.llm.plugins.plugin_utils.rpc_filter import call


def rpc_address_refusal(addr):
    return call("rpc_address_refusal", "check_bind_address", addr)


class FilterModule(object):
    def filters(self):
        return {"rpc_address_refusal": rpc_address_refusal}
