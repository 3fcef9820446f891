# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llm_plan role's fleet summary: one line for the play, then one verdict per host.

Plain Python (no Ansible import); the filter ``plan_fleet_summary`` is thin over it. A host's verdict comes
from the ``llm_plan`` it published (none when it stopped before the plan): planned (its capacity summary),
cannot plan yet, plans after the fetch, or stopped before the plan.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type


def _row(host, plan):
    if plan.get("planned", False):
        return plan["capacity"]["summary"].strip()
    if len(plan.get("cannot_plan", "")) > 0:
        return "%s: cannot plan: %s" % (host, plan["cannot_plan"].strip())
    if "payload_present" in plan and not plan["payload_present"]:
        return "%s: plans after the fetch" % host
    return "%s: stopped before the plan (see its failed task above)" % host


def fleet_summary(hosts, plans):
    """['fleet: N host(s), F fit, D do not fit, U not planned', one row per host]; plans maps a host to the
    llm_plan it published (a host that published none is missing from it)."""
    planned = [plans[h] for h in hosts if (plans.get(h) or {}).get("planned")]
    fit = len([p for p in planned if p.get("fits")])
    head = "fleet: %d host(s), %d fit, %d do not fit, %d not planned" % (
        len(hosts), fit, len(planned) - fit, len(hosts) - len(planned))
    return [head] + [_row(h, plans.get(h) or {}) for h in hosts]
