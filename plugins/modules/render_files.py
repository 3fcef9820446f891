#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: render_files
short_description: Make directories and render, compare, validate and write files in one round trip
version_added: 0.1.0
description:
  - The roles' one way to write the files a service reads. The action renders every O(files[].src) template
    (or takes O(files[].content)) on the controller, like C(ansible.builtin.template), then makes ONE module
    run on the host that compares each file (content, mode, owner, group) and then, in the order given,
    validates each file that would change on a private copy named like it (O(files[].validate)) and writes it.
    A refused file fails the task and stops the set there; the files before it stay written (a later file's
    validate may need them, like a unit's C(ExecStart)), nothing after it is.
  - O(directories) are made first, in the same run - a missing one (and each missing directory above it, like
    C(ansible.builtin.file)) with its O(directories[].mode), O(directories[].owner) and O(directories[].group), an
    existing one brought to them - so a role's files and the directories they go in are one task.
  - Each file is written atomically by the collection's file layer (C(module_utils/base/regular_file.py)) - a new
    C(O_EXCL) temporary beside it, fsynced, renamed over it; no link is followed in a directory another user can
    write - with O(files[].owner), O(files[].group) and O(files[].mode).
  - With O(known), a C(dankfleet.llm.host_state) result's C(paths) read earlier in the play, the files and
    directories it shows already as wanted are not sent, and when that is every file there is no round trip at all (a no-change
    re-run costs nothing on the host).
  - Returns per file whether it changed, and for an env file (O(files[].compare=values)) whether its values
    changed - a change to its comments alone is written but RV(values_changed) stays false, so a restart handler
    notified through C(changed_when) on it does not run.
author:
  - dankfleet engineers (@dankfleet)
options:
  files:
    description: The files, processed in this order (after O(directories)).
    type: list
    elements: dict
    default: []
    suboptions:
      dest:
        description:
          - Absolute path on the host. Its directory must exist or be one of O(directories).
          - C(..) is refused; C(/d/./a.env) and C(/d//a.env) are C(/d/a.env), so each file is given once however it
            is spelled.
        type: path
        required: true
      src:
        description:
          - A template, found like C(ansible.builtin.template)'s (the role's C(templates/) first), rendered on the
            controller with the task's variables. With O(files[].template=false) a file copied as it is (the role's
            C(files/) first). Exactly one of O(files[].src) and O(files[].content).
        type: str
      content:
        description: The text itself, instead of O(files[].src).
        type: str
      template:
        description: Whether O(files[].src) is a Jinja template (C(true)) or a file copied as it is (C(false)).
        type: bool
        default: true
      owner:
        description: Owner name or uid (0 to 4294967294); left as it is when not given.
        type: str
      group:
        description: Group name or gid (0 to 4294967294); left as it is when not given.
        type: str
      mode:
        description: Permission bits, an octal string (C("0640")) or an integer; C(0644) for a new file when not given.
        type: raw
      validate:
        description:
          - A command run on a private copy of a file that would change, its path in place of C(%s), like
            C(ansible.builtin.template)'s C(validate); a non-zero exit refuses the file. Not run in check mode.
          - C(%s) must appear exactly once; a literal C(%) is written C(%%), and any other C(%) is refused before
            anything is written (Python's C(%) formatting, which C(ansible.builtin.template) uses, raises on it).
        type: str
      compare:
        description:
          - C(bytes) (every change is a change of values) or C(values) (an env file - C(KEY=VALUE) as systemd's
            C(EnvironmentFile=) reads it - whose comments, blank lines and quoting are not values).
        type: str
        choices: [bytes, values]
        default: bytes
      item:
        description:
          - A value the template of this file reads as C(item), as in a loop - one template rendered into several
            files in one task (one unit per device). Not sent to the host.
        type: raw
  directories:
    description:
      - Directories made before the files, in this order. A directory is no change of values (RV(values_changed)).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path on the host.
        type: path
        required: true
      owner:
        description: Owner name or uid; left as it is when not given (a new directory is then the remote user's).
        type: str
      group:
        description: Group name or gid; left as it is when not given.
        type: str
      mode:
        description: Permission bits, an octal string (C("0755")) or an integer; C(0755) for a new one when not given.
        type: raw
  known:
    description:
      - A C(dankfleet.llm.host_state) result's C(paths), read earlier in the play. Files whose entry there already
        has this content (sha1), mode, owner and group, and directories whose entry is a directory with this mode,
        owner and group, are not sent to the host. Leave it out when the files may
        have changed since that read.
    type: dict
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Compares and reports per file what it would change; writes and validates nothing.
  diff_mode:
    support: full
  platform:
    platforms: posix
seealso:
  - module: ansible.builtin.template
  - module: dankfleet.llm.host_state_info
'''

EXAMPLES = r'''
- name: Env file, launcher and unit (a change of values restarts the service)
  dankfleet.llm.render_files:
    known: "{{ __state.paths }}"
    files:
      - src: llama-server.env.j2
        dest: /etc/llama-server/llm.env
        owner: root
        group: llm
        mode: "0640"
        validate: python3 /usr/local/libexec/llama-server/llama_env_check.py %s
        compare: values
      - src: llama-server.service.j2
        dest: /etc/systemd/system/llm.service
        owner: root
        group: root
        mode: "0644"
  register: __files
  changed_when: __files.values_changed
  notify: llama_server restart

- name: A directory and the file in it, and one unit per device from one template (item), in one round trip
  dankfleet.llm.render_files:
    directories:
      - {path: /etc/nftables.d, owner: root, group: root, mode: "0755"}
    files:
      - {src: allow.nft.j2, dest: /etc/nftables.d/allow.nft, owner: root, group: root, mode: "0644"}
      - {src: rpc.service.j2, dest: /etc/systemd/system/rpc-50052.service, item: {device: Vulkan0, port: 50052}}
      - {src: rpc.service.j2, dest: /etc/systemd/system/rpc-50053.service, item: {device: Vulkan1, port: 50053}}
'''

RETURN = r'''
changed:
  description: Whether any file was written (or would be, in check mode).
  returned: always
  type: bool
values_changed:
  description: Whether any file changed what its reader reads (for O(files[].compare=bytes), any change).
  returned: always
  type: bool
files:
  description: Per O(files[].dest), what was found.
  returned: always
  type: dict
  contains:
    changed:
      description: Whether this file was written (or would be).
      type: bool
    values_changed:
      description: Whether its values changed (O(files[].compare=values)); otherwise the same as RV(files.changed).
      type: bool
    reasons:
      description: What differed - C(absent), C(content), C(mode), C(owner), C(group), C(not a regular file).
      type: list
      elements: str
    checksum:
      description: The sha1 of the rendered content.
      type: str
  sample: {"/etc/llama-server/llm.env": {"changed": true, "values_changed": false, "reasons": ["content"],
           "checksum": "5e1c309dae7f45e0f39b1bf3ac3cd9db12e7d689"}}
directories:
  description: Per O(directories[].path), what was found.
  returned: always
  type: dict
  contains:
    changed:
      description: Whether this directory was made or changed (or would be).
      type: bool
    reasons:
      description: What differed - C(absent), C(mode), C(owner), C(group).
      type: list
      elements: str
  sample: {"/etc/nftables.d": {"changed": true, "reasons": ["absent"]}}
round_trips:
  description: Host round trips made, 0 when O(known) showed every file and directory current.
  returned: always
  type: int
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.host.render_files import ARGUMENT_SPEC, RenderError, converge


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )

    def run(command):
        return module.run_command(command)

    try:
        result = converge(module.params['files'], check_mode=module.check_mode, want_diff=module._diff, run=run,
                          directories=module.params['directories'])
    except RenderError as exc:
        module.fail_json(msg='dankfleet.llm.render_files: %s' % exc)
    except OSError as exc:  # the file layer's refusals are RenderErrors; this is the host saying no (EIO, ENOSPC)
        module.fail_json(msg='dankfleet.llm.render_files: %s' % RenderError(str(exc)))
    result['round_trips'] = 1
    module.exit_json(**result)


if __name__ == '__main__':
    main()
