# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: runtime_units
short_description: The systemd units of one runtime_retire_runtimes entry, its quadlets' services included
version_added: 0.1.0
description:
  - The entry's C(units) (scope C(system) unless given), then for each of its C(quadlets) the service podman's
    generator makes from it (podman-systemd.unit(5) - C(x.container) and C(x.kube) give C(x.service), C(x.pod)
    gives C(x-pod.service), likewise C(.network), C(.volume), C(.build), C(.image)).
  - A quadlet of another type is refused by name.
options:
  _input:
    description: One entry of C(runtime_retire_runtimes).
    type: dict
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: The units the retire stops
  ansible.builtin.set_fact:
    units: "{{ runtime | dankfleet.llm.runtime_units }}"
"""
RETURN = r"""
_value:
  description: >-
    C({name, scope, user}) per unit, as the internal C(_common) role's C(tasks_from: units) takes them.
  type: list
  elements: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.host.systemd_units import runtime_units as _runtime_units
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def runtime_units(runtime):
    return call("runtime_units", _runtime_units, runtime)


class FilterModule(object):
    def filters(self):
        return {"runtime_units": runtime_units}
