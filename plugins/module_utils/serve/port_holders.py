# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who holds the serve port, judged once: this service, a runtime the retire stage stops, or something else.

The serve role checks the port at the deploy's first contact with the host (before a 25-minute build) and again
in its preflight, the last word before anything changes (tasks/port_check.yml, both times). The host answers
with ``dankfleet.llm.host_state_info``'s ``ports`` entry: the ``ss -Hltnp`` lines and each holder's pid, name
and the systemd units on its cgroup path (read on the host). A holder is

* this service's: its pid is the unit's MainPID;
* handed over: it runs in one of the handover units (``llama_server_port_handover_units``, the units and quadlet
  services of ``runtime_retire_runtimes``), which the retire stage stops before the restart;
* kept: anything else, an unknown unit (``units`` null: the process is gone or its cgroup file was no cgroup
  text) included. A kept holder is refused (in check mode: said).

The host's answer is read through a typed shape: a wrong one is a named refusal (PortHoldersError), never an
exception from inside and never a default.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import (
    INT_LIMIT, LINE_MAX, Bool, Int, List, Obj, Optional, ShapeError, Str, printable, read)
from ansible_collections.dankfleet.llm.plugins.module_utils.host.host_state import CGROUP_MAX_UNITS

HOLDERS_MAX = 4096
UNIT = Str(max_len=255, min_len=1, name=True, what='a systemd unit name')
HOLDER = Obj({
    'pid': Int(lo=1, hi=INT_LIMIT),
    'name': Str(max_len=LINE_MAX),
    'units': Optional(List(UNIT, max_len=CGROUP_MAX_UNITS)),  # the host names at most these
}, required=('pid',))
PORT = Obj({
    'listening': Bool(),
    'holders': List(HOLDER, max_len=HOLDERS_MAX),
    'lines': List(Str(max_len=LINE_MAX), max_len=HOLDERS_MAX),
}, required=('holders', 'lines'))
MAIN_PID = Int(lo=0, hi=INT_LIMIT, text=True)
HANDOVER = List(UNIT, max_len=HOLDERS_MAX)
SOURCE = "host_state_info's ports entry"


class PortHoldersError(ValueError):
    """The host's answer or an input is not of its shape; the message names which and where."""


def _read(shape, value, source):
    try:
        return read(shape, value, source)
    except ShapeError as exc:
        raise PortHoldersError(str(exc))


def judge(port_entry, main_pid, handover_units, port, service):
    """The port's holders sorted into this service's, handed over and kept, with the message a person acts on.

    port_entry: host_state_info's ``ports[<port>]``; main_pid: the service unit's MainPID (0 when it does not
    run); handover_units: the units the retire stage stops; port, service: for the messages (service without
    ``.service``). Returns {kept, handed, free, unnamed, lines, refusal, note}: kept and handed are holders
    ({pid, name, units}, one per pid, as ss listed them); free: no holder but this service; unnamed: ss shows a
    listener and no process (no CAP_SYS_PTRACE over its /proc/<pid>/fd); refusal: the failure message ('' when
    nothing is kept); note: what a passing, check-mode or plan run says.
    """
    entry = _read(PORT, port_entry, SOURCE)
    main = _read(MAIN_PID, main_pid, 'the MainPID of %s.service' % printable(service))
    handover = _read(HANDOVER, handover_units, 'llama_server_port_handover_units')
    kept, handed, seen = [], [], set([main])
    for holder in entry['holders']:
        if holder['pid'] in seen:
            continue
        seen.add(holder['pid'])
        units = holder.get('units')
        one = {'pid': holder['pid'], 'name': printable(holder.get('name', '')), 'units': units}
        (handed if units is not None and set(units) & set(handover) else kept).append(one)
    lines = printable('\n'.join(entry['lines']), lines=True)
    declared = ', '.join(handover)
    refusal = note = ''
    if kept:
        refusal = (
            'port %s is held by %s, not by %s.service (MainPID %d) nor by a unit the retire stage stops (%s). Declare '
            'that runtime in runtime_retire_runtimes (its units or quadlets, with the port) or choose another '
            'llama_server_port. Nothing was changed.' % (port, lines, printable(service), main, declared or 'none declared'))
        note = ('port %s is held now by %s, which no unit the retire stage stops explains: a deploy (not --check) '
                'refuses here. Declare that runtime in runtime_retire_runtimes or choose another llama_server_port.'
                % (port, lines))
    elif handed:
        note = ('port %s is held by pid(s) %s of %s, which the retire stage stops before the restart'
                % (port, ', '.join(str(pid) for pid in sorted(h['pid'] for h in handed)), declared))
    else:
        note = 'port %s is free or this service\'s' % port
    return {'kept': kept, 'handed': handed, 'free': not kept and not handed,
            'unnamed': bool(entry['lines']) and not entry['holders'], 'lines': lines, 'refusal': refusal, 'note': note}
