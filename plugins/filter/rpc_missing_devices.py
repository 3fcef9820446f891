# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: rpc_missing_devices
short_description: What a head's llama-server log says about its RPC devices, for the gate
version_added: 0.1.0
description:
  - Reads llama-server's C(using device RPCn (endpoint) (id) - N MiB free) lines (the latest load's) and returns
    an empty string when every endpoint of the C(--rpc) list is there, in order, with memory; otherwise what is
    missing or wrong.
  - A model-backed drafter's own device line (after C(loading draft model)) is the drafter's, not the target's.
options:
  _input:
    description: The log text (the journal of the current start).
    type: str
    required: true
  endpoints:
    description: The C(--rpc) list the head was started with.
    type: list
    elements: str
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Fail unless the head sees every worker device
  ansible.builtin.assert:
    that: (journal.stdout | dankfleet.llm.rpc_missing_devices(llama_server_rpc)) == ''
"""
RETURN = r"""
_value:
  description: C('') or the findings, joined by C(; ).
  type: str
"""

from ansible_collections.dankfleet.llm.plugins.plugin_utils.rpc_filter import call


def rpc_missing_devices(log, endpoints=None):
    return call("rpc_missing_devices", "missing_devices", log, endpoints or [])


class FilterModule(object):
    def filters(self):
        return {"rpc_missing_devices": rpc_missing_devices}
