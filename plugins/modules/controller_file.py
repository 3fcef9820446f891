#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: controller_file
short_description: Write a text file on the controller, without a module run
version_added: 0.1.0
description:
  - Writes O(content) to O(dest) on the controller, in the action plugin's own process (no connection, no
    module, no temp directory), which is all a report for the play's caller needs; C(ansible.builtin.copy)
    delegated to localhost runs a stat and a copy module for it on every run.
  - Atomic (a temp file beside O(dest), then a rename); unchanged, and not written, when O(dest) already has
    exactly this content and O(mode). The directory must exist.
  - Whatever host the task runs for, the file is written on the controller.
author:
  - dankfleet engineers (@dankfleet)
options:
  dest:
    description: Absolute path of the file on the controller.
    type: path
    required: true
  content:
    description: The text to write (UTF-8).
    type: str
    required: true
  mode:
    description: Permission bits, an octal string (C("0644")) or an integer.
    type: raw
    default: "0644"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
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
    details: Says whether it would write, and writes nothing.
  diff_mode:
    support: full
  platform:
    platforms: posix
seealso:
  - module: ansible.builtin.copy
'''

EXAMPLES = r'''
- name: The endpoint, written for the caller
  dankfleet.llm.controller_file:
    dest: "{{ dankfleet_report_dir }}/{{ inventory_hostname }}.json"
    content: "{{ {'host': inventory_hostname, 'url': url} | to_nice_json }}"
    mode: "0644"
'''

RETURN = r'''
dest:
  description: The file written (or found current).
  returned: success
  type: str
  sample: /work/repo/.lab/report/dankfleet-lab.json
'''
