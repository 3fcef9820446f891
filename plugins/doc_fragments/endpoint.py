# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    """The llama-server endpoint a module talks to (module_utils/base/endpoint_client.Endpoint)."""

    DOCUMENTATION = r'''
options:
  url:
    description:
      - Base URL of the endpoint, C(http://) or C(https://). Credentials in it (C(user:password@)) are refused, not
        echoed; redirects are followed only under the collection's HTTP client policy (no other scheme, no link-local
        address, no move from a public host to a loopback or private one).
    type: str
    required: true
  api_key:
    description:
      - Bearer key when the endpoint runs with C(--api-key). Never logged (C(no_log)); one with surrounding whitespace
        (a trailing newline from a YAML C(|) block) or a control character is refused without being shown.
    type: str
'''
