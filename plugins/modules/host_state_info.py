#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: host_state_info
short_description: Read what a role converges - paths, users, groups, units, ports, commands - in one call
version_added: 0.1.0
description:
  - Read-only. One call returns the state of every path, user, group, systemd unit, TCP port and command a role
    converges, so the role can skip each task whose target is already as it wants it (the filter
    C(dankfleet.llm.host_state_current) says which) and a no-change re-run makes one
    host round trip instead of one per probe and per file.
  - Paths are read with C(lstat) (a symlink is reported as a link, with its target); a regular file up to
    O(checksum_max_bytes) gets a sha1 RV(paths.checksum), the algorithm of Ansible's own C(checksum).
  - The checksum is read to EOF without blocking and without following a link; a kernel file (C(/proc), C(/sys))
    that waits for data or holds more than O(checksum_max_bytes) whatever its size says gets C(null), never a hang.
  - Never changes anything; runs the same in check mode.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
  - dankfleet.llm.attributes.info_module
options:
  paths:
    description: Absolute paths to read. A relative one is refused.
    type: list
    elements: path
    default: []
  checksum_max_bytes:
    description: Regular files larger than this get RV(paths.checksum) C(null) (a multi-GB GGUF is not hashed here).
    type: int
    default: 16777216
  users:
    description: User names; each gets its passwd entry and every group it is in.
    type: list
    elements: str
    default: []
  groups:
    description: Group names.
    type: list
    elements: str
    default: []
  units:
    description:
      - Systemd units, read with C(systemctl show). A string is a unit of the system manager; a dict
        C({name, scope, user}) with C(scope=user) reads the manager of that user.
    type: list
    elements: raw
    default: []
  ports:
    description: TCP ports whose listeners to read (C(ss -Hltnp)).
    type: list
    elements: int
    default: []
  commands:
    description: Command names resolved on the module's C(PATH) (or absolute paths checked for being executable).
    type: list
    elements: str
    default: []
attributes:
  platform:
    platforms: linux
seealso:
  - module: ansible.builtin.stat
'''

EXAMPLES = r'''
- name: Read what the serve role converges, once
  dankfleet.llm.host_state_info:
    paths: [/etc/llama-server/llm.env, /etc/llama-server, /opt/llama.cpp/current]
    users: [llm]
    units: [llm.service]
    ports: [8080]
  register: __serve_state

- name: Write the env file (skipped when the host already has exactly this file)
  ansible.builtin.template:
    src: llama-server.env.j2
    dest: /etc/llama-server/llm.env
    owner: root
    group: llm
    mode: "0640"
  when: >-
    not (__serve_state.paths['/etc/llama-server/llm.env']
         | dankfleet.llm.host_state_current(content=lookup('ansible.builtin.template', 'llama-server.env.j2'),
                                            mode='0640', owner='root', group='llm'))
'''

RETURN = r'''
paths:
  description: One entry per asked path, keyed by the path as given.
  returned: always
  type: dict
  contains:
    exists:
      description: Whether the path exists (a dangling link exists).
      type: bool
    type:
      description: C(file), C(directory), C(link), C(other) or C(absent).
      type: str
    mode:
      description: Permission bits as four octal digits, for example C(0640).
      type: str
    owner:
      description: Owner name (the uid as a string when it has no name).
      type: str
    group:
      description: Group name (the gid as a string when it has no name).
      type: str
    uid:
      description: Owner uid.
      type: int
    gid:
      description: Group gid.
      type: int
    size:
      description: Size in bytes.
      type: int
    mtime:
      description: Modification time, seconds since the epoch.
      type: float
    checksum:
      description: sha1 of a regular file up to O(checksum_max_bytes), else C(null).
      type: str
    link_target:
      description: What a link points to (C(readlink)).
      type: str
    target_exists:
      description: Whether a link's target exists.
      type: bool
users:
  description: One entry per asked user.
  returned: always
  type: dict
  contains:
    exists:
      description: Whether the user exists.
      type: bool
    uid:
      description: uid.
      type: int
    gid:
      description: Primary gid.
      type: int
    group:
      description: Primary group name.
      type: str
    home:
      description: Home directory.
      type: str
    shell:
      description: Login shell.
      type: str
    groups:
      description: Every group the user is in, the primary one included, sorted.
      type: list
      elements: str
groups:
  description: One entry per asked group, C({exists, gid, members}).
  returned: always
  type: dict
units:
  description:
    - One entry per asked unit, keyed by its name (system) or C(<name>@<user>) (user scope).
    - C(exists) (systemd knows the unit), C(LoadState), C(ActiveState), C(SubState), C(UnitFileState),
      C(MainPID) and C(NRestarts) (integers), C(FragmentPath).
  returned: always
  type: dict
ports:
  description:
    - One entry per asked port, keyed by the port as a string, C({listening, holders, lines}); a holder is C({pid, name, units}).
    - A holder's C(units) are the systemd units on its C(/proc/<pid>/cgroup) paths, outermost first (C(system.slice),
      C(ollama.service)); C(null) when that file could not be read as cgroup text (the process is gone, or the file is
      not of the kernel's shape), an unknown unit, never a guess. The filter C(dankfleet.llm.port_holders) judges them.
  returned: always
  type: dict
commands:
  description: One entry per asked command, its absolute path or C(null).
  returned: always
  type: dict
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.host.host_state import (
    HostStateError, add_holder_units, command_state, group_state, parse_ports, parse_unit, path_state, unit_command, unit_spec,
    user_state)

ARGUMENT_SPEC = dict(
    paths=dict(type='list', elements='path', default=[]),
    checksum_max_bytes=dict(type='int', default=16777216),
    users=dict(type='list', elements='str', default=[]),
    groups=dict(type='list', elements='str', default=[]),
    units=dict(type='list', elements='raw', default=[]),
    ports=dict(type='list', elements='int', default=[]),
    commands=dict(type='list', elements='str', default=[]),
)


def read_units(module, units):
    result = {}
    for item in units:
        key, name, scope, user = unit_spec(item)
        uid = None
        if scope == 'user':
            state = user_state(user)
            if not state['exists']:
                result[key] = parse_unit('')
                continue
            uid = state['uid']
        rc, out, err = module.run_command(unit_command(name, scope, user, uid))
        result[key] = parse_unit(out if rc == 0 else '')
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    try:
        result = {
            'paths': dict((p, path_state(p, params['checksum_max_bytes'])) for p in params['paths']),
            'users': dict((u, user_state(u)) for u in params['users']),
            'groups': dict((g, group_state(g)) for g in params['groups']),
            'units': read_units(module, params['units']),
            'commands': dict((c, command_state(c)) for c in params['commands']),
            'ports': {},
        }
        if params['ports']:
            ss = module.get_bin_path('ss')
            if not ss:
                raise HostStateError('ports: ss (iproute2) is not on the host; install iproute2')
            rc, out, err = module.run_command([ss, '-Hltnp'])
            if rc != 0:
                raise HostStateError('ports: ss -Hltnp failed (%s)' % err.strip())
            result['ports'] = add_holder_units(parse_ports(out, params['ports']))
    except HostStateError as exc:
        module.fail_json(msg='dankfleet.llm.host_state_info: %s' % exc)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
