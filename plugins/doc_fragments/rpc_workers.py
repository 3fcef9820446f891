# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    """The input of the filters over the llama.cpp RPC workers (plugin_utils/rpc_filter.call)."""

    DOCUMENTATION = r'''
options:
  _input:
    description: The workers' hostvars, C(groups['llm_rpc_workers'] | map('extract', hostvars)).
    type: list
    elements: dict
    required: true
'''
