# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: port_holders
short_description: Who holds the serve port - this service, a runtime the retire stage stops, or something else
version_added: 0.1.0
description:
  - Sorts the holders of one port, as M(dankfleet.llm.host_state_info) read them (each with the systemd units on
    its cgroup path), into this service's (its pid is the unit's MainPID), handed over (it runs in one of
    O(handover_units), which the retire stage stops before the restart) and kept (anything else; a holder whose unit
    could not be read is kept).
  - The host's answer is read through a typed shape; one of the wrong shape is refused naming where, never guessed.
  - The serve role's port check (C(tasks_from=port_check)) refuses on RV(_value.refusal) and says RV(_value.note).
options:
  _input:
    description: The reading's C(ports) entry of the port, C({listening, holders, lines}).
    type: dict
    required: true
  main_pid:
    description: The service unit's MainPID (C(0) when it does not run).
    type: int
    required: true
  handover_units:
    description: The units whose processes may hold the port until the retire stage stops them.
    type: list
    elements: str
    required: true
  port:
    description: The port, for the messages.
    type: int
    required: true
  service:
    description: The service's name without C(.service), for the messages.
    type: str
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Refuse a port held by something that is neither this service nor handed over
  vars:
    _port: >-
      {{ __state.ports['8080'] | dankfleet.llm.port_holders(__state.units['llama-server.service'].MainPID,
                                                             ['ollama.service'], 8080, 'llama-server') }}
  ansible.builtin.assert:
    that: _port.kept | length == 0
    fail_msg: "{{ _port.refusal }}"
    success_msg: "{{ _port.note }}"
"""
RETURN = r"""
_value:
  description: The judgement.
  type: dict
  contains:
    kept:
      description:
        - >-
          The holders neither this service nor handed over, each C({pid, name, units}) (C(units) null: unknown);
          a real run refuses on any.
      type: list
      elements: dict
    handed:
      description: The holders that run in a handover unit, each C({pid, name, units}).
      type: list
      elements: dict
    free:
      description: Whether nothing but this service holds the port.
      type: bool
    unnamed:
      description: Whether ss shows a listener but no process (the connection cannot read other users' /proc/<pid>/fd).
      type: bool
    lines:
      description: What ss printed for the port, control characters escaped.
      type: str
    refusal:
      description: The failure message naming the cause and the fix; empty when nothing is kept.
      type: str
    note:
      description: What a passing run (or a check run that would refuse) says.
      type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dankfleet.llm.plugins.module_utils.serve.port_holders import PortHoldersError, judge


def port_holders(port_entry, main_pid, handover_units, port, service):
    try:
        return judge(port_entry, main_pid, handover_units, port, service)
    except PortHoldersError as exc:
        raise AnsibleFilterError('dankfleet.llm.port_holders: %s; nothing was changed' % exc)


class FilterModule(object):
    def filters(self):
        return {'port_holders': port_holders}
