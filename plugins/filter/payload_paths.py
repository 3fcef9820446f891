# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: payload_paths
short_description: Where each payload file of the fetch manifest lives, by the role it plays
version_added: 0.1.0
description:
  - >-
    C({target|drafter|mmproj: path}), C(<dest_dir>/<file>) or C(<models_dir>/<name>/<file>) per manifest entry -
    the one payload layout (C(plugins/module_utils/plan/shape.py)) the C(gguf_fetch) role, the settle step and the plan
    use; a C(dest_dir) ending in C(/) gives one C(/).
  - >-
    For a role no entry declares, the path C(fallback) gives (the settle step's C(payload_paths)).
options:
  _input:
    description: The fetch manifest (C(gguf_fetch_manifest)'s entries).
    type: list
    elements: dict
    required: true
  models_dir:
    description: C(gguf_fetch_models_dir).
    type: str
    required: true
  fallback:
    description: role -> path for the roles the manifest does not declare.
    type: dict
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Where the payload lives
  ansible.builtin.debug:
    msg: "{{ gguf_fetch_manifest | dankfleet.llm.payload_paths(gguf_fetch_models_dir, dankfleet_settled.payload_paths) }}"
"""
RETURN = r"""
_value:
  description: role -> path.
  type: dict
"""

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import payload_paths as _paths
from ansible_collections.dankfleet.llm.plugins.plugin_utils.list_filter import call


def payload_paths(manifest, models_dir, fallback=None):
    return call("payload_paths", _paths, manifest, models_dir, fallback)


class FilterModule(object):
    def filters(self):
        return {"payload_paths": payload_paths}
