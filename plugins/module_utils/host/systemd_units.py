# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The unit lists the roles hand _common's tasks_from units, and the state records it hands back.

Plain Python (no Ansible import); the filters ``unit_states``, ``runtime_units`` and ``restore_units`` are thin
over it and a unit test imports it directly.

* ``unit_states``: one record per ``ansible.builtin.systemd_service`` read (its ``status``) -- what
  ``_common_units_status`` holds and runtime_retire writes into a MANIFEST;
* ``quadlet_service``: the service podman's generator makes from a quadlet file (podman-systemd.unit(5));
* ``runtime_units``: the units of one ``runtime_retire_runtimes`` entry, its quadlets' services included;
* ``restore_units``: the units a MANIFEST recorded, each marked to start when it ran before the retire.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os

# Quadlet file suffix -> suffix of the service podman's generator makes from it
# (podman-systemd.unit(5): foo.container -> foo.service, foo.pod -> foo-pod.service, ...).
QUADLET_SERVICE_SUFFIX = {".container": "", ".kube": "", ".pod": "-pod", ".network": "-network",
                          ".volume": "-volume", ".build": "-build", ".image": "-image"}


class UnitListError(ValueError):
    """A unit list this module cannot make; the message names the input."""


def _mapping(value):
    return value if isinstance(value, dict) or hasattr(value, "get") else {}


def unit_states(results, running_states):
    """[{unit, scope, user, load_state, active_state, unit_file_state, sub_state, running}] from the loop results of
    the systemd_service reads (each result's ``item`` is the unit asked for, its ``status`` what ``systemctl show``
    said; a read that failed -- a user without a running manager -- has no status and reads 'unknown')."""
    out = []
    for result in results or []:
        item = result["item"]
        status = _mapping(result.get("status", {}))
        active = status.get("ActiveState", "")
        out.append({"unit": item["name"], "scope": item["scope"], "user": item.get("user"),
                    "load_state": status.get("LoadState", "unknown"),
                    "active_state": status.get("ActiveState", "unknown"),
                    "unit_file_state": status.get("UnitFileState", "") or "unknown",
                    "sub_state": status.get("SubState", "unknown"),
                    "running": active in running_states})
    return out


def quadlet_service(path):
    """The .service podman's generator makes from the quadlet file at path."""
    stem, ext = os.path.splitext(os.path.basename(path))
    if ext not in QUADLET_SERVICE_SUFFIX:
        raise UnitListError("quadlet %r: %r is not a quadlet type podman generates a service from (%s)"
                            % (path, ext, ", ".join(sorted(QUADLET_SERVICE_SUFFIX))))
    return stem + QUADLET_SERVICE_SUFFIX[ext] + ".service"


def runtime_units(runtime):
    """[{name, scope, user}] of one runtime_retire_runtimes entry: its units (scope system unless given), then its
    quadlets' generated services."""
    out = []
    for unit in runtime.get("units", []):
        out.append({"name": unit["name"], "scope": unit.get("scope", "system"), "user": unit.get("user")})
    for quadlet in runtime.get("quadlets", []):
        out.append({"name": quadlet_service(quadlet["path"]), "scope": quadlet.get("scope", "system"),
                    "user": quadlet.get("user")})
    return out


def restore_units(units, start, running_states):
    """[{name, scope, user, start}] of the units a MANIFEST recorded (trash_files' ``units``): start is true for a
    unit that ran before the retire, when the restore starts units at all."""
    return [{"name": u["unit"], "scope": u["scope"], "user": u["user"],
             "start": bool(start) and u["active_state"] in running_states} for u in units or []]
