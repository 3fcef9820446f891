# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Move files into a dated trash directory with a MANIFEST, and put them back.

Plain Python, no Ansible import, so unit tests drive it in a temp tree.

A retired file keeps its original absolute path below the trash directory
(``/etc/systemd/system/x.service`` -> ``<trash>/etc/systemd/system/x.service``),
so ``ls -R`` of the trash reads like the host it came from. Symlinks move as
symlinks (a unit file that is a link into a repo stays a link, pointing where
it pointed), and nothing is ever deleted.

Threat model: this runs as root over trees another user may write in (the trash
and the models directory live under the service user's home). So:

* the MANIFEST is a write-ahead log: each move's row is written and fsynced
  BEFORE the move, a ``moved`` line after it, a ``failed`` line when it did not
  happen. A crash, a full trash or a refusal midway leaves every moved file on record;
* every directory is opened one component at a time from ``/`` with O_NOFOLLOW
  (a component that became a symlink is refused by name), and each move is a
  rename between those directory descriptors that never replaces what is there;
* a move across filesystems copies, fsyncs, verifies the copy's sha256 and only
  then unlinks the original; a failure removes the half copy and leaves the original;
* a restore trusts a MANIFEST and a trash directory only when root or the running
  user owns them and nobody else can write them, refuses a target whose parent is not
  the directory recorded at the retire (its inode), and refuses a MANIFEST that
  accounts for fewer files than the trash directory holds.

The MANIFEST (v3) is text a person can read, and restore from by hand. Cells are
separated by a tab, records end at ``\\n`` only; in every cell ``\\\\`` is a
backslash and ``\\xHH`` the byte HH, for every byte below 0x20 or above 0x7e, so
any byte string round-trips (a file name that is not UTF-8 included); a cell that
is ``-`` alone means none:

    # dankfleet.llm trash MANIFEST v3
    # <comments>
    ## ... the format, in four lines
    unit  x.service  system  -  active  enabled  running
    file  /etc/systemd/system/x.service  root  root  0644  <sha256>  -  /etc/systemd/system/x.service  2049:1234
    moved  /etc/systemd/system/x.service

``path`` is the file that moved, as the kernel names it (every parent resolved the way
regular_file.open_dir walks it: a link in a directory another user can write, at any
depth, is refused by name; the last component left alone so a symlink moves as a
symlink); ``given``
is the path as the caller spelled it; ``parent`` the device:inode of the directory it
was in. MANIFEST v1 (no ``given``) and v2 (no ``parent``, no ``moved`` lines: written
after the moves) still restore.

What never moves: a system tree (/, /etc, /usr, /home, a user's home, the unit
directories ...) or anything above one, a mount point, or a tree with a mount point
inside -- bind mounts included: /proc/self/mountinfo names them, st_dev does not; the
trash directory must be absolute and not a symlink. Those are refusals before anything
moves. A MANIFEST is strict UTF-8 text: a byte that is not is refused naming its line.

Restoring moves every file back, checks owner, group, mode and sha256 (or the
link target) against the MANIFEST, and renames the MANIFEST to
``MANIFEST.restored-<UTC time>`` so the directory can take a later retire.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import ctypes
import datetime
import errno
import glob
import grp
import os
import pwd
import re
import stat

from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import (
    FileRefused, open_read_fd, read_bytes, read_fd, resolve_path)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.sha256 import hash_file, sha256_file

MANIFEST_NAME = 'MANIFEST'
MANIFEST_HEADER = '# dankfleet.llm trash MANIFEST v3'
MANIFEST_HEADER_V1 = '# dankfleet.llm trash MANIFEST v1'
MANIFEST_HEADER_V2 = '# dankfleet.llm trash MANIFEST v2'
MANIFEST_HEADERS = (MANIFEST_HEADER_V1, MANIFEST_HEADER_V2, MANIFEST_HEADER)
MANIFEST_MAX_BYTES = 64 * 1024 * 1024
FILE_COLUMNS = ('kind', 'path', 'owner', 'group', 'mode', 'sha256', 'link_target', 'given', 'parent')
FILE_COLUMNS_V2 = FILE_COLUMNS[:8]
FILE_COLUMNS_V1 = FILE_COLUMNS[:7]
UNIT_COLUMNS = ('kind', 'unit', 'scope', 'user', 'active_state', 'unit_file_state', 'sub_state')
# v3 state records: the move of the row above completed (and was verified) / did not happen.
STATES = ('moved', 'failed')
MANIFEST_LEGEND = (
    '## v3: one record a line, ended by \\n only; cells separated by a tab; in a cell \\\\ is a backslash and \\xHH '
    'the byte HH (every byte below 0x20 or above 0x7e); a cell of - alone is none',
    '## file|link  path  owner  group  mode  sha256  link_target  given  parent(dev:inode)  -- written before the move',
    '## moved  path  -- that move completed and was verified; failed  path  reason  -- it did not: the file stayed',
    '## unit  unit  scope  user  active_state  unit_file_state  sub_state  -- the state before the retire',
)
# Where systemd reads unit configuration we may have written (never /usr/lib or /run).
SYSTEM_UNIT_DIRS = ('/etc/systemd/system',)
USER_UNIT_DIRS = ('.config/systemd/user',)  # relative to the user's home
LINK_DIR_SUFFIXES = ('.wants', '.requires', '.upholds')
# Trees no retire may move, nor anything above them (so '/' and '/usr/..' are refused too).
SYSTEM_TREES = (
    '/', '/bin', '/boot', '/dev', '/efi', '/etc', '/home', '/lib', '/lib32', '/lib64', '/libx32', '/lost+found',
    '/media', '/mnt', '/opt', '/proc', '/root', '/run', '/sbin', '/snap', '/srv', '/sys', '/tmp', '/usr', '/var',
    '/etc/systemd', '/etc/systemd/system', '/etc/systemd/user', '/etc/containers', '/etc/containers/systemd',
    '/usr/bin', '/usr/sbin', '/usr/lib', '/usr/lib32', '/usr/lib64', '/usr/libexec', '/usr/include',
    '/usr/share', '/usr/src', '/usr/local', '/usr/local/bin', '/usr/local/sbin', '/usr/local/lib',
    '/usr/local/share', '/usr/lib/systemd', '/lib/systemd', '/var/lib', '/var/log', '/var/cache', '/var/tmp',
    '/var/spool', '/var/mail', '/var/lib/containers', '/var/lib/systemd', '/run/systemd', '/run/user',
)
# Below a user's home: the trees whose files we retire one by one, never whole.
HOME_TREES = ('.config', '.config/systemd', '.config/systemd/user', '.config/containers',
              '.config/containers/systemd', '.local', '.local/share', '.local/bin', '.cache')
# systemd.unit(5): [A-Za-z0-9:_.@-] and \x escapes, a known type suffix, at most 255 bytes.
UNIT_NAME = re.compile(r'^(?![.@])[A-Za-z0-9:_.@\\-]+\.(service|socket|device|mount|automount|swap|target|path|'
                       r'timer|slice|scope)$')

_O_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _O_CLOEXEC | getattr(os, 'O_NOCTTY', 0)
_COPY_CHUNK = 1024 * 1024
_RENAME_NOREPLACE = 1


def sha256_fd(fd):
    """The hex sha256 of an open descriptor read from byte 0 (pread: a file opened O_NOFOLLOW at a dir_fd)."""
    return hash_file(None, fd=fd)[0].hexdigest()


class TrashError(Exception):
    """A refusal with a message that names the path and what to do about it."""


# ----------------------------------------------------------------------------- bytes and text

def to_bytes(value, what='value'):
    """A name or text as the bytes the kernel (or the MANIFEST) holds: UTF-8, undecodable bytes as Python keeps them."""
    if isinstance(value, bytes):
        return value
    try:
        return value.encode('utf-8', 'surrogateescape')
    except UnicodeEncodeError as exc:
        raise TrashError('%s %r holds a character no file name or MANIFEST can hold (%s): fix the value. '
                         'Nothing was moved.' % (what, value, exc.reason))


def to_text(raw):
    """The str Python uses for these bytes (os.fsdecode's way: undecodable bytes survive as surrogates)."""
    return raw.decode('utf-8', 'surrogateescape')


def shown(value):
    """A path or text fit for a message or a JSON result: bytes that are not UTF-8 as \\xHH."""
    if isinstance(value, bytes):
        value = to_text(value)
    return value.encode('utf-8', 'surrogateescape').decode('utf-8', 'backslashreplace')


_PLAIN = frozenset(range(0x20, 0x7f)) - frozenset((0x5c,))
_ESCAPE = re.compile(rb'\\(?:(\\)|x([0-9a-fA-F]{2}))')


def escape_cell(value, what='value'):
    """One v3 MANIFEST cell for a str, bytes or None: printable ASCII as is, every other byte \\xHH, '-' for none."""
    if value is None:
        return b'-'
    raw = to_bytes(value, what)
    if raw == b'-':
        return b'\\x2d'
    out = bytearray()
    for byte in raw:
        if byte in _PLAIN:
            out.append(byte)
        elif byte == 0x5c:
            out += b'\\\\'
        else:
            out += b'\\x%02x' % byte
    return bytes(out)


def unescape_cell(cell, source='MANIFEST', number=0):
    """The bytes of a v3 cell (None for '-'); a backslash that starts no escape is an error naming the line."""
    if cell == b'-':
        return None
    stray = _ESCAPE.sub(b'', cell)
    if b'\\' in stray:
        raise TrashError('%s line %d has a backslash that is neither \\\\ nor \\xHH: %r (edited by hand?)'
                         % (source, number, cell))
    return _ESCAPE.sub(lambda m: b'\\' if m.group(1) else bytes((int(m.group(2), 16),)), cell)


# ----------------------------------------------------------------------------- directories, never through a link

def _parts(path):
    return [p for p in path.split('/') if p]


def walk_dir(path, base_fd=None, base='/', create=False, mode=0o755, leaf_mode=None):
    """A descriptor of ``path`` opened one component at a time below ``base_fd`` (``/`` if None), never
    following a symlink; missing directories are made (``mode``, the last ``leaf_mode``) when ``create``.

    A component that is a symlink is a TrashError naming it; a missing one is FileNotFoundError.
    Returns (fd, created): created is True when the last component was made here.
    """
    fd = os.open(base, _DIR_FLAGS) if base_fd is None else os.dup(base_fd)
    names = _parts(path)
    created = False
    try:
        for i, name in enumerate(names):
            last = i == len(names) - 1
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                created = False
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, leaf_mode if last and leaf_mode is not None else mode, dir_fd=fd)
                    created = True
                except FileExistsError:
                    pass
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                where = os.path.join(base, *names[:i + 1])
                try:
                    kind = 'a symlink' if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode) \
                        else 'not a directory'
                except OSError:
                    kind = 'not a directory'
                raise TrashError('%s is %s: trash_files never follows a link in a directory it moves files in or '
                                 'out of (someone may have replaced a directory with a link since the retire). '
                                 'Put the real directory back, or restore by hand from the MANIFEST.'
                                 % (shown(where), kind))
            os.close(fd)
            fd = nfd
        return fd, created
    except BaseException:
        os.close(fd)
        raise


def _lstat_at(dir_fd, name):
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _identity(st):
    return '%d:%d' % (st.st_dev, st.st_ino)


def _same_dir(recorded, st):
    """Whether a directory is the one a row recorded. The inode decides: st_dev is renumbered across reboots on
    btrfs subvolumes and overlay mounts, an inode is not."""
    if not recorded:
        return True
    try:
        return int(recorded.split(':')[1]) == st.st_ino
    except (IndexError, ValueError):
        return False


def _check_owner(st, path, what):
    """Root, or the user running this, owns it and nobody else can write it; otherwise a refusal naming it."""
    me = os.geteuid()
    if st.st_uid not in (0, me):
        raise TrashError('%s %s is owned by %s, neither root nor the user running this (%s): its contents could '
                         'have been written by that user, so it is not trusted. Check it, then chown it to root '
                         '(or restore by hand). Nothing was moved.'
                         % (what, shown(path), _name_of('owner', st.st_uid), _name_of('owner', me)))
    if st.st_mode & 0o022:
        raise TrashError('%s %s is writable by its group or by others (mode %04o): not trusted. Check it, then '
                         'chmod go-w it. Nothing was moved.' % (what, shown(path), stat.S_IMODE(st.st_mode)))


# ----------------------------------------------------------------------------- owners and groups

# The MANIFEST's owner and group columns: (id -> name, name -> id, what to create when the name is unknown).
_ACCOUNTS = {
    'owner': (lambda uid: pwd.getpwuid(uid).pw_name, lambda name: pwd.getpwnam(name).pw_uid, 'user'),
    'group': (lambda gid: grp.getgrgid(gid).gr_name, lambda name: grp.getgrnam(name).gr_gid, 'group'),
}


def _name_of(column, number):
    """The name a MANIFEST row records for a uid (column owner) or gid (group): the number where none exists."""
    to_name = _ACCOUNTS[column][0]
    try:
        return to_name(number)
    except KeyError:
        return str(number)


def _id_of(column, name):
    """The uid (column owner) or gid (group) of a MANIFEST name on this host; a bare number is itself."""
    _, to_id, noun = _ACCOUNTS[column]
    try:
        return to_id(name)
    except KeyError:
        if name.isdigit():
            return int(name)
        raise TrashError('MANIFEST names %s %r, which does not exist on this host: create the %s first'
                         % (column, name, noun))


# ----------------------------------------------------------------------------- what may move

def protected_trees():
    """The system trees, every user's home directory and the unit trees below it."""
    trees = set(SYSTEM_TREES)
    try:
        homes = [entry.pw_dir for entry in pwd.getpwall()]
    except (KeyError, OSError):
        homes = []
    for home in homes:
        if home and os.path.isabs(home):
            home = os.path.normpath(home)
            trees.add(home)
            trees.update(os.path.join(home, sub) for sub in HOME_TREES)
    real = set()
    for tree in trees:
        real.add(tree)
        real.add(os.path.realpath(tree))   # /lib -> /usr/lib on merged-usr hosts: both spellings
    return real


MOUNTINFO = '/proc/self/mountinfo'
MOUNTINFO_MAX_BYTES = 16 * 1024 * 1024
# proc(5): id parent major:minor root mount-point options [optional fields...] - fstype source super-options.
# Fields are separated by one space; a space, tab, newline or backslash inside one is written \ooo.
_MOUNTINFO_LINE = re.compile(rb'[0-9]+ [0-9]+ [0-9]+:[0-9]+ ([^ ]+) (/[^ ]*) [^ ]+(?: [^ ]+)* - [^ ]+ [^ ]* [^ ]+')
_MOUNTINFO_ESCAPE = re.compile(rb'\\([0-7]{3})')


def _mountinfo_field(raw):
    return os.fsdecode(_MOUNTINFO_ESCAPE.sub(lambda m: bytes((int(m.group(1), 8) & 0xff,)), raw))


def parse_mountinfo(data, source=MOUNTINFO):
    """The mount points (kernel paths) in mountinfo bytes. A line not of proc(5)'s shape is a TrashError naming
    the source and the line: an unreadable mount table is no table, and nothing moves without one."""
    points = set()
    lines = data.split(b'\n')
    if lines and lines[-1] == b'':
        lines.pop()
    for number, line in enumerate(lines, 1):
        m = _MOUNTINFO_LINE.match(line)
        if not m or m.end() != len(line):
            raise TrashError('%s line %d is not a mount table line (proc(5): id parent major:minor root mount-point '
                             'options ... - fstype source options): %s. Nothing was moved.'
                             % (source, number, shown(escape_cell(line[:200]))))
        points.add(os.path.normpath(_mountinfo_field(m.group(2))))
    if not points:
        raise TrashError('%s lists no mount point (not even /): not a mount table. Nothing was moved.' % source)
    return frozenset(points)


def mount_points(path=MOUNTINFO):
    """Every mount point of this mount namespace, bind mounts included: a bind mount of a directory of the same
    filesystem has the same st_dev as its parent, so os.path.ismount() does not see it; the mount table does."""
    try:
        data = read_bytes(path, 'mount table', MOUNTINFO_MAX_BYTES)
    except FileRefused as exc:
        raise TrashError('%s: trash_files never moves a mount point, so it must read the mount table first; fix '
                         '/proc. Nothing was moved.' % shown(str(exc)))
    return parse_mountinfo(data, path)


def is_mount_point(path, mounts):
    """A mount point by the mount table (bind mounts, of files too) or by st_dev (os.path.ismount)."""
    norm = os.path.normpath(path)
    return norm in mounts or (not os.path.islink(norm) and os.path.ismount(norm))


def check_not_protected(path, trees=None, mounts=None):
    """Refuse a system tree, anything above one, a mount point and a tree with one inside (path is a kernel
    path). mounts: the mount table's mount points (mount_points() when None)."""
    trees = protected_trees() if trees is None else trees
    mounts = mount_points() if mounts is None else mounts
    norm = os.path.normpath(path)
    prefix = norm.rstrip('/') + '/'
    above = sorted(t for t in trees if t == norm or t.startswith(prefix))
    if above:
        raise TrashError('%s is %s: runtime_retire never moves a system tree, a home directory or anything above '
                         'one. Name the files of the runtime instead. Nothing was moved.'
                         % (shown(norm), 'a protected tree' if norm in above else 'above the protected tree %s' % above[0]))
    if is_mount_point(norm, mounts):
        raise TrashError('%s is a mount point: runtime_retire never moves a mounted filesystem (a bind mount '
                         'included). Name the files of the runtime on it instead. Nothing was moved.' % shown(norm))
    inside = sorted(m for m in mounts if m.startswith(prefix))
    if inside and os.path.isdir(norm) and not os.path.islink(norm):
        raise TrashError('%s has a mount point inside it (%s): runtime_retire never moves a mounted filesystem. '
                         'Name the files outside it instead. Nothing was moved.' % (shown(norm), shown(inside[0])))


def kernel_path(path):
    """The path the kernel means: every parent resolved (realpath), the last component left as is.

    A trailing '/', '.' or '..' makes the whole path a directory reference, resolved in full.
    """
    if not os.path.isabs(path):
        raise TrashError('path %r is not absolute: give the full path of the file to retire' % (path,))
    head, tail = os.path.split(path)
    if tail in ('', '.', '..'):
        return resolved(path, 'path')
    return os.path.join(resolved(head, 'parent of %s' % shown(path)), tail)


def resolved(path, what):
    """path's parents resolved as regular_file.open_dir walks them: a link is followed only where nobody else
    can have put it; a link at any depth in a directory another user can write is refused by name."""
    try:
        return resolve_path(path, what)
    except FileRefused as exc:
        raise TrashError('%s. trash_files never follows a link another user can change, at any depth: give the '
                         'real path. Nothing was moved.' % shown(str(exc)))


def check_unit_name(unit):
    """A unit name as systemd.unit(5) spells one; never a path."""
    if not isinstance(unit, str) or len(unit) > 255 or not UNIT_NAME.match(unit):
        raise TrashError('unit %r is not a unit name: expected name.service (or .socket, .timer, .target, ...), '
                         'letters, digits and :_.@-, no path separator, at most 255 bytes' % (unit,))
    return unit


def check_trash_dir(trash_dir):
    """An absolute trash directory that is not itself a system tree nor a symlink; returned with its parents resolved.

    A symlinked trash_dir would send root's writes wherever the link points (a link to /etc passes any check
    of the link's own name), so it is refused by name; its parents are resolved (realpath) and checked.
    """
    if not isinstance(trash_dir, str) or not os.path.isabs(trash_dir):
        raise TrashError('trash_dir %r is not absolute: give the full path (for example '
                         '/var/lib/dankfleet/trash/20260916-x-retire); a relative one would land below the '
                         "caller's working directory. Nothing was moved." % (trash_dir,))
    to_bytes(trash_dir, 'trash_dir')
    norm = os.path.normpath(trash_dir)
    if os.path.islink(norm):
        raise TrashError('trash_dir %s is a symlink (to %s): give the real directory, a link could point the trash '
                         'anywhere. Nothing was moved.' % (shown(norm), shown(os.readlink(norm))))
    real = resolved(norm, 'trash_dir')
    if real in protected_trees():
        raise TrashError('trash_dir %s is a system tree: give a directory of its own. Nothing was moved.' % shown(real))
    if os.path.lexists(real) and not os.path.isdir(real):
        raise TrashError('trash_dir %s exists and is not a directory: give a directory. Nothing was moved.'
                         % shown(real))
    return real


def trash_path(trash_dir, path):
    """Where ``path`` lives inside ``trash_dir`` (its absolute path below the trash)."""
    if not os.path.isabs(path):
        raise TrashError('path %r is not absolute: give the full path of the file to retire' % (path,))
    return os.path.join(trash_dir, os.path.normpath(path).lstrip('/'))


def describe(path, given=None, sha256=None):
    """One MANIFEST file row (as a dict) for an existing file or symlink.

    ``sha256``: the caller's digest of this very regular file, taken instead of hashing it again.
    """
    to_bytes(path, 'path')
    to_bytes(given or path, 'path')
    st = os.lstat(path)
    row = {
        'path': path,
        'given': given or path,
        'owner': _name_of('owner', st.st_uid),
        'group': _name_of('group', st.st_gid),
        'mode': '%04o' % stat.S_IMODE(st.st_mode),
        'sha256': '-',
        'link_target': '-',
        'parent': _identity(os.stat(os.path.dirname(path))),
    }
    if stat.S_ISLNK(st.st_mode):
        row['kind'] = 'link'
        row['link_target'] = os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        row['kind'] = 'file'
        row['sha256'] = sha256 or sha256_file(path)
    else:
        raise TrashError('%s is neither a regular file nor a symlink: list the files inside it instead' % shown(path))
    return row


def _describe_at(dir_fd, name):
    """kind, owner, group, mode, sha256, link_target of the entry ``name`` in an open directory (never followed)."""
    st = _lstat_at(dir_fd, name)
    if st is None:
        return None
    now = {'owner': _name_of('owner', st.st_uid), 'group': _name_of('group', st.st_gid),
           'mode': '%04o' % stat.S_IMODE(st.st_mode), 'sha256': '-', 'link_target': '-'}
    if stat.S_ISLNK(st.st_mode):
        now['kind'] = 'link'
        now['link_target'] = os.readlink(name, dir_fd=dir_fd)
    elif stat.S_ISREG(st.st_mode):
        now['kind'] = 'file'
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
        try:
            now['sha256'] = sha256_fd(fd)
        finally:
            os.close(fd)
    else:
        now['kind'] = 'other'
    return now


def expand(paths, trees=None, duplicates=None, mounts=None):
    """Files and links to move for the given paths: a directory stands for every file below it.

    Returns (kernel path, given spelling) pairs. Parents are resolved the kernel's way first;
    a system tree, a mount point or a tree with a mount point inside is refused. Two spellings
    of one directory entry (a symlinked parent, a bind mount) move once; each later spelling is
    appended to duplicates as {'given', 'same_as', 'path'}.
    """
    trees = protected_trees() if trees is None else trees
    mounts = mount_points() if mounts is None else mounts
    out = []
    for given in paths:
        path = kernel_path(given)
        check_not_protected(path, trees, mounts)
        if os.path.isdir(path) and not os.path.islink(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in list(dirs):
                    full = os.path.join(root, name)
                    if os.path.islink(full):
                        out.append((full, os.path.join(given, os.path.relpath(full, path))))
                    elif is_mount_point(full, mounts):
                        raise TrashError('%s has a mount point inside it (%s): runtime_retire never moves a mounted '
                                         'filesystem. Name the files outside it instead. Nothing was moved.'
                                         % (shown(given), shown(full)))
                for name in sorted(files):
                    full = os.path.join(root, name)
                    if is_mount_point(full, mounts):   # a file bind-mounted over another
                        raise TrashError('%s has a mount point inside it (%s): runtime_retire never moves a mounted '
                                         'file. Name the files outside it instead. Nothing was moved.'
                                         % (shown(given), shown(full)))
                    out.append((full, os.path.join(given, os.path.relpath(full, path))))
        else:
            out.append((path, given))
    seen = {}
    unique = []
    for path, given in out:
        norm = os.path.normpath(path)
        key = _entry_key(norm)
        if key in seen:
            if duplicates is not None and given != seen[key][1]:
                duplicates.append({'given': given, 'same_as': seen[key][1], 'path': seen[key][0]})
            continue
        seen[key] = (norm, given)
        unique.append((norm, given))
    return unique


def _entry_key(path):
    """One directory entry, however it is spelled: (device, inode) of its parent and its name."""
    head, tail = os.path.split(path)
    try:
        st = os.stat(head)
        return (st.st_dev, st.st_ino, tail)
    except OSError:
        return (None, None, path)


def unit_dirs(scope, user=None, root='/'):
    """The unit configuration directories we may touch for a scope."""
    if scope == 'system':
        return [os.path.join(root, d.lstrip('/')) for d in SYSTEM_UNIT_DIRS]
    if not user:
        raise TrashError('a user-scope unit needs its user: set user: for it')
    try:
        home = pwd.getpwnam(user).pw_dir
    except KeyError:
        raise TrashError('user %r of a user-scope unit does not exist on this host' % user)
    return [os.path.join(root, home.lstrip('/'), d) for d in USER_UNIT_DIRS]


def unit_paths(unit, scope, user=None, root='/'):
    """A unit's own file, its drop-in directory's files and every .wants/.requires link to it."""
    check_unit_name(unit)
    found = []
    for base in unit_dirs(scope, user, root):
        own = os.path.join(base, unit)
        if os.path.lexists(own):
            found.append(own)
        dropin = own + '.d'
        if os.path.isdir(dropin) and not os.path.islink(dropin):
            found.extend(path for path, given in expand([dropin], trees=()))
        for suffix in LINK_DIR_SUFFIXES:
            for link in sorted(glob.glob(os.path.join(glob.escape(base), '*' + suffix, glob.escape(unit)))):
                if os.path.lexists(link):
                    found.append(link)
    return found


def earlier_trash_dirs(trash_dir):
    """Trash directories of the same tag from other days (``<YYYYMMDD>-<tag>`` siblings)."""
    parent, base = os.path.split(os.path.normpath(trash_dir))
    match = re.match(r'^[0-9]{8}-(.+)$', base)
    if not match or not os.path.isdir(parent):
        return []
    pattern = os.path.join(glob.escape(parent), '[0-9]' * 8 + '-' + glob.escape(match.group(1)))
    return sorted(d for d in glob.glob(pattern) if os.path.normpath(d) != os.path.normpath(trash_dir))


# ----------------------------------------------------------------------------- the MANIFEST format

def _header(comments):
    lines = [to_bytes(MANIFEST_HEADER)]
    lines.extend(comment_line(c) for c in comments)
    lines.extend(to_bytes(line) for line in MANIFEST_LEGEND)
    return b''.join(line + b'\n' for line in lines)


def comment_line(comment):
    return b'# ' + escape_cell(comment, 'comment')


def file_line(row):
    cells = [to_bytes(row['kind'])]
    for column in FILE_COLUMNS[1:]:
        value = row.get(column)
        if column == 'given':
            value = value or row['path']
        elif column in ('sha256', 'link_target') and value == '-':
            value = None
        cells.append(escape_cell(value, column))
    return b'\t'.join(cells) + b'\n'


def unit_line(row):
    return b'\t'.join([b'unit'] + [escape_cell(row.get(c), c) for c in UNIT_COLUMNS[1:]]) + b'\n'


def state_line(state, row, reason=None):
    cells = [to_bytes(state), escape_cell(row['path'], 'path')]
    if reason is not None:
        cells.append(escape_cell(reason, 'reason'))
    return b'\t'.join(cells) + b'\n'


def format_manifest(file_rows, unit_rows, comments=()):
    """A whole v3 MANIFEST (bytes): unit rows, then each file row with its state ('moved' unless it says)."""
    out = [_header(comments)]
    out.extend(unit_line(row) for row in unit_rows)
    for row in file_rows:
        out.append(file_line(row))
        state = row.get('state', 'moved')
        if state in STATES:
            out.append(state_line(state, row, row.get('reason') if state == 'failed' else None))
    return b''.join(out)


def _check_utf8(data, source):
    """A MANIFEST is strict UTF-8 text (v3 writes every byte outside printable ASCII as \\xHH): a byte that is
    not is a refusal naming its line, before any row is believed."""
    try:
        data.decode('utf-8', 'strict')
    except UnicodeDecodeError as exc:
        raise TrashError('%s line %d is not UTF-8: byte 0x%02x at offset %d. A MANIFEST is UTF-8 text (every other '
                         'byte is written \\xHH); this one was edited or damaged: restore by hand from it. Nothing '
                         'was moved.' % (shown(source), data.count(b'\n', 0, exc.start) + 1, data[exc.start], exc.start))


def read_manifest(data, source='MANIFEST'):
    """A MANIFEST (bytes or str, any version) as {'version', 'comments', 'files', 'units', 'torn'}.

    Records end at b'\\n' only (never at \\v, \\x85, U+2028 ...). File rows carry 'state': 'moved',
    'failed' or 'pending' (written, its move not confirmed: a crash or a refusal came first). A v3 record
    cut off by a crash (no final newline) was never acted on; it is skipped and 'torn' says so.
    """
    if isinstance(data, str):
        data = to_bytes(data)
    _check_utf8(data, source)
    lines = data.split(b'\n')
    torn = False
    if lines and lines[-1] == b'':
        lines.pop()
    elif lines:
        torn = True
    first = lines[0].rstrip(b'\r').strip() if lines else b''
    versions = dict((to_bytes(h), n) for n, h in enumerate(MANIFEST_HEADERS, 1))
    if first not in versions:
        raise TrashError('%s does not start with %r: not a dankfleet.llm trash MANIFEST'
                         % (shown(source), MANIFEST_HEADER))
    version = versions[first]
    if version < 3:
        return _read_old(lines, version, torn, source)
    if torn:
        lines.pop()
    comments, units, files, by_path = [], [], [], {}
    for number, line in enumerate(lines[1:], 2):
        if line.startswith(b'## ') or not line.strip():
            continue
        if line.startswith(b'#'):
            cell = line[2:] if line.startswith(b'# ') else line[1:]
            comments.append(to_text(b'-' if cell == b'-' else unescape_cell(cell, source, number)))
            continue
        cells = line.split(b'\t')
        kind = cells[0]
        if kind in (b'file', b'link') and len(cells) == len(FILE_COLUMNS):
            values = [unescape_cell(c, source, number) for c in cells[1:]]
            row = {'kind': to_text(kind)}
            for column, value in zip(FILE_COLUMNS[1:], values):
                row[column] = None if value is None else to_text(value)
            if row['path'] is None or not os.path.isabs(row['path']):
                raise TrashError('%s line %d names a relative path %r: a MANIFEST row holds absolute paths'
                                 % (shown(source), number, row['path']))
            for column in ('sha256', 'link_target'):
                row[column] = '-' if row[column] is None else row[column]
            row['given'] = row['given'] or row['path']
            row['state'] = 'pending'
            if row['path'] in by_path:
                files[by_path[row['path']]] = row     # retried after a failure: the later row is the one
            else:
                by_path[row['path']] = len(files)
                files.append(row)
        elif kind == b'unit' and len(cells) == len(UNIT_COLUMNS):
            values = [unescape_cell(c, source, number) for c in cells[1:]]
            row = {'kind': 'unit'}
            for column, value in zip(UNIT_COLUMNS[1:], values):
                row[column] = None if value is None else to_text(value)
            units.append(row)
        elif kind in (b'moved', b'failed') and len(cells) in (2, 3):
            path = to_text(unescape_cell(cells[1], source, number) or b'')
            if path not in by_path:
                raise TrashError('%s line %d records a %s move of %r, which no row above names (edited by hand?)'
                                 % (shown(source), number, to_text(kind), shown(path)))
            row = files[by_path[path]]
            row['state'] = to_text(kind)
            if len(cells) == 3:
                row['reason'] = to_text(unescape_cell(cells[2], source, number) or b'')
        else:
            raise TrashError('%s line %d is malformed (%d tab-separated cells, kind %r): %r'
                             % (shown(source), number, len(cells), shown(kind), line))
    return {'version': 3, 'comments': comments, 'units': units, 'files': files, 'torn': torn}


def _read_old(lines, version, torn, source):
    """v1/v2: written after the moves, every row moved; no escaping (the writer refused tab and newline)."""
    comments, units, files = [], [], []
    if torn and not lines[-1].strip():
        lines.pop()
    for number, raw in enumerate(lines, 1):
        line = to_text(raw)
        if number == 1 or not line.strip():
            continue
        if line.startswith('#'):
            text = line[2:] if line.startswith('# ') else line[1:]
            if not (text.startswith('kind\t') and text.split('\t')[1] in ('path', 'unit')):
                comments.append(text)
            continue
        cells = line.split('\t')
        kind = cells[0]
        if kind in ('file', 'link') and len(cells) in (len(FILE_COLUMNS_V2), len(FILE_COLUMNS_V1)):
            row = dict(zip(FILE_COLUMNS, cells))
            row.setdefault('given', row['path'])    # v1: the path given was the path moved
            row.update({'parent': None, 'state': 'moved'})
            if not os.path.isabs(row['path']):
                raise TrashError('%s line %d names a relative path %r: a MANIFEST row holds absolute paths'
                                 % (shown(source), number, row['path']))
            files.append(row)
        elif kind == 'unit' and len(cells) == len(UNIT_COLUMNS):
            row = dict(zip(UNIT_COLUMNS, cells))
            units.append(dict((k, None if v == '-' else v) for k, v in row.items()))
        else:
            raise TrashError('%s line %d is malformed (%d tab-separated cells, kind %r): %r'
                             % (shown(source), number, len(cells), kind, line))
    return {'version': version, 'comments': comments, 'units': units, 'files': files, 'torn': torn}


def parse_manifest(text, source='MANIFEST'):
    """(file_rows, unit_rows) of a MANIFEST of any version (bytes or str); a malformed line is an error naming it."""
    parsed = read_manifest(text, source)
    return parsed['files'], parsed['units']


def _read_at(dir_fd, name, path):
    """The bytes of a MANIFEST in an open directory, read through the file layer: a regular file, not a link,
    owned by root or us, capped. An absent one is FileNotFoundError; any other refusal a TrashError."""
    try:
        fd = open_read_fd(name, 'MANIFEST', MANIFEST_MAX_BYTES, follow=False, dir_fd=dir_fd)
    except FileRefused as exc:
        if exc.errno == errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, 'no MANIFEST', path)
        if exc.errno == errno.ELOOP:
            raise TrashError('%s is a symlink: a MANIFEST is never read through a link. Nothing was moved.'
                             % shown(path))
        raise TrashError('%s %s. Nothing was moved.' % (shown(path), exc.cause))
    try:
        _check_owner(os.fstat(fd), path, 'MANIFEST')
        return read_fd(fd, path, 'MANIFEST', MANIFEST_MAX_BYTES)
    except FileRefused as exc:
        raise TrashError('%s %s. Nothing was moved.' % (shown(path), exc.cause))
    finally:
        os.close(fd)


def _read(manifest):
    """The (file_rows, unit_rows) of a MANIFEST file, read safely."""
    fd, _ = walk_dir(os.path.dirname(manifest))
    try:
        return parse_manifest(_read_at(fd, os.path.basename(manifest), manifest), manifest)
    finally:
        os.close(fd)


class _Log:
    """The MANIFEST as a write-ahead log: append, fsync, and on a failed write cut the torn record off."""

    def __init__(self, trash_fd, manifest, existing, comments, units):
        self.fd = None
        self.path = manifest
        self.trash_fd = trash_fd
        if existing is None:
            self._create(_header(comments) + b''.join(unit_line(u) for u in units))
            return
        if existing['version'] < 3:         # rewritten as v3 first, then appended to
            body = format_manifest(existing['files'], existing['units'], existing['comments'])
            self._replace(body)
        self.fd = os.open(MANIFEST_NAME, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | _O_CLOEXEC, dir_fd=trash_fd)
        size = os.fstat(self.fd).st_size
        if existing.get('torn'):
            os.ftruncate(self.fd, size - len(self._tail(size)))
        known = set(existing['comments'])
        known_units = set((u['unit'], u['scope'], u.get('user')) for u in existing['units'])
        extra = [comment_line(c) + b'\n' for c in comments if c not in known]
        extra += [unit_line(u) for u in units if (u['unit'], u['scope'], u.get('user')) not in known_units]
        self.append(b''.join(extra))

    def _tail(self, size):
        """The torn last record (no newline) of the MANIFEST."""
        fd = os.open(MANIFEST_NAME, _READ_FLAGS, dir_fd=self.trash_fd)
        try:
            data = os.pread(fd, min(size, MANIFEST_MAX_BYTES), 0)
        finally:
            os.close(fd)
        return data[data.rfind(b'\n') + 1:]

    def _create(self, body):
        self.fd = os.open(MANIFEST_NAME, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC,
                          0o600, dir_fd=self.trash_fd)
        try:
            self._write(body)
            os.fsync(self.trash_fd)
        except BaseException as exc:
            os.close(self.fd)
            self.fd = None
            os.unlink(MANIFEST_NAME, dir_fd=self.trash_fd)     # ours, just made, no row in it: nothing moved yet
            if isinstance(exc, OSError):
                raise TrashError('could not write the MANIFEST %s (%s): the trash filesystem is full or failing. '
                                 'Nothing was moved. Free space (or choose a trash on a larger filesystem) and '
                                 're-run.' % (shown(self.path), exc.strerror or exc))
            raise

    def _replace(self, body):
        tmp = MANIFEST_NAME + '.v3-tmp'
        if _lstat_at(self.trash_fd, tmp) is not None:
            os.unlink(tmp, dir_fd=self.trash_fd)              # a half conversion of ours from a crash
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC, 0o600, dir_fd=self.trash_fd)
        try:
            self._write_all(fd, body)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=self.trash_fd)
            raise
        os.close(fd)
        os.rename(tmp, MANIFEST_NAME, src_dir_fd=self.trash_fd, dst_dir_fd=self.trash_fd)
        os.fsync(self.trash_fd)

    @staticmethod
    def _write_all(fd, data):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def _write(self, data):
        self._write_all(self.fd, data)
        os.fsync(self.fd)

    def append(self, data):
        """Append records and fsync; on failure (a full trash) cut back to where it was and raise TrashError."""
        if not data:
            return
        size = os.fstat(self.fd).st_size
        try:
            self._write(data)
        except OSError as exc:
            try:
                os.ftruncate(self.fd, size)
            except OSError:
                pass                         # the reader skips a torn last record anyway
            raise TrashError('could not write the MANIFEST %s (%s): the trash filesystem is full or failing. '
                             'Nothing more was moved; what moved is on record there. Free space (or choose a '
                             'trash on a larger filesystem) and re-run.' % (shown(self.path), exc.strerror or exc))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# ----------------------------------------------------------------------------- moving one entry

def _renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_RENAMEAT2 = _renameat2()


def _rename_noreplace(src_fd, name, dst_fd, dest_name):
    """rename(2) between two open directories that never replaces an entry (EEXIST instead)."""
    if _RENAMEAT2 is not None:
        if _RENAMEAT2(src_fd, to_bytes(name), dst_fd, to_bytes(dest_name), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):     # EINVAL: a filesystem without RENAME_NOREPLACE
            raise OSError(err, os.strerror(err), name)
    if _lstat_at(dst_fd, dest_name) is not None:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dest_name)
    os.rename(name, dest_name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def _copy_xattrs(src, dst):
    for attr in getattr(os, 'listxattr', lambda fd: [])(src):
        try:
            os.setxattr(dst, attr, os.getxattr(src, attr))
        except OSError:
            pass                             # best effort, as shutil.copy2 does


def _copy_file(src_fd, name, dst_fd, dest_name, row, st):
    """Copy a regular file across filesystems: a new file (O_EXCL), same owner, mode, times; fsynced, verified."""
    sfd = os.open(name, _READ_FLAGS, dir_fd=src_fd)
    try:
        now = os.fstat(sfd)
        if not stat.S_ISREG(now.st_mode) or now.st_ino != st.st_ino:
            raise TrashError('%s changed since it was planned (now another file): nothing of it moved'
                             % shown(row['path']))
        dfd = os.open(dest_name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _O_CLOEXEC, 0o600,
                      dir_fd=dst_fd)
        try:
            try:
                while True:
                    chunk = os.read(sfd, _COPY_CHUNK)
                    if not chunk:
                        break
                    _Log._write_all(dfd, chunk)
                os.fchown(dfd, now.st_uid, now.st_gid)
                os.fchmod(dfd, stat.S_IMODE(now.st_mode))
                _copy_xattrs(sfd, dfd)
                os.utime(dfd, ns=(now.st_atime_ns, now.st_mtime_ns))
                os.fsync(dfd)
                if row['sha256'] != '-' and sha256_fd(dfd) != row['sha256']:
                    raise TrashError('the copy of %s does not match its sha256 %s: the original is left in place'
                                     % (shown(row['path']), row['sha256']))
                os.fsync(dst_fd)
            finally:
                os.close(dfd)
        except BaseException:
            os.unlink(dest_name, dir_fd=dst_fd)      # our own half copy; the original is untouched
            raise
    finally:
        os.close(sfd)


def _copy_link(src_fd, name, dst_fd, dest_name, st):
    target = os.readlink(name, dir_fd=src_fd)
    os.symlink(target, dest_name, dir_fd=dst_fd)
    try:
        os.chown(dest_name, st.st_uid, st.st_gid, dir_fd=dst_fd, follow_symlinks=False)
        os.fsync(dst_fd)
    except BaseException:
        os.unlink(dest_name, dir_fd=dst_fd)
        raise


def move_at(src_fd, name, dst_fd, dest_name, row, st=None):
    """Move one entry between open directories, never replacing one; across filesystems copy, fsync, verify,
    then unlink. On any failure the original is where it was. Returns 'renamed' or 'copied'."""
    st = st or os.stat(name, dir_fd=src_fd, follow_symlinks=False)
    try:
        _rename_noreplace(src_fd, name, dst_fd, dest_name)
        os.fsync(dst_fd)
        if not os.path.samestat(os.fstat(src_fd), os.fstat(dst_fd)):
            os.fsync(src_fd)
        return 'renamed'
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    if stat.S_ISLNK(st.st_mode):
        _copy_link(src_fd, name, dst_fd, dest_name, st)
    else:
        _copy_file(src_fd, name, dst_fd, dest_name, row, st)
    os.unlink(name, dir_fd=src_fd)
    os.fsync(src_fd)
    return 'copied'


def _verify(path, row):
    """Differences between the file at ``path`` and its MANIFEST row, as text; empty when identical."""
    fd, _ = walk_dir(os.path.dirname(path))
    try:
        return _verify_at(fd, os.path.basename(path), row)
    finally:
        os.close(fd)


def _verify_at(dir_fd, name, row):
    now = _describe_at(dir_fd, name)
    if now is None:
        return ['missing']
    problems = []
    for key in ('kind', 'owner', 'group', 'sha256', 'link_target'):
        if now[key] != row[key]:
            problems.append('%s %s != %s' % (key, shown(now[key]), shown(row[key])))
    if row['kind'] == 'file' and now['mode'] != row['mode']:
        problems.append('mode %s != %s' % (now['mode'], row['mode']))
    return problems


def _result(plan, trash_dir, manifest):
    """What retire and restore report of a plan of (src, dest, row) moves."""
    return {
        'changed': bool(plan),
        'trash_dir': trash_dir,
        'manifest': manifest,
        'moves': [{'src': src, 'dest': dest, 'kind': row['kind'], 'sha256': row['sha256'],
                   'link_target': row['link_target']} for src, dest, row in plan],
    }


def _existing_manifest(trash_dir, manifest):
    """The parsed MANIFEST of an existing trash directory (owner-checked), or None."""
    try:
        fd, _ = walk_dir(trash_dir)
    except FileNotFoundError:
        return None
    try:
        _check_owner(os.fstat(fd), trash_dir, 'trash_dir')
        if _lstat_at(fd, MANIFEST_NAME) is None:
            return None
        return read_manifest(_read_at(fd, MANIFEST_NAME, manifest), manifest)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- retire

def moves_diff(result):
    """Ansible's diff of a retire or restore result: the moved paths where they were, and where they went (or would
    go, in check mode), one per line in the order they move."""
    moves = result.get('moves') or []
    return {
        'before_header': '%s: paths before' % result.get('trash_dir'),
        'after_header': '%s: paths after' % result.get('trash_dir'),
        'before': ''.join('%s\n' % m['src'] for m in moves),
        'after': ''.join('%s\n' % m['dest'] for m in moves),
    }


def retire(trash_dir, paths, units=(), check_mode=False, comments=(), known_sha256=None):
    """Move ``paths`` (and what they expand to) into ``trash_dir``; return what happened.

    ``known_sha256`` maps a path as given to the sha256 its caller just computed of it (a multi-GiB
    file is then not hashed again for its row); the file in the trash is still verified against it.

    A path that is absent but already sits in the trash counts as retired; one that is
    absent everywhere is reported as missing. A path whose trash slot is taken by
    different content is a refusal: nothing is overwritten.

    Each move's row is in the MANIFEST, fsynced, before the move starts; a ``moved`` line follows it.
    """
    trash_dir = check_trash_dir(trash_dir)
    for unit in units:
        check_unit_name(unit.get('unit'))
        for column in UNIT_COLUMNS[1:]:
            if unit.get(column) is not None:
                to_bytes(unit[column], 'unit %s' % column)
    for comment in comments:
        to_bytes(comment, 'comment')
    manifest = os.path.join(trash_dir, MANIFEST_NAME)
    existing = _existing_manifest(trash_dir, manifest)

    earlier = earlier_trash_dirs(trash_dir)
    plan, already, missing, duplicates = [], [], [], []
    for path, given in expand(paths, duplicates=duplicates):
        dest = trash_path(trash_dir, path)
        if path == trash_dir or path.startswith(trash_dir + os.sep):
            raise TrashError('%s lies inside the trash directory %s: it cannot be retired into itself'
                             % (shown(given), shown(trash_dir)))
        if trash_dir.startswith(path.rstrip('/') + '/'):
            raise TrashError('the trash directory %s lies inside %s: it cannot be retired into itself'
                             % (shown(trash_dir), shown(given)))
        if os.path.lexists(path):
            row = describe(path, given, (known_sha256 or {}).get(given))
            if os.path.lexists(dest):
                raise TrashError(
                    '%s cannot be retired: %s already exists in the trash (an earlier retire into the same '
                    'directory). Restore or move that one aside, or retire under another tag.'
                    % (shown(path), shown(dest)))
            plan.append((path, dest, row))
        elif os.path.lexists(dest):
            already.append({'src': path, 'dest': dest})
        else:
            for other in earlier:
                if os.path.lexists(trash_path(other, path)):
                    already.append({'src': path, 'dest': trash_path(other, path)})
                    break
            else:
                missing.append(path)

    result = _result(plan, trash_dir, manifest)
    result.update({
        'already_retired': already,
        'missing': missing,
        'duplicates': duplicates,
    })
    if check_mode or not plan:
        return result

    trash_fd, created = walk_dir(trash_dir, create=True, leaf_mode=0o700)
    try:
        if not created:
            _check_owner(os.fstat(trash_fd), trash_dir, 'trash_dir')
        log = _Log(trash_fd, manifest, existing, comments, [dict(u, kind='unit') for u in units])
        try:
            for path, dest, row in plan:
                log.append(file_line(row))           # on record (fsynced) before anything moves
                try:
                    _retire_one(trash_fd, trash_dir, path, dest, row)
                except FileNotFoundError:
                    _failed(log, row, 'vanished before it was moved')
                    raise TrashError('%s (given as %s) vanished before it was moved: another spelling of it moved '
                                     'it already, or something else removed it. What moved is in %s'
                                     % (shown(path), shown(row['given']), shown(manifest)))
                except FileExistsError:
                    _failed(log, row, 'its place in the trash was taken')
                    raise TrashError('%s cannot be retired: %s appeared in the trash meanwhile. Nothing was '
                                     'overwritten; %s stays where it was. What moved is in %s'
                                     % (shown(path), shown(dest), shown(path), shown(manifest)))
                except (OSError, TrashError) as exc:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                    _failed(log, row, reason)
                    raise TrashError('%s could not be moved to the trash (%s): it stays where it was, the MANIFEST '
                                     '%s says so, and what moved before it is on record there. Fix the cause '
                                     '(a full trash filesystem: free space or choose a larger one) and re-run.'
                                     % (shown(path), shown(reason), shown(manifest)))
                log.append(state_line('moved', row))
        finally:
            log.close()
    finally:
        os.close(trash_fd)
    for path, dest, row in plan:
        problems = _verify(dest, row)
        if problems:
            raise TrashError('%s in the trash differs from the original (%s)' % (shown(dest), '; '.join(problems)))
    return result


def _failed(log, row, reason):
    """Record that a move did not happen; a full trash may refuse even that (the row then reads as pending)."""
    try:
        log.append(state_line('failed', row, reason))
    except TrashError:
        pass


def _retire_one(trash_fd, trash_dir, path, dest, row):
    head, name = os.path.split(path)
    src_fd, _ = walk_dir(head)
    try:
        if not _same_dir(row['parent'], os.fstat(src_fd)):
            raise TrashError('%s is no longer the directory planned (%s): nothing of it moved' % (shown(head), row['parent']))
        st = _lstat_at(src_fd, name)
        if st is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
        if row['kind'] == 'link' and not stat.S_ISLNK(st.st_mode) or \
                row['kind'] == 'file' and not stat.S_ISREG(st.st_mode):
            raise TrashError('%s changed kind since it was planned: nothing of it moved' % shown(path))
        rel = os.path.relpath(os.path.dirname(dest), trash_dir)
        dst_fd, _ = walk_dir('' if rel == '.' else rel, base_fd=trash_fd, base=trash_dir, create=True)
        try:
            move_at(src_fd, name, dst_fd, name, row, st)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


# ----------------------------------------------------------------------------- restore

def _trash_entries(trash_fd, trash_dir):
    """Every file and link below an open trash directory (never followed), but its MANIFEST* files."""
    found = []

    def walk(fd, rel):
        for entry in sorted(os.listdir(fd)):
            if not rel and entry.startswith(MANIFEST_NAME):
                continue
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(entry, _DIR_FLAGS, dir_fd=fd)
                try:
                    walk(sub, os.path.join(rel, entry))
                finally:
                    os.close(sub)
            else:
                found.append(os.path.join(trash_dir, rel, entry))
    walk(trash_fd, '')
    return found


def _check_accounted(trash_fd, trash_dir, files, manifest):
    named = set(trash_path(trash_dir, row['path']) for row in files)
    extra = [p for p in _trash_entries(trash_fd, trash_dir) if p not in named]
    if extra:
        raise TrashError('%s accounts for %d file(s) but the trash directory holds %d it does not name (%s%s): the '
                         'MANIFEST was cut short or edited, so a restore from it would leave files behind. Nothing '
                         'was moved. Restore by hand, or add their rows back to the MANIFEST.'
                         % (shown(manifest), len(files), len(extra), ', '.join(shown(p) for p in extra[:5]),
                            ', ...' if len(extra) > 5 else ''))


def _dest_parent(row):
    """(fd or None, name) of a restore target's parent: None when missing (it is made); refused when a component
    is a symlink or the parent is not the directory the file was retired from."""
    head, name = os.path.split(row['path'])
    try:
        fd, _ = walk_dir(head)
    except FileNotFoundError:
        return None, name
    st = os.fstat(fd)
    if not _same_dir(row.get('parent'), st):
        os.close(fd)
        raise TrashError('%s cannot be restored: %s is not the directory it was retired from (inode %s then, %d now): '
                         'something replaced it since the retire. Check it; if it is right, move it aside (the '
                         'restore makes it again) or restore this file by hand. Nothing was moved.'
                         % (shown(row['path']), shown(head), row['parent'].split(':')[-1], st.st_ino))
    return fd, name


def restore(trash_dir, check_mode=False, now=None):
    """Move every file of ``trash_dir``'s MANIFEST back to its original path, byte-identical."""
    trash_dir = check_trash_dir(trash_dir)
    manifest = os.path.join(trash_dir, MANIFEST_NAME)
    try:
        trash_fd, _ = walk_dir(trash_dir)
    except FileNotFoundError:
        raise TrashError('%s has no MANIFEST: not a trash directory written by runtime_retire '
                         '(look for <trash>/<YYYYMMDD>-<tag>/MANIFEST)' % shown(trash_dir))
    try:
        _check_owner(os.fstat(trash_fd), trash_dir, 'trash_dir')
        if _lstat_at(trash_fd, MANIFEST_NAME) is None:
            done = sorted(n for n in os.listdir(trash_fd) if n.startswith(MANIFEST_NAME + '.restored-'))
            if done:
                path = os.path.join(trash_dir, done[-1])
                units = read_manifest(_read_at(trash_fd, done[-1], path), path)['units']
                return {'changed': False, 'trash_dir': trash_dir, 'manifest': path, 'moves': [],
                        'already_restored': True, 'units': units, 'in_place': []}
            raise TrashError('%s has no MANIFEST: not a trash directory written by runtime_retire '
                             '(look for <trash>/<YYYYMMDD>-<tag>/MANIFEST)' % shown(trash_dir))
        parsed = read_manifest(_read_at(trash_fd, MANIFEST_NAME, manifest), manifest)
        _check_accounted(trash_fd, trash_dir, parsed['files'], manifest)
        plan, in_place, leftovers = _restore_plan(trash_fd, trash_dir, parsed['files'], manifest)
        result = _result(plan, trash_dir, manifest)
        result.update({'in_place': in_place, 'already_restored': False, 'units': parsed['units']})
        if leftovers:
            result['leftovers'] = leftovers
        if check_mode:
            result['changed'] = True
            return result
        for src, dest, row in plan:
            _restore_one(trash_fd, trash_dir, src, dest, row)
        stamp = (now or datetime.datetime.utcnow()).strftime('%Y%m%dT%H%M%SZ')
        done = MANIFEST_NAME + '.restored-' + stamp
        _rename_noreplace(trash_fd, MANIFEST_NAME, trash_fd, done)
        os.fsync(trash_fd)
    finally:
        os.close(trash_fd)
    result['changed'] = True
    result['manifest'] = os.path.join(trash_dir, done)
    return result


def _restore_plan(trash_fd, trash_dir, files, manifest):
    """(plan, in_place, leftovers), every check made before anything moves."""
    plan, in_place, leftovers = [], [], []
    for row in files:
        src = trash_path(trash_dir, row['path'])
        dest = row['path']
        parent_fd, name = _dest_parent(row)
        try:
            here = [] if parent_fd is None or _lstat_at(parent_fd, name) is None else _verify_at(parent_fd, name, row)
            at_dest = parent_fd is not None and _lstat_at(parent_fd, name) is not None
        finally:
            if parent_fd is not None:
                os.close(parent_fd)
        src_fd, src_name = _trash_parent(trash_fd, trash_dir, src)
        try:
            in_trash = src_fd is not None and _lstat_at(src_fd, src_name) is not None
            there = _verify_at(src_fd, src_name, row) if in_trash else ['missing']
        finally:
            if src_fd is not None:
                os.close(src_fd)
        if row['state'] != 'moved' and at_dest and not here:
            in_place.append(dest)            # the move never happened (or was undone): the original is there
            if in_trash:
                leftovers.append(src)        # a copy cut off by a crash: kept, never deleted
            continue
        if at_dest:
            if not here and not in_trash:
                in_place.append(dest)
                continue
            raise TrashError('%s cannot be restored: %s exists already (%s). Move it aside first.'
                             % (shown(src), shown(dest), '; '.join(here) if here else
                                'identical, and the trash copy exists too'))
        if not in_trash:
            raise TrashError('%s is listed in %s but is neither in the trash (%s) nor at its original path'
                             % (shown(row['path']), shown(manifest), shown(src)))
        if there:
            raise TrashError('%s in the trash no longer matches its MANIFEST row (%s): refusing to restore it'
                             % (shown(src), '; '.join(there)))
        plan.append((src, dest, row))
    return plan, in_place, leftovers


def _trash_parent(trash_fd, trash_dir, src):
    rel = os.path.relpath(os.path.dirname(src), trash_dir)
    try:
        fd, _ = walk_dir('' if rel == '.' else rel, base_fd=trash_fd, base=trash_dir)
    except FileNotFoundError:
        return None, os.path.basename(src)
    return fd, os.path.basename(src)


def _restore_one(trash_fd, trash_dir, src, dest, row):
    head, name = os.path.split(dest)
    src_fd, src_name = _trash_parent(trash_fd, trash_dir, src)
    try:
        dst_fd, created = walk_dir(head, create=True)
        try:
            if not created and not _same_dir(row.get('parent'), os.fstat(dst_fd)):
                raise TrashError('%s was replaced while the restore ran: %s stays in the trash' % (shown(head), shown(src)))
            try:
                move_at(src_fd, src_name, dst_fd, name, row)
            except FileExistsError:
                raise TrashError('%s cannot be restored: %s appeared meanwhile. Nothing was overwritten.'
                                 % (shown(src), shown(dest)))
            uid, gid = _id_of('owner', row['owner']), _id_of('group', row['group'])
            if row['kind'] == 'file':
                fd = os.open(name, _READ_FLAGS, dir_fd=dst_fd)
                try:
                    os.fchown(fd, uid, gid)
                    os.fchmod(fd, int(row['mode'], 8))
                finally:
                    os.close(fd)
            else:
                os.chown(name, uid, gid, dir_fd=dst_fd, follow_symlinks=False)
            problems = _verify_at(dst_fd, name, row)
            if problems:
                raise TrashError('%s was restored but differs from its MANIFEST row (%s)'
                                 % (shown(dest), '; '.join(problems)))
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
