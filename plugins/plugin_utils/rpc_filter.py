# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rpc_* filters' one wrapper: module_utils/serve/rpc_fleet's refusals become AnsibleFilterError."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.errors import AnsibleFilterError

try:
    from ansible_collections.dankfleet.llm.plugins.module_utils.serve import rpc_fleet
except ImportError:  # pragma: no cover - only when the collection is not on the path
    rpc_fleet = None


def call(name, fn_name, *args):
    """rpc_fleet.<fn_name>(*args), its RpcFleetError named after the filter."""
    if rpc_fleet is None:
        raise AnsibleFilterError("dankfleet.llm.%s: plugins/module_utils/serve/rpc_fleet.py could not be imported" % name)
    try:
        return getattr(rpc_fleet, fn_name)(*args)
    except rpc_fleet.RpcFleetError as exc:
        raise AnsibleFilterError("dankfleet.llm.%s: %s; nothing was changed" % (name, exc))
