# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a text file on the controller, in the action plugin's own process (stdlib only).

A deploy's report for its caller is a controller file; ``ansible.builtin.copy`` delegated to localhost
runs two modules for it (a stat and the copy, ~0.5 s on every run). This writes it where the action
runs: atomically (a temp file beside it, then a rename), and not at all when the file already has
exactly this content and mode.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import stat
import tempfile

from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import open_regular


class ControllerFileError(Exception):
    """A dest or mode the write cannot take; the message names it and the fix."""


def parse_mode(mode):
    """'0644', '644' or 0o644 -> 0o644; anything else is refused."""
    try:
        value = mode if isinstance(mode, int) and not isinstance(mode, bool) else int(str(mode), 8)
    except ValueError:
        value = -1
    if not 0 <= value <= 0o7777:
        raise ControllerFileError('mode %r is not an octal permission (give it quoted, as "0644")' % (mode,))
    return value


def write_text(dest, content, mode='0644', check=False):
    """Put content (text, written as UTF-8) at dest with mode -> {changed, before (the old text or None)}.

    Unchanged when dest is already a regular file with these bytes and this mode. check: say, write nothing."""
    if not os.path.isabs(dest):
        raise ControllerFileError('dest %r is not absolute: give the full path on the controller' % (dest,))
    wanted_mode = parse_mode(mode)
    data = content.encode('utf-8')
    directory = os.path.dirname(dest)
    if not os.path.isdir(directory):
        raise ControllerFileError('dest %s: the directory %s does not exist on the controller; create it first, '
                                  'nothing was written' % (dest, directory))
    before = None
    try:
        st = os.lstat(dest)
    except OSError:
        st = None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise ControllerFileError('dest %s exists and is not a regular file; move it away, nothing was written'
                                      % dest)
        with open_regular(dest, what='file', follow=False) as handle:
            old = handle.read()
        if old == data and stat.S_IMODE(st.st_mode) == wanted_mode:
            return {'changed': False, 'before': old.decode('utf-8', 'replace')}
        before = old.decode('utf-8', 'replace')
    if check:
        return {'changed': True, 'before': before}
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(dest))
    try:
        with os.fdopen(fd, 'wb') as handle:
            handle.write(data)
            os.fchmod(handle.fileno(), wanted_mode)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return {'changed': True, 'before': before}
