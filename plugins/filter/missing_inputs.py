# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: missing_inputs
short_description: The inputs a host_state reading shows missing
version_added: 0.1.0
description:
  - The entries (C({what, path, fix})) whose path the M(dankfleet.llm.host_state_info) reading shows absent (an
    empty or relative path is never read), or, for the C(binary) entry, not executable (a link whose target is
    gone, a file with no x bit); each with C(refusal) (what a real run says) and C(note) (what a check run says).
options:
  _input:
    description: The inputs, each C({what, path, fix}).
    type: list
    elements: dict
    required: true
  paths:
    description: The reading's C(paths) (path -> its entry).
    type: dict
    required: true
  binary:
    description: The C(what) of the entry that must also be executable.
    type: str
    default: llama-server binary
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Refuse a missing binary or payload
  ansible.builtin.assert:
    that: _llama_server_inputs | dankfleet.llm.missing_inputs(_llama_server_paths_now) | length == 0
"""
RETURN = r"""
_value:
  description: The missing inputs, in order, each with C(refusal) and C(note) added.
  type: list
  elements: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.host.host_state import missing_inputs as _missing
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def missing_inputs(inputs, paths, binary="llama-server binary"):
    return call("missing_inputs", _missing, inputs, paths, binary)


class FilterModule(object):
    def filters(self):
        return {"missing_inputs": missing_inputs}
