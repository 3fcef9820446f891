# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type
DOCUMENTATION = r"""
name: llama_env_line
short_description: One variable of the llama_server env file - its reasons as comments, then NAME=VALUE quoted
version_added: 0.1.0
description:
  - >-
    The ONE writer of the env file's lines (C(plugins/module_utils/plan/shape.py)): the reason and the operator's comment
    for the name as comment lines (wrapped at 94 columns), then C(NAME=VALUE) with the value quoted so that systemd's
    C(EnvironmentFile=) and bash both read it back unchanged - bare when it can be, else single-quoted, else
    double-quoted with C(\\ " ` $) escaped. C(dankfleet.llm)'s env reader (C(plugins/module_utils/base/llama_env.py))
    gives every value back as written; a unit test proves the round trip over generated text.
  - >-
    A value with a control character (a newline would add a line of its own) fails the task naming the variable.
options:
  _input:
    description: The environment variable's name (C([A-Za-z_][A-Za-z0-9_]*)).
    type: str
    required: true
  value:
    description: The value; written as text.
    type: raw
    required: true
  reasons:
    description: Name -> the reason written above it (the role's C(_llama_server_env_reasons)).
    type: dict
    default: {}
  comments:
    description: Name -> the operator's comment written below the reason (C(llama_server_env_comments)).
    type: dict
    default: {}
  switch:
    description: C(onoff) writes the value as C(on)/C(off) (true, on, yes, 1 are on); C(auto) also keeps C(auto).
    type: str
    choices: ['', onoff, auto]
    default: ''
author:
  - dankfleet engineers (@dankfleet)
"""
EXAMPLES = r"""
- name: Write one variable of the env file
  ansible.builtin.debug:
    msg: "{{ 'ALIAS' | dankfleet.llm.llama_env_line(\"frank's model\", {'ALIAS': 'The model id /v1/models shows.'}) }}"
    # "# The model id /v1/models shows.\nALIAS=\"frank's model\"\n"
"""
RETURN = r"""
_value:
  description: The comment lines and the C(NAME=VALUE) line, each ending in a newline.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import env_line, onoff


def llama_env_line(name, value, reasons=None, comments=None, switch=''):
    if switch not in ('', 'onoff', 'auto'):
        raise AnsibleFilterError("dankfleet.llm.llama_env_line: switch must be '', onoff or auto, got %r" % (switch,))
    if switch:
        value = onoff(value, allow_auto=switch == 'auto')
    try:
        return env_line(name, value, reasons=reasons, comments=comments)
    except ValueError as exc:
        raise AnsibleFilterError("dankfleet.llm.llama_env_line: %s: %s; fix the role variable that sets it" % (name, exc))


class FilterModule(object):
    def filters(self):
        return {"llama_env_line": llama_env_line}
