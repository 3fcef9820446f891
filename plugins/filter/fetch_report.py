# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: fetch_report
short_description: The gguf_fetch role's report line for one fetched file
version_added: 0.1.0
description:
  - >-
    C(<role> <dest>: <status>, <detail>) of one loop result of the role's M(dankfleet.llm.gguf_fetch) task - the
    detail is who verified it and the bytes hashed, or the bytes, attempts and rate of a download (and where a
    resume began), else the module's C(msg) - then what went to the trash and which directories were made.
options:
  _input:
    description: One item of the fetch task's C(results) (its C(_gguf_fetch_entry) is the manifest entry).
    type: dict
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Report each file
  ansible.builtin.debug:
    msg: "{{ item | dankfleet.llm.fetch_report }}"
  loop: "{{ fetched.results }}"
"""
RETURN = r"""
_value:
  description: One line.
  type: str
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.host.fetch_manifest import report_line
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def fetch_report(result):
    return call("fetch_report", report_line, result)


class FilterModule(object):
    def filters(self):
        return {"fetch_report": fetch_report}
