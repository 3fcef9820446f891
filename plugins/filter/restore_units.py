# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: restore_units
short_description: The units a runtime_retire MANIFEST recorded, each marked to start when it ran before the retire
version_added: 0.1.0
description:
  - >-
    The C(units) that M(dankfleet.llm.trash_files) returns for a restore, as the internal C(_common) role's
    C(tasks_from: units) takes them; C(start) is true for a unit whose recorded C(active_state) is one of
    O(running_states), when O(start) is true.
options:
  _input:
    description: The C(units) of a C(trash_files) restore result.
    type: list
    elements: dict
    required: true
  start:
    description: Whether the restore starts units at all (C(runtime_retire_restore_start)).
    type: bool
    required: true
  running_states:
    description: The C(ActiveState) values in which a unit ran.
    type: list
    elements: str
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: The units to start again
  ansible.builtin.set_fact:
    units: "{{ restored.units | dankfleet.llm.restore_units(true, ['active', 'activating', 'reloading']) }}"
"""
RETURN = r"""
_value:
  description: C({name, scope, user, start}) per recorded unit.
  type: list
  elements: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.host.systemd_units import restore_units as _restore_units
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def restore_units(units, start, running_states):
    return call("restore_units", _restore_units, units, start, running_states)


class FilterModule(object):
    def filters(self):
        return {"restore_units": restore_units}
