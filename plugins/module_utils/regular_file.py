# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Open a path for reading only when it is a regular file (stdlib only).

``open()`` on a FIFO blocks until a writer appears, and a character device such as
/dev/zero or /dev/urandom never ends: a module reading a path an operator typed must not
hang on either. The path is opened O_NONBLOCK (so the open itself cannot block on a FIFO),
fstat-ed on the descriptor it got (no race with a rename), and refused unless it is a
regular file; only then is it handed back as an ordinary blocking binary file object.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import fcntl
import os
import stat

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode):
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path, error, what="file", max_bytes=None):
    """A binary file object for path, or error(path, problem) naming why it was refused.

    error is called as ``error(path, problem)`` and raised; max_bytes bounds the size.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except (IOError, OSError) as exc:
        raise error(path, "cannot open: %s" % (exc.strerror or exc))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(path, "is %s, not a regular %s: give the path of the %s itself"
                        % (file_kind(st.st_mode), what, what))
        if max_bytes is not None and st.st_size > max_bytes:
            raise error(path, "is %d bytes, more than the %d a %s can be: not the file expected"
                        % (st.st_size, max_bytes, what))
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
