# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


class ModuleDocFragment(object):
    """The attributes every module declares (community.general's doc_fragments/attributes.py shape)."""

    # Every module: says its support (full, partial with details, none) for both
    DOCUMENTATION = r'''
options: {}
attributes:
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: Returns details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
'''

    # Every module: says which platforms (platforms: linux or posix)
    PLATFORM = r'''
options: {}
attributes:
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
'''

    # A read-only module (*_info), together with DOCUMENTATION
    INFO_MODULE = r'''
options: {}
attributes:
  check_mode:
    support: full
    details:
      - This action does not modify state.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
'''
