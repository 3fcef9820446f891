#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: payload_adopt_info
short_description: Propose the size and sha256 of payload files already on the host
version_added: 0.1.0
description:
  - Read-only. For each manifest entry whose C(size) is 0 or whose C(sha256) is not 64 hex digits (a C(FILL-)
    placeholder) and whose file is already on the host, the file's own size and sha256 are read - by one sha256
    pass, or from a C(dankfleet.llm.gguf_fetch) stamp that vouches for this exact file (inode, size, mtime,
    ctime) - and returned as a proposal.
  - A proposal is never adopted silently - the play's checklist shows it, and the operator confirms it against
    the Hub's size and LFS oid before writing it into the inventory. The deploy refuses the placeholder until then.
  - An entry whose other value is declared must agree with the file (a file shorter than its declared size is
    not the declared file), or nothing is proposed and RV(findings.problem) says why.
  - Complete entries and files not on the host are not read (the fetch verifies or downloads them).
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
  - dankfleet.llm.attributes.info_module
options:
  manifest:
    description:
      - The payload manifest (C(gguf_fetch_manifest)'s entries, each C(role), C(file), C(url), C(size), C(sha256)).
    type: list
    elements: dict
    required: true
  paths:
    description:
      - Where each role's file is loaded from (C(role) -> absolute path, the plan's C(payload_paths)). An entry
        whose role has no path is not looked at.
    type: dict
    required: true
  placeholders:
    description:
      - The settle step's placeholders (C(dankfleet.llm.settle)'s C(placeholders)); RV(checklist) is their
        checklist with what adoption proves replaced by its proposals.
    type: list
    elements: dict
    default: []
attributes:
  platform:
    platforms: linux
seealso:
  - module: dankfleet.llm.gguf_fetch
'''

EXAMPLES = r'''
- name: Propose the size and sha256 of payload files already on the host
  dankfleet.llm.payload_adopt_info:
    manifest:
      - role: target
        file: Qwen3.8-27B-Uncensored-Q8_0.gguf
        url: https://huggingface.co/orcarouter/Qwen3.8-27B-Uncensored-GGUF/resolve/main/Qwen3.8-27B-Uncensored-Q8_0.gguf
        size: 0
        sha256: FILL-the-Hub-LFS-oid
    paths:
      target: /var/lib/llm/models/qwen3-8b/Qwen3-8B-Q4_K_M.gguf
    placeholders: "{{ dankfleet_settled.placeholders }}"
  register: __payload_adopt
'''

RETURN = r'''
findings:
  description: One per entry, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    role:
      description: The entry's role (target, drafter, mmproj).
      type: str
    file:
      description: The entry's file name.
      type: str
    path:
      description: Where it was looked for.
      type: str
    url:
      description: The entry's url (the checklist matches the inventory's entry by it).
      type: str
    status:
      description:
        - C(proposed) (RV(findings.size), RV(findings.sha256), RV(findings.by)), C(absent) (the fetch downloads
          it), C(complete) (nothing to fill), C(mismatch) or C(unreadable) (RV(findings.problem) says why).
      type: str
    size:
      description: The file's size in bytes.
      type: int
      returned: when status is proposed
    sha256:
      description: The file's sha256, 64 lowercase hex digits.
      type: str
      returned: when status is proposed
    by:
      description: C(sha256) (one pass over the file) or C(stamp) (a gguf_fetch stamp vouched for it).
      type: str
      returned: when status is proposed
    problem:
      description: Why nothing is proposed.
      type: str
      returned: when status is mismatch or unreadable
checklist:
  description:
    - The host's checklist lines - the settle step's for every placeholder adoption cannot prove, then one per
      proposal (the variable and entry to edit, the values to confirm against the Hub and paste) and one per file
      that is not adopted (and why).
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.host.payload_adopt import checklist, propose
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import ShapeError, printable


def main():
    module = AnsibleModule(
        argument_spec=dict(
            manifest=dict(type="list", elements="dict", required=True),
            paths=dict(type="dict", required=True),
            placeholders=dict(type="list", elements="dict", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        findings = propose(p["manifest"], p["paths"])
        lines = checklist(p["placeholders"], findings)
    except ShapeError as exc:
        module.fail_json(msg=printable(str(exc)), changed=False)
    module.exit_json(changed=False, findings=findings, checklist=lines)


if __name__ == "__main__":
    main()
