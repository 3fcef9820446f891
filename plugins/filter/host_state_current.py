# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: host_state_current
short_description: Whether a path the host_state module read is already what a task would leave
version_added: 0.1.0
description:
  - True when the C(dankfleet.llm.host_state_info) entry of a path has the type O(state) and each of O(content) (by sha1),
    O(checksum), O(mode), O(owner), O(group) and O(src) that is given. Options left out are not compared.
  - An absent path, or an entry that is not there (C(none), C({})), is never current, so the task it guards runs.
  - The roles put it in the C(when) of their file, template and copy tasks (negated), so a no-change re-run skips
    them without a round trip; a task that would change something runs as it always did (its diff, validate, notify).
options:
  _input:
    description: One entry of a C(dankfleet.llm.host_state_info) result's C(paths).
    type: dict
    required: true
  state:
    description: C(file), C(directory) or C(link).
    type: str
    default: file
  content:
    description: The text the task would write (for a template, C(lookup('ansible.builtin.template', src))).
    type: str
  checksum:
    description: The sha1 the file must have (instead of O(content)).
    type: str
  mode:
    description: Permission bits, octal string (C("0640")) or integer.
    type: raw
  owner:
    description: Owner name or uid.
    type: str
  group:
    description: Group name or gid.
    type: str
  src:
    description: The target a link must point to.
    type: str
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Create the directory only when it is not there as wanted
  ansible.builtin.file:
    path: /etc/llama-server
    state: directory
    mode: "0755"
  when: not (__state.paths['/etc/llama-server'] | dankfleet.llm.host_state_current('directory', mode='0755', owner='root'))
"""
RETURN = r"""
_value:
  description: Whether the path is already as wanted.
  type: bool
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dankfleet.llm.plugins.module_utils.host.host_state import HostStateError, is_current


def host_state_current(entry, state='file', content=None, checksum=None, mode=None, owner=None, group=None, src=None):
    try:
        return is_current(entry, state=state, content=content, checksum=checksum, mode=mode, owner=owner,
                          group=group, src=src)
    except (HostStateError, TypeError, ValueError) as exc:
        raise AnsibleFilterError('dankfleet.llm.host_state_current: %s (state=%r, mode=%r); nothing was changed'
                                 % (exc, state, mode))


class FilterModule(object):
    def filters(self):
        return {'host_state_current': host_state_current}
