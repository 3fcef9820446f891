# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a role converges, read from the host in one call: paths, users, groups, units, ports, commands.

A no-change re-run of a role costs what its host round trips cost (a template that finds its file
current is a stat, a file module and a temp dir). The roles read everything they converge with one
``dankfleet.llm.host_state_info`` call and skip every task whose target the answer shows already as wanted
(``is_current``, the filter ``dankfleet.llm.host_state_current``). A task that would change something
runs exactly as before. Read-only, stdlib only.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import grp
import hashlib
import os
import pwd
import re
import shutil
import stat

from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import FileRefused, open_read_fd, read_fd

UNIT_PROPERTIES = ('LoadState', 'ActiveState', 'SubState', 'UnitFileState', 'MainPID', 'NRestarts', 'FragmentPath')
INT_PROPERTIES = ('MainPID', 'NRestarts')
# ss -Hltnp: ... users:(("llama-server",pid=1234,fd=3),("x",pid=5,fd=6))
SS_USER = re.compile(r'\("(?P<name>[^"]*)",pid=(?P<pid>\d+)')
SS_PORT = re.compile(r':(?P<port>\d+)$')
# /proc/<pid>/cgroup: `hierarchy-ID:controller-list:cgroup-path` per line (cgroup v2: `0::/system.slice/x.service`)
CGROUP_LINE = re.compile(r'(?P<id>[0-9]{1,10}):(?P<controllers>[^:]{0,4096}):(?P<path>/[^\x00-\x1f\x7f]{0,4096})\Z')
# a path component that is a systemd unit a process can run in (or the slice above it); a unit name is at most 255
CGROUP_UNIT = re.compile(r'[A-Za-z0-9:_.@\\-]{1,247}\.(?:service|scope|slice)\Z')
CGROUP_MAX_BYTES = 64 * 1024
CGROUP_MAX_LINES = 64
CGROUP_MAX_UNITS = 64  # a real path nests a handful (user.slice/user-1000.slice/user@1000.service/app.slice/x.scope)
CHECKSUM_MAX_BYTES = 16 * 1024 * 1024


class HostStateError(Exception):
    """An input the probe cannot take; the message names it and the fix."""


def _name(table, key, number):
    try:
        return getattr(table(number), key)
    except KeyError:
        return str(number)


def sha1_file(path, max_bytes=CHECKSUM_MAX_BYTES):
    """Hex sha1 of a regular file (Ansible's ``checksum`` algorithm), None above max_bytes or unreadable.

    What a role converges is a regular file with a real length; a kernel file (/proc, /sys) says 0 or 4096
    whatever it holds, may never end, or may wait for data. So the file is opened O_NONBLOCK|O_NOFOLLOW (the
    lstat said it is no link; a link put there since is not followed) and read to EOF without blocking,
    never past max_bytes: an endless or waiting file gets None, not a hang.
    """
    try:
        fd = open_read_fd(path, 'file', max_bytes, follow=False)
        try:
            return hashlib.sha1(read_fd(fd, path, 'file', max_bytes)).hexdigest()
        finally:
            os.close(fd)
    except (FileRefused, IOError, OSError):
        return None


def path_state(path, max_bytes=CHECKSUM_MAX_BYTES):
    """lstat of one absolute path: type, mode, owner, group, size, checksum of a file, target of a link."""
    if not os.path.isabs(path):
        raise HostStateError('paths: %r is not absolute; give the full path the role converges' % path)
    try:
        st = os.lstat(path)
    except (IOError, OSError):
        return {'exists': False, 'type': 'absent'}
    if stat.S_ISLNK(st.st_mode):
        kind = 'link'
    elif stat.S_ISDIR(st.st_mode):
        kind = 'directory'
    elif stat.S_ISREG(st.st_mode):
        kind = 'file'
    else:
        kind = 'other'
    result = {
        'exists': True, 'type': kind, 'mode': '%04o' % stat.S_IMODE(st.st_mode),
        'uid': st.st_uid, 'gid': st.st_gid, 'owner': _name(pwd.getpwuid, 'pw_name', st.st_uid),
        'group': _name(grp.getgrgid, 'gr_name', st.st_gid), 'size': st.st_size, 'mtime': st.st_mtime,
        'checksum': sha1_file(path, max_bytes) if kind == 'file' else None,
    }
    if kind == 'link':
        result['link_target'] = os.readlink(path)
        result['target_exists'] = os.path.exists(path)
    return result


def user_state(name):
    """The passwd entry of one user and every group it is in (primary included), or exists False."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {'exists': False}
    primary = _name(grp.getgrgid, 'gr_name', entry.pw_gid)
    groups = set([primary])
    groups.update(g.gr_name for g in grp.getgrall() if name in g.gr_mem)
    return {'exists': True, 'uid': entry.pw_uid, 'gid': entry.pw_gid, 'group': primary, 'home': entry.pw_dir,
            'shell': entry.pw_shell, 'groups': sorted(groups)}


def group_state(name):
    try:
        entry = grp.getgrnam(name)
    except KeyError:
        return {'exists': False}
    return {'exists': True, 'gid': entry.gr_gid, 'members': sorted(entry.gr_mem)}


def unit_spec(item):
    """A units entry -> (key, name, scope, user); a bare string is a system unit."""
    if isinstance(item, str):
        item = {'name': item}
    if not isinstance(item, dict) or not item.get('name'):
        raise HostStateError('units: %r must be a unit name or {name, scope, user}' % (item,))
    scope = item.get('scope') or 'system'
    if scope not in ('system', 'user'):
        raise HostStateError('units: %s has scope %r; use system or user' % (item['name'], scope))
    user = item.get('user')
    if scope == 'user' and not user:
        raise HostStateError('units: %s has scope user but no user; name the user whose manager runs it'
                             % item['name'])
    key = item['name'] if scope == 'system' else '%s@%s' % (item['name'], user)
    return key, item['name'], scope, user


def unit_command(name, scope, user, uid=None):
    """The systemctl show command line for one unit of the system or a user's manager."""
    base = ['systemctl']
    if scope == 'user':
        base = ['runuser', '-u', user, '--', 'env', 'XDG_RUNTIME_DIR=/run/user/%s' % uid, 'systemctl', '--user']
    return base + ['show', '--property=' + ','.join(UNIT_PROPERTIES), '--', name]


def parse_show(text):
    """``systemctl show --property=...`` output -> {property: value} (the gate reads it too)."""
    return dict(line.split('=', 1) for line in text.splitlines() if '=' in line)


def parse_unit(text):
    """``systemctl show`` KEY=VALUE lines -> the unit's state; exists False when systemd does not know it."""
    props = parse_show(text)
    result = dict((key, props.get(key, '')) for key in UNIT_PROPERTIES)
    for key in INT_PROPERTIES:
        try:
            result[key] = int(result[key] or 0)
        except ValueError:
            result[key] = 0
    result['exists'] = bool(props) and result['LoadState'] not in ('', 'not-found')
    return result


def parse_ports(text, ports):
    """``ss -Hltnp`` lines -> {port: {listening, holders, lines}} for each asked port."""
    result = dict((str(p), {'listening': False, 'holders': [], 'lines': []}) for p in ports)
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        match = SS_PORT.search(fields[3])
        if not match or match.group('port') not in result:
            continue
        entry = result[match.group('port')]
        entry['listening'] = True
        entry['lines'].append(line.strip())
        for user in SS_USER.finditer(line):
            holder = {'pid': int(user.group('pid')), 'name': user.group('name')}
            if holder not in entry['holders']:
                entry['holders'].append(holder)
    return result


def cgroup_units(text):
    """``/proc/<pid>/cgroup`` text -> the systemd units on its cgroup paths, outermost first and each once
    (``system.slice``, ``ollama.service``; a container's scope under its quadlet's service), or None when no line
    is of the kernel's shape (a file that is not cgroup text names no unit: unknown, never a guess)."""
    units, read = [], False
    for line in text.splitlines()[:CGROUP_MAX_LINES]:
        match = CGROUP_LINE.match(line)
        if not match:
            continue
        read = True
        for part in match.group('path').split('/'):
            if CGROUP_UNIT.match(part) and part not in units and len(units) < CGROUP_MAX_UNITS:
                units.append(part)
    return units if read else None


def holder_units(pid, proc='/proc'):
    """The units process pid runs in (cgroup_units of its /proc/<pid>/cgroup), or None when that file cannot be
    read as cgroup text: the process is gone, the file is refused (not regular, too long) or not UTF-8."""
    path = '%s/%d/cgroup' % (proc, pid)
    try:
        fd = open_read_fd(path, 'cgroup file', CGROUP_MAX_BYTES, follow=False)
        try:
            data = read_fd(fd, path, 'cgroup file', CGROUP_MAX_BYTES)
        finally:
            os.close(fd)
        return cgroup_units(data.decode('utf-8'))
    except (FileRefused, IOError, OSError, UnicodeDecodeError):
        return None


def add_holder_units(ports, reader=holder_units):
    """Each holder of parse_ports' answer gets ``units``: what it runs in, read on the host (reader(pid))."""
    for entry in ports.values():
        for holder in entry['holders']:
            holder['units'] = reader(holder['pid'])
    return ports


def command_state(name):
    """An executable on PATH (or an absolute path that is executable) -> its path, else None."""
    if os.path.isabs(name):
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return shutil.which(name)


def _sha1_text(content):
    if not isinstance(content, bytes):
        content = str(content).encode('utf-8')
    return hashlib.sha1(content).hexdigest()


def is_current(entry, state='file', content=None, checksum=None, mode=None, owner=None, group=None, src=None):
    """True when a host_state ``paths`` entry is already what a task would leave: the type, and each of
    content (by sha1), checksum, mode, owner, group and a link's src that is given. An absent or unknown
    entry (None, {}) is never current, so the task runs."""
    if not isinstance(entry, dict) or not entry.get('exists'):
        return False
    if state not in ('file', 'directory', 'link'):
        raise HostStateError("state %r: use file, directory or link" % (state,))
    if entry.get('type') != state:
        return False
    if content is not None and checksum is None:
        checksum = _sha1_text(content)
    if checksum is not None and entry.get('checksum') != checksum:
        return False
    if mode is not None:
        wanted = mode if isinstance(mode, int) else int(str(mode), 8)
        if entry.get('mode') is None or int(entry['mode'], 8) != wanted:
            return False
    if owner is not None and str(owner) not in (entry.get('owner'), str(entry.get('uid'))):
        return False
    if group is not None and str(group) not in (entry.get('group'), str(entry.get('gid'))):
        return False
    if src is not None and entry.get('link_target') != src:
        return False
    return True


# --- a role's inputs on the host ------------------------------------------------------------------------------

def _digit(char):
    return int(char) if char.isdigit() else 0


def executable(entry):
    """Whether a path entry of this module's answer can be run: a link whose target exists, else some x bit in its
    mode (root runs a file with any)."""
    if entry.get("type", "") == "link":
        return bool(entry.get("target_exists", False))
    return any(_digit(char) % 2 for char in str(entry.get("mode", "0000"))[-3:])


def missing_inputs(inputs, paths, binary="llama-server binary"):
    """The inputs ({what, path, fix}) the reading ``paths`` (this module's ``paths`` answer) shows missing - nothing at
    the path (an empty or relative one is never read), or for ``binary`` not executable - each with ``refusal``
    (what a real run says) and ``note`` (what a check run says) added."""
    out = []
    for item in inputs:
        found = paths.get(item["path"], {"exists": False})
        if found["exists"] and (item["what"] != binary or executable(found)):
            continue
        out.append(dict(item, refusal="the %s %s is missing%s: %s." % (
            item["what"], item["path"] or "(empty path)", " or not executable" if item["what"] == binary else "",
            item["fix"]), note="the %s %s is missing (a real run refuses unless the build/fetch roles provide it)."
            % (item["what"], item["path"])))
    return out
