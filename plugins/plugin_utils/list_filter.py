# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one wrapper of the filters that shape a role's lists (unit_states, runtime_units, restore_units,
fetch_entries, fetch_report, plan_fleet_summary): a missing key or a value of the wrong kind becomes an
AnsibleFilterError that names the filter and the input, never a traceback."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleFilterError


def call(name, fn, value, *args):
    """fn(value, *args); its refusal (a ValueError, a missing key, a value of the wrong kind) named after the filter."""
    try:
        return fn(value, *args)
    except KeyError as exc:
        raise AnsibleFilterError("dankfleet.llm.%s: %r has no key %s; nothing was changed" % (name, value, exc))
    except (ValueError, TypeError, AttributeError) as exc:
        raise AnsibleFilterError("dankfleet.llm.%s: %s (input %r); nothing was changed" % (name, exc, value))
