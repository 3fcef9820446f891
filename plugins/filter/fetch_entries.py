# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: fetch_entries
short_description: The gguf_fetch manifest's entries with where each file lands
version_added: 0.1.0
description:
  - Each entry of C(gguf_fetch_manifest) with C(dest_dir) (its own, else C(<models_dir>/<name>); an empty one
    counts as none) and C(dest) (C(<dest_dir>/<file>)) added - the C(gguf_fetch) role's layout.
options:
  _input:
    description: C(gguf_fetch_manifest).
    type: list
    elements: dict
    required: true
  models_dir:
    description: C(gguf_fetch_models_dir).
    type: str
    required: true
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Where each file lands
  ansible.builtin.debug:
    msg: "{{ gguf_fetch_manifest | dankfleet.llm.fetch_entries(gguf_fetch_models_dir) | map(attribute='dest') }}"
"""
RETURN = r"""
_value:
  description: The entries, in order, each with C(dest_dir) and C(dest).
  type: list
  elements: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.host.fetch_manifest import manifest_entries
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def fetch_entries(manifest, models_dir):
    return call("fetch_entries", manifest_entries, manifest, models_dir)


class FilterModule(object):
    def filters(self):
        return {"fetch_entries": fetch_entries}
