# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way a module reads or writes a file on a host (stdlib only, Linux).

Threat model
------------
The modules run with become, as root, in directories that another user owns: on dankserver
the models directory and the trash live under /home/dank, owned by the service user that also
runs llama-server on 0.0.0.0. Whoever can write there (that user, or anything that takes over
llama-server) can, between two of our system calls, put in place of a name we use:

* a symbolic link to any file (/etc/shadow, /root/.ssh/authorized_keys): a path-based
  ``open(..., "w")``, ``O_CREAT`` or ``O_TRUNC`` by root then writes through it;
* a hard link to a file root owns (where the filesystem allows one);
* a FIFO, a socket or a device node: a blocking open or read waits forever, /dev/zero never ends;
* a directory where a file is expected, or a file where a directory is expected;
* a file of any size or any bytes: not UTF-8, gigabytes long, or a /proc-like file whose size
  says 0 and whose content never ends;
* a directory swapped for a link after it was checked (the checked path is not the used path).

The answers, each in one function here:

* Reads (read_bytes, read_text, open_regular): ``O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC`` (the
  open cannot block on a FIFO), plus ``O_NOFOLLOW`` where the last component must not be a link
  (files this collection writes itself: stamps, records, parts, logs); ``fstat`` on the
  descriptor, and anything but a regular file is refused by kind; a size cap per input, applied
  to st_size and again while reading to EOF (procfs and sysfs report 0 or 4096 whatever the
  content is); a read that would block (EAGAIN on a kernel file) is refused, never waited for;
  text that is not UTF-8 is refused naming the path and the byte offset.
* Writes go through an opened directory (SafeDir): every component of its path is opened with
  ``O_NOFOLLOW|O_DIRECTORY`` relative to the one before; a link is followed only where nobody else
  can have put it - in a directory owned by root or us that nobody else can write, or our own link
  in a sticky one such as /tmp - and below a directory another user can write, a link is refused
  by name (that directory and everything below it is "foreign"). Inside it, names are used
  relative to the descriptor (``dir_fd``): a new file is a temporary ``O_CREAT|O_EXCL|O_NOFOLLOW``
  file, written, fsynced, renamed over the target with ``os.replace`` in the same directory, and
  the directory fsynced; an existing file written in
  place (a download's .part, a log) is opened ``O_NOFOLLOW|O_NONBLOCK``, must be a regular file
  with one link, and is never truncated by the open.
* Names are checked before anything changes: one component, no NUL, not ``.`` or ``..``, and
  short enough for NAME_MAX together with any suffix the caller will add.

Every refusal is a FileRefused (an OSError, so older ``except OSError`` paths still catch it)
whose message starts with the path and says the cause and the fix.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import errno
import fcntl
import os
import stat

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)

NAME_MAX = 255
# The default cap of one read: far above any text input a module takes (env files, nvidia-smi
# output, recorded facts), far below what would hurt a host.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
_READ_CHUNK = 64 * 1024
_MAX_LINK_HOPS = 40

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC


class FileRefused(OSError):
    """A path the layer will not read or write: str() is '<path>: <cause>'."""

    def __init__(self, path, cause, code=errno.EPERM):
        super(FileRefused, self).__init__(code, cause, path)
        self.path = path
        self.cause = cause

    def __str__(self):
        return "%s: %s" % (self.path, self.cause)


def file_kind(mode):
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _cause(exc):
    return exc.strerror or str(exc)


def _refuse_open_error(path, exc, follow, dir_fd=None):
    if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP, errno.EISDIR):   # a socket, or a FIFO opened for writing
        try:
            mode = os.stat(path, dir_fd=dir_fd, follow_symlinks=follow).st_mode
            return FileRefused(path, "is %s, not a regular file" % file_kind(mode), exc.errno)
        except OSError:
            pass
    if exc.errno == errno.ELOOP and not follow:
        return FileRefused(path, "is a symbolic link; it is not followed here (a link in this place could point "
                                 "root at any file): replace it with the file itself", errno.ELOOP)
    if exc.errno == errno.ELOOP:
        return FileRefused(path, "unreadable: a symbolic link loop (or a chain of more links than the kernel "
                                 "follows); replace the link with the file or a link to it", errno.ELOOP)
    if exc.errno == errno.ENOENT:
        return FileRefused(path, "cannot open: it does not exist", errno.ENOENT)
    if exc.errno == errno.ENOTDIR:
        return FileRefused(path, "cannot open: a component of the path is not a directory", errno.ENOTDIR)
    if exc.errno == errno.ENAMETOOLONG:
        return FileRefused(path, "the name is too long for the filesystem (%s)" % _cause(exc), errno.ENAMETOOLONG)
    return FileRefused(path, "cannot open: %s" % _cause(exc), exc.errno or errno.EIO)


def _check_regular(fd, path, what, max_bytes, single_link=False):
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(path, "is %s, not a regular file: give the path of the %s itself"
                          % (file_kind(st.st_mode), what), errno.EINVAL)
    if max_bytes is not None and st.st_size > max_bytes:
        raise FileRefused(path, "is %d bytes, more than the %d a %s can be: not the file expected"
                          % (st.st_size, max_bytes, what), errno.EFBIG)
    if single_link and st.st_nlink > 1:
        raise FileRefused(path, "has %d hard links: another name shares this file, so writing it here could "
                                "change a file elsewhere; move it aside" % st.st_nlink, errno.EMLINK)
    return st


def _open_read_fd(path, what, max_bytes, follow, dir_fd=None):
    flags = _READ_FLAGS | (0 if follow else _O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        raise _refuse_open_error(path, exc, follow, dir_fd)
    try:
        _check_regular(fd, path, what, max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_read_fd(path, what="file", max_bytes=None, follow=True, dir_fd=None):
    """A non-blocking O_RDONLY descriptor of the regular file at path (read it with read_fd), or FileRefused."""
    return _open_read_fd(path, what, max_bytes, follow, dir_fd)


def _set_blocking(fd):
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)


def open_regular(path, error=None, what="file", max_bytes=None, follow=True, dir_fd=None):
    """A binary file object for path, refused unless it is a regular file.

    error, when given, is raised as ``error(path, problem)`` instead of FileRefused (the older
    call shape); max_bytes bounds st_size; follow=False refuses a link as the last component.
    The object reads blocking: use it for files whose length st_size tells (not procfs).
    """
    try:
        fd = _open_read_fd(path, what, max_bytes, follow, dir_fd)
    except FileRefused as exc:
        if error is None:
            raise
        raise error(path, exc.cause)
    try:
        _set_blocking(fd)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_fd(fd, path, what, max_bytes):
    """All bytes of fd to EOF, at most max_bytes: procfs/sysfs files say size 0 or 4096 and mean neither."""
    chunks = []
    total = 0
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    while True:
        try:
            data = os.read(fd, _READ_CHUNK)  # whole chunks: some kernel files take only aligned reads
        except BlockingIOError:
            raise FileRefused(path, "would block (a kernel file that waits for new data, not a file with content): "
                                    "not a %s" % what, errno.EAGAIN)
        except OSError as exc:
            raise FileRefused(path, "cannot read: %s" % _cause(exc), exc.errno or errno.EIO)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
        total += len(data)
        if total > limit:
            raise FileRefused(path, "holds more than the %d bytes a %s can be: not the file expected"
                              % (limit, what), errno.EFBIG)


def read_bytes(path, what="file", max_bytes=DEFAULT_MAX_BYTES, follow=True, dir_fd=None):
    """The bytes of the regular file at path (to EOF, never more than max_bytes), or FileRefused."""
    fd = _open_read_fd(path, what, max_bytes, follow, dir_fd)
    try:
        return read_fd(fd, path, what, max_bytes)
    finally:
        os.close(fd)


def decode_text(data, path, what="file", errors="strict"):
    """data as UTF-8 text; bytes that are not UTF-8 are refused naming the path, byte offset and line."""
    try:
        return data.decode("utf-8", errors)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FileRefused(path, "is not UTF-8 text: byte 0x%02x at offset %d (line %d) cannot be decoded; the %s "
                                "must be UTF-8" % (data[exc.start], exc.start, line, what), errno.EILSEQ)


def read_text(path, what="file", max_bytes=DEFAULT_MAX_BYTES, follow=True, dir_fd=None, errors="strict"):
    """read_bytes decoded as UTF-8 (errors='strict' refuses naming the byte offset)."""
    return decode_text(read_bytes(path, what, max_bytes, follow, dir_fd), path, what, errors)


def read_optional_text(path, what="file", max_bytes=DEFAULT_MAX_BYTES, follow=True, errors="strict"):
    """read_text, or None when path does not exist (any other refusal is raised)."""
    try:
        return read_text(path, what, max_bytes, follow, errors=errors)
    except FileRefused as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise


# ------------------------------------------------------------------------------ names

def check_name(name, what="file name", reserve=0):
    """name as one plain path component with room for `reserve` more bytes (a suffix), or FileRefused."""
    if not isinstance(name, str) or not name:
        raise FileRefused(repr(name), "%s must be a non-empty file name" % what, errno.EINVAL)
    if "/" in name or "\0" in name or name in (".", ".."):
        raise FileRefused(name, "%s must be one plain file name (no '/', no NUL, not '.' or '..'): it may not "
                                "leave its directory" % what, errno.EINVAL)
    size = len(os.fsencode(name))
    if size + reserve > NAME_MAX:
        raise FileRefused(name, "%s is %d bytes; with the %d bytes added beside it (stamp, part, lock) it must be "
                                "at most %d: choose a shorter name" % (what, size, reserve, NAME_MAX - reserve),
                          errno.ENAMETOOLONG)
    return name


# ------------------------------------------------------------------------ directories

TRUSTED, STICKY, FOREIGN = "trusted", "sticky", "foreign"


def _dir_state(st, euid, parent_state):
    """How far a directory's names can be trusted, given its parent's state.

    trusted: owned by root or us and writable by nobody else, below trusted or sticky directories (an entry
    of ours in a sticky directory cannot be renamed or replaced by anyone else). sticky: like /tmp, owned by
    root or us, writable by all, sticky: only our own links in it are followed. foreign: anything else, and
    everything below it - no link is followed there.
    """
    if parent_state == FOREIGN or st.st_uid not in (0, euid):
        return FOREIGN
    if not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return TRUSTED
    return STICKY if st.st_mode & stat.S_ISVTX else FOREIGN


def _owner_name(uid):
    try:
        import pwd
        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "uid %d" % uid


class SafeDir:
    """An opened directory: every name below is used relative to its descriptor.

    ``foreign`` is the owner's uid when someone other than root or us can write into it
    (None otherwise); everything written here is then O_EXCL/O_NOFOLLOW, never through a link.
    """

    def __init__(self, fd, path, st, foreign):
        self.fd = fd
        self.path = path
        self.st = st
        self.foreign = foreign

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def join(self, name):
        return os.path.join(self.path, name)

    # -- reads -----------------------------------------------------------
    def lstat(self, name):
        """lstat of name, None when absent."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def read_bytes(self, name, what="file", max_bytes=DEFAULT_MAX_BYTES):
        """The bytes of the regular file name here (never through a link), or FileRefused naming the full path."""
        try:
            return read_bytes(name, what, max_bytes, follow=False, dir_fd=self.fd)
        except FileRefused as exc:
            raise FileRefused(self.join(name), exc.cause, exc.errno)

    def read_text(self, name, what="file", max_bytes=DEFAULT_MAX_BYTES):
        return decode_text(self.read_bytes(name, what, max_bytes), self.join(name), what)

    def open_read(self, name, what="file", max_bytes=None):
        """A blocking binary file object for the regular file name (never a link)."""
        try:
            return open_regular(name, None, what, max_bytes, follow=False, dir_fd=self.fd)
        except FileRefused as exc:
            raise FileRefused(self.join(name), exc.cause, exc.errno)

    def listdir(self):
        return os.listdir(self.fd)

    # -- writes ----------------------------------------------------------
    def open_existing_or_new(self, name, what="file", append=False, mode=0o644, readable=False):
        """fd of the regular file name, created when absent; never truncated, never through a link.

        Refused: a link, a FIFO/socket/device/directory, a file with more than one hard link.
        """
        path = self.join(name)
        flags = (os.O_RDWR if readable else os.O_WRONLY) | os.O_CREAT | _O_NOFOLLOW | os.O_NONBLOCK
        flags |= _O_NOCTTY | _O_CLOEXEC | (os.O_APPEND if append else 0)
        try:
            fd = os.open(name, flags, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO with no reader, opened for writing
                raise FileRefused(path, "is a FIFO (named pipe), not a regular file: give the path of the %s itself"
                                  % what, errno.ENXIO)
            if exc.errno == errno.EISDIR:
                raise FileRefused(path, "is a directory, not a regular file: give the path of the %s itself" % what,
                                  errno.EISDIR)
            raise _refuse_open_error(path, exc, False)
        try:
            _check_regular(fd, path, what, None, single_link=True)
            _set_blocking(fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_atomic(self, name, data, mode=0o644, fsync=True, uid=None, gid=None):
        """Put data at name by a new file and a rename in this directory; the old file is never written."""
        path = self.join(name)
        check_name(name, "the file name of %s" % path)
        old = self.lstat(name)
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise FileRefused(path, "is a directory where a file belongs: move it aside", errno.EISDIR)
        tmp = ".%s.%s.tmp" % (name[:NAME_MAX - 30], os.urandom(6).hex())
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600, dir_fd=self.fd)
        except OSError as exc:
            raise FileRefused(path, "cannot write in %s: %s" % (self.path, _cause(exc)), exc.errno or errno.EIO)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode)
                if uid is not None or gid is not None:
                    os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException as exc:
            try:
                os.unlink(tmp, dir_fd=self.fd)
            except OSError:
                pass
            if isinstance(exc, OSError) and not isinstance(exc, FileRefused):
                raise FileRefused(path, "cannot write: %s; the old file is untouched" % _cause(exc),
                                  exc.errno or errno.EIO)
            raise
        if fsync:
            self.fsync()
        return path

    def replace(self, src, dst, fsync=True):
        os.replace(src, dst, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        if fsync:
            self.fsync()

    def unlink(self, name):
        os.unlink(name, dir_fd=self.fd)

    def fsync(self):
        try:
            os.fsync(self.fd)
        except OSError:
            pass


def _split(path):
    return [p for p in path.split("/") if p and p != "."]


def _open_root():
    fd = os.open("/", os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    return fd, os.fstat(fd)


def open_dir(path, what="directory", create_mode=None, must_exist=True):
    """SafeDir for the absolute directory path, walked component by component without trusting links.

    A link is followed only where nobody else can have put it (see _dir_state); below a directory another
    user can write, a link is refused naming the link and that directory's owner.
    create_mode: make missing components (mkdir relative to the parent, then opened O_NOFOLLOW).
    must_exist=False: None when a component is missing (and create_mode is None).
    """
    if not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        raise FileRefused(str(path), "%s must be an absolute path" % what, errno.EINVAL)
    euid = os.geteuid()
    todo = _split(path)
    done = []
    hops = 0
    fd, st = _open_root()
    state = _dir_state(st, euid, TRUSTED)
    foreign = st.st_uid if state == FOREIGN else None
    try:
        while todo:
            comp = todo.pop(0)
            here = "/" + "/".join(done)
            if comp == "..":
                if state == FOREIGN:
                    raise FileRefused(path, "'..' below %s, which %s can write: give the path without '..'"
                                      % (here, _owner_name(foreign)), errno.EPERM)
                todo = done[:-1] + todo
                done = []
                os.close(fd)
                fd, st = _open_root()
                state = _dir_state(st, euid, TRUSTED)
                continue
            full = os.path.join(here, comp)
            try:
                lst = os.stat(comp, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if create_mode is None:
                    if not must_exist:
                        os.close(fd)
                        return None
                    raise FileRefused(full, "does not exist (the %s %s needs it)" % (what, path), errno.ENOENT)
                try:
                    os.mkdir(comp, create_mode, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise FileRefused(full, "cannot create: %s" % _cause(exc), exc.errno)
                lst = os.stat(comp, dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                raise FileRefused(full, "cannot look it up: %s" % _cause(exc), exc.errno)
            if stat.S_ISLNK(lst.st_mode):
                if not (state == TRUSTED or (state == STICKY and lst.st_uid in (0, euid))):
                    raise FileRefused(full, "is a symbolic link in %s, which %s can write: root does not follow a "
                                            "link another user can change; give the real path of the %s"
                                      % (here, _owner_name(st.st_uid), what), errno.ELOOP)
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    raise FileRefused(full, "too many levels of symbolic links", errno.ELOOP)
                target = os.readlink(comp, dir_fd=fd)
                todo = _split(target) + todo
                if target.startswith("/"):
                    done = []
                    os.close(fd)
                    fd, st = _open_root()
                    state = _dir_state(st, euid, TRUSTED)
                continue
            if not stat.S_ISDIR(lst.st_mode):
                raise FileRefused(full, "is %s, not a directory: the %s %s must be a directory"
                                  % (file_kind(lst.st_mode) if not stat.S_ISREG(lst.st_mode) else "a file", what,
                                     path), errno.ENOTDIR)
            try:
                nfd = os.open(comp, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise FileRefused(full, "cannot open: %s (it changed while it was checked?)" % _cause(exc), exc.errno)
            os.close(fd)
            fd = nfd
            st = os.fstat(fd)
            done.append(comp)
            new_state = _dir_state(st, euid, state)
            if new_state == FOREIGN and state != FOREIGN:
                foreign = st.st_uid
            state = new_state
        return SafeDir(fd, "/" + "/".join(done), st, foreign if state == FOREIGN else None)
    except BaseException:
        os.close(fd)
        raise


def resolve_path(path, what="path"):
    """path with every directory that exists resolved as open_dir walks it -- a link followed only where nobody
    else can have put it, one in a directory another user can write refused by name (FileRefused), at any
    depth -- and the part that does not exist yet appended as given (normalised). realpath() follows any link."""
    if not isinstance(path, str) or not os.path.isabs(path) or "\0" in path:
        raise FileRefused(str(path), "%s must be an absolute path" % what, errno.EINVAL)
    parts = _split(path)
    for have in range(len(parts), -1, -1):
        d = open_dir("/" + "/".join(parts[:have]), what, must_exist=False)
        if d is not None:
            with d:
                return os.path.normpath(os.path.join(d.path, *parts[have:])) if have < len(parts) else d.path
    raise FileRefused(path, "/ cannot be opened", errno.ENOENT)  # pragma: no cover - / always exists


def open_parent(path, what="file", create_mode=None, reserve=0):
    """(SafeDir of path's directory, the checked last name) for an absolute file path."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise FileRefused(str(path), "the %s must be an absolute path" % what, errno.EINVAL)
    head, name = os.path.split(os.path.normpath(path))
    check_name(name, "the %s name" % what, reserve)
    return open_dir(head, "directory of the %s" % what, create_mode=create_mode), name


def write_file_atomic(path, data, what="file", mode=0o644, fsync=True, create_mode=None):
    """Write data to the absolute path through open_parent + SafeDir.write_atomic; returns the path."""
    d, name = open_parent(path, what, create_mode=create_mode, reserve=30)
    with d:
        return d.write_atomic(name, data, mode=mode, fsync=fsync)
