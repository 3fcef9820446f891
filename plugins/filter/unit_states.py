# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: unit_states
short_description: One state record per systemd unit from the results of ansible.builtin.systemd_service reads
version_added: 0.1.0
description:
  - >-
    The loop results of C(ansible.builtin.systemd_service) tasks with no C(state) (each item a unit C({name, scope,
    user}), each C(status) what C(systemctl show) said) as one record per unit, as the internal C(_common) role's
    C(tasks_from: units) publishes them in C(_common_units_status) and C(runtime_retire) writes them into a MANIFEST.
  - >-
    A read that failed (a user without a running manager) has no C(status); its states read C(unknown).
options:
  _input:
    description: The C(results) of the reads, system and user units together.
    type: list
    elements: dict
    required: true
  running_states:
    description: The C(ActiveState) values in which a unit has (or may have) processes.
    type: list
    elements: str
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Keep each unit's state
  ansible.builtin.set_fact:
    status: "{{ __reads.results | dankfleet.llm.unit_states(['active', 'activating', 'reloading']) }}"
"""
RETURN = r"""
_value:
  description: >-
    C({unit, scope, user, load_state, active_state, unit_file_state, sub_state, running}) per result, in order.
  type: list
  elements: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.host.systemd_units import unit_states as _unit_states
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def unit_states(results, running_states):
    return call("unit_states", _unit_states, results, running_states)


class FilterModule(object):
    def filters(self):
        return {"unit_states": unit_states}
