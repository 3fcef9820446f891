#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: staged_shape
short_description: Record a staged serve shape on the host, check it before the switch, mark it switched
version_added: 0.1.0
description:
  - The deploy's two halves meet in one record on the host (O(path)). C(--tags stage) builds or adopts, fetches,
    plans and renders the shape while the predecessor still serves, then records it (O(state=staged)) - the release
    the link points at, each payload file (declared size and sha256, its inode, size, mtime and ctime) and the
    sha256 of every rendered file.
  - C(--tags switch) reads the record back (O(state=checked)) and fails, changing nothing, when nothing is staged or
    the host no longer matches it (another release linked, a payload file replaced or declared differently, a
    rendered file edited); the message names each difference and the fix (run C(--tags stage) again).
  - After a passing gate the record is marked switched (O(state=switched)), so a second switch restarts nothing;
    the record carries how long each half took.
  - The record is rewritten only when what it records changed. Check mode reads and reports, never writes.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  path:
    description: The record, an absolute path (the serve role's C(<state_dir>/staged.json)).
    type: path
    required: true
  state:
    description:
      - V(staged) - record what is staged on the host now (refused when a part is missing).
      - V(checked) - read the record back and refuse when there is none or the host does not match it (read-only).
      - V(switched) - mark the record switched (nothing to do when there is none or it is marked already).
      - V(read) - the record as it is, compared with nothing (RV(pending) says whether the switch has yet to start it).
    type: str
    choices: [staged, checked, switched, read]
    required: true
  service:
    description: The serve unit's name (C(llama_server_service_name)). Required for V(staged) and V(checked).
    type: str
  release_link:
    description: The release link the unit runs (C(<prefix>/current)). Required for V(staged) and V(checked).
    type: path
  manifest:
    description: The payload manifest (C(gguf_fetch_manifest)'s entries - C(role), C(file), C(size), C(sha256)).
    type: list
    elements: dict
    default: []
  paths:
    description: Where each role's file is loaded from (C(role) -> absolute path, the plan's C(payload_paths)).
    type: dict
    default: {}
  files:
    description: The rendered files the unit reads (env file, launcher, unit), absolute paths.
    type: list
    elements: path
    default: []
  started:
    description: When the run began (seconds since the epoch) - the half's duration is recorded from it.
    type: float
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: linux
seealso:
  - module: dankfleet.llm.render_files
'''

EXAMPLES = r'''
- name: Record the staged shape
  dankfleet.llm.staged_shape:
    path: /var/lib/llama-server/llm/staged.json
    state: staged
    service: llm
    release_link: /opt/llama.cpp/current
    manifest: "{{ gguf_fetch_manifest }}"
    paths: "{{ llm_plan.payload_paths }}"
    files: [/etc/llama-server/llm.env, /usr/local/libexec/llama-server/serve-llm.sh,
            /etc/systemd/system/llm.service]

- name: Refuse the switch when nothing is staged or the host does not match the record
  dankfleet.llm.staged_shape:
    path: /var/lib/llama-server/llm/staged.json
    state: checked
    service: llm
    release_link: /opt/llama.cpp/current
    manifest: "{{ gguf_fetch_manifest }}"
    paths: "{{ llm_plan.payload_paths }}"
    files: [/etc/llama-server/llm.env]
'''

RETURN = r'''
record:
  description:
    - The record as it is (or, for V(staged), as it is written or would be) - C(version), C(service), C(release)
      (C(link), C(target)), C(payload) (role -> C(path), C(size), C(sha256), C(inode), C(mtime_ns), C(ctime_ns)),
      C(files) (path -> sha256), C(staged_at), C(stage_seconds), C(switched_at), C(switch_seconds).
  returned: always
  type: dict
pending:
  description: V(checked), V(read) - the staged shape is not switched to yet (the switch restarts the unit onto it).
  returned: when state is checked or read
  type: bool
missing:
  description: V(staged) in check mode - what the stage has not made yet (the build and fetch do not run in check mode).
  returned: when state is staged
  type: list
  elements: str
differences:
  description: V(checked) - what does not match the host, one line each (the task fails when there is one).
  returned: when state is checked
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import staged_shape as ss
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import FileRefused
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import ShapeError, printable


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", required=True, choices=["staged", "checked", "switched", "read"]),
            service=dict(type="str"),
            release_link=dict(type="path"),
            manifest=dict(type="list", elements="dict", default=[]),
            paths=dict(type="dict", default={}),
            files=dict(type="list", elements="path", default=[]),
            started=dict(type="float"),
        ),
        required_if=[("state", "staged", ("service", "release_link")), ("state", "checked", ("service", "release_link"))],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "switched":
            module.exit_json(**ss.mark_switched(p["path"], p["started"], module.check_mode))
        if p["state"] == "read":
            module.exit_json(**ss.read(p["path"]))
        args = (p["path"], p["service"], p["release_link"], p["manifest"], p["paths"], p["files"])
        if p["state"] == "staged":
            module.exit_json(**ss.stage(*args, started=p["started"], check_mode=module.check_mode))
        module.exit_json(changed=False, differences=[], **ss.check(*args))
    except ss.StagedError as exc:
        module.fail_json(msg=printable(str(exc)), changed=False, differences=exc.differences, record={})
    except (ShapeError, FileRefused) as exc:
        module.fail_json(msg=printable(str(exc)), changed=False, record={})


if __name__ == "__main__":
    main()
