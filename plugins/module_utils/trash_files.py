# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Move files into a dated trash directory with a MANIFEST, and put them back.

Plain Python, no Ansible import, so unit tests drive it in a temp tree.

A retired file keeps its original absolute path below the trash directory
(``/etc/systemd/system/x.service`` -> ``<trash>/etc/systemd/system/x.service``),
so ``ls -R`` of the trash reads like the host it came from. Symlinks move as
symlinks (a unit file that is a link into a repo stays a link, pointing where
it pointed), and nothing is ever deleted: a move across filesystems copies,
verifies the copy's sha256 and only then unlinks the original.

The MANIFEST is tab-separated text a person can read and restore from by hand:

    # dankfleet.llm trash MANIFEST v2
    # kind  path  owner  group  mode  sha256  link_target  given
    file  /etc/systemd/system/x.service  root  root  0644  <sha256>  -  /etc/systemd/system/x.service
    link  /etc/systemd/system/multi-user.target.wants/x.service  root  root  0777  -  /etc/...  /etc/...

``path`` is the file that moved, as the kernel names it (every parent resolved with
realpath, the last component left alone so a symlink moves as a symlink); ``given``
is the path as the caller spelled it. A v1 MANIFEST (no ``given`` column) still restores.

What never moves: a system tree (/, /etc, /usr, /home, a user's home, the unit
directories ...) or anything above one, a mount point, or a tree with a mount point
inside; the trash directory must be absolute. Those are refusals before anything moves.
    # kind  unit  scope  user  active_state  unit_file_state  sub_state
    unit  x.service  system  -  active  enabled  running

Restoring moves every file back, checks owner, group, mode and sha256 (or the
link target) against the MANIFEST, and renames the MANIFEST to
``MANIFEST.restored-<UTC time>`` so the directory can take a later retire.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import datetime
import errno
import glob
import grp
import os
import pwd
import re
import shutil
import stat

from ansible_collections.dankfleet.llm.plugins.module_utils.sha256 import sha256_file

MANIFEST_NAME = 'MANIFEST'
MANIFEST_HEADER = '# dankfleet.llm trash MANIFEST v2'
MANIFEST_HEADERS = ('# dankfleet.llm trash MANIFEST v1', MANIFEST_HEADER)
FILE_COLUMNS = ('kind', 'path', 'owner', 'group', 'mode', 'sha256', 'link_target', 'given')
FILE_COLUMNS_V1 = FILE_COLUMNS[:7]
UNIT_COLUMNS = ('kind', 'unit', 'scope', 'user', 'active_state', 'unit_file_state', 'sub_state')
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


class TrashError(Exception):
    """A refusal with a message that names the path and what to do about it."""


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


def _check_text(value, what):
    if any(c in value for c in '\t\n\r'):
        raise TrashError('%s %r contains a tab or newline, which the MANIFEST cannot record: rename it first'
                         % (what, value))
    return value


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


def check_not_protected(path, trees=None):
    """Refuse a system tree, anything above one, and a mount point (path is a kernel path)."""
    trees = protected_trees() if trees is None else trees
    norm = os.path.normpath(path)
    prefix = norm.rstrip('/') + '/'
    above = sorted(t for t in trees if t == norm or t.startswith(prefix))
    if above:
        raise TrashError('%s is %s: runtime_retire never moves a system tree, a home directory or anything above '
                         'one. Name the files of the runtime instead. Nothing was moved.'
                         % (norm, 'a protected tree' if norm in above else 'above the protected tree %s' % above[0]))
    if os.path.isdir(norm) and not os.path.islink(norm) and os.path.ismount(norm):
        raise TrashError('%s is a mount point: runtime_retire never moves a mounted filesystem. Name the files '
                         'of the runtime on it instead. Nothing was moved.' % norm)


def kernel_path(path):
    """The path the kernel means: every parent resolved (realpath), the last component left as is.

    A trailing '/', '.' or '..' makes the whole path a directory reference, resolved in full.
    """
    if not os.path.isabs(path):
        raise TrashError('path %r is not absolute: give the full path of the file to retire' % path)
    head, tail = os.path.split(path)
    if tail in ('', '.', '..'):
        return os.path.realpath(path)
    return os.path.join(os.path.realpath(head), tail)


def check_unit_name(unit):
    """A unit name as systemd.unit(5) spells one; never a path."""
    if not isinstance(unit, str) or len(unit) > 255 or not UNIT_NAME.match(unit):
        raise TrashError('unit %r is not a unit name: expected name.service (or .socket, .timer, .target, ...), '
                         'letters, digits and :_.@-, no path separator, at most 255 bytes' % (unit,))
    return unit


def check_trash_dir(trash_dir):
    """An absolute trash directory that is not itself a system tree; returned normalised."""
    if not isinstance(trash_dir, str) or not os.path.isabs(trash_dir):
        raise TrashError('trash_dir %r is not absolute: give the full path (for example '
                         '/var/lib/dankfleet/trash/20260916-x-retire); a relative one would land below the '
                         "caller's working directory. Nothing was moved." % (trash_dir,))
    real = kernel_path(os.path.normpath(trash_dir))
    if real in protected_trees():
        raise TrashError('trash_dir %s is a system tree: give a directory of its own. Nothing was moved.' % real)
    return real


def trash_path(trash_dir, path):
    """Where ``path`` lives inside ``trash_dir`` (its absolute path below the trash)."""
    if not os.path.isabs(path):
        raise TrashError('path %r is not absolute: give the full path of the file to retire' % path)
    return os.path.join(trash_dir, os.path.normpath(path).lstrip('/'))


def describe(path, given=None, sha256=None):
    """One MANIFEST file row (as a dict) for an existing file or symlink.

    ``sha256``: the caller's digest of this very regular file, taken instead of hashing it again.
    """
    _check_text(path, 'path')
    _check_text(given or path, 'path')
    st = os.lstat(path)
    row = {
        'path': path,
        'given': given or path,
        'owner': _name_of('owner', st.st_uid),
        'group': _name_of('group', st.st_gid),
        'mode': '%04o' % stat.S_IMODE(st.st_mode),
        'sha256': '-',
        'link_target': '-',
    }
    if stat.S_ISLNK(st.st_mode):
        row['kind'] = 'link'
        row['link_target'] = _check_text(os.readlink(path), 'link target of %s' % path)
    elif stat.S_ISREG(st.st_mode):
        row['kind'] = 'file'
        row['sha256'] = sha256 or sha256_file(path)
    else:
        raise TrashError('%s is neither a regular file nor a symlink: list the files inside it instead' % path)
    return row


def expand(paths, trees=None, duplicates=None):
    """Files and links to move for the given paths: a directory stands for every file below it.

    Returns (kernel path, given spelling) pairs. Parents are resolved the kernel's way first;
    a system tree, a mount point or a tree with a mount point inside is refused. Two spellings
    of one directory entry (a symlinked parent, a bind mount) move once; each later spelling is
    appended to duplicates as {'given', 'same_as', 'path'}.
    """
    trees = protected_trees() if trees is None else trees
    out = []
    for given in paths:
        path = kernel_path(given)
        check_not_protected(path, trees)
        if os.path.isdir(path) and not os.path.islink(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in list(dirs):
                    full = os.path.join(root, name)
                    if os.path.islink(full):
                        out.append((full, os.path.join(given, os.path.relpath(full, path))))
                    elif os.path.ismount(full):
                        raise TrashError('%s has a mount point inside it (%s): runtime_retire never moves a mounted '
                                         'filesystem. Name the files outside it instead. Nothing was moved.'
                                         % (given, full))
                for name in sorted(files):
                    full = os.path.join(root, name)
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


def format_manifest(file_rows, unit_rows, comments=()):
    lines = [MANIFEST_HEADER]
    lines.extend('# %s' % c for c in comments)
    lines.append('# ' + '\t'.join(FILE_COLUMNS))
    for row in file_rows:
        cells = [(row.get(c) or row['path']) if c == 'given' else row[c] for c in FILE_COLUMNS[1:]]
        lines.append('\t'.join([row['kind']] + cells))
    lines.append('# ' + '\t'.join(UNIT_COLUMNS))
    for row in unit_rows:
        lines.append('\t'.join(['unit'] + [row.get(c) or '-' for c in UNIT_COLUMNS[1:]]))
    return '\n'.join(lines) + '\n'


def parse_manifest(text, source='MANIFEST'):
    """(file_rows, unit_rows) of a MANIFEST; a malformed line is an error naming its number."""
    files, units = [], []
    lines = text.splitlines()
    if not lines or lines[0].strip() not in MANIFEST_HEADERS:
        raise TrashError('%s does not start with %r: not a dankfleet.llm trash MANIFEST' % (source, MANIFEST_HEADER))
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith('#'):
            continue
        cells = line.split('\t')
        kind = cells[0]
        if kind in ('file', 'link') and len(cells) in (len(FILE_COLUMNS), len(FILE_COLUMNS_V1)):
            row = dict(zip(FILE_COLUMNS, cells))
            row.setdefault('given', row['path'])    # v1: the path given was the path moved
            if not os.path.isabs(row['path']):
                raise TrashError('%s line %d names a relative path %r: a MANIFEST row holds absolute paths'
                                 % (source, number, row['path']))
            files.append(row)
        elif kind == 'unit' and len(cells) == len(UNIT_COLUMNS):
            row = dict(zip(UNIT_COLUMNS, cells))
            units.append(dict((k, None if v == '-' else v) for k, v in row.items()))
        else:
            raise TrashError('%s line %d is malformed (%d tab-separated cells, kind %r): %r'
                             % (source, number, len(cells), kind, line))
    return files, units


def _move(src, dest, row):
    """Rename, or copy-verify-unlink across filesystems; the destination must not exist."""
    parent = os.path.dirname(dest)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    try:
        os.rename(src, dest)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    st = os.lstat(src)
    if row['kind'] == 'link':
        os.symlink(os.readlink(src), dest)
        os.lchown(dest, st.st_uid, st.st_gid)
    else:
        shutil.copy2(src, dest)
        os.chown(dest, st.st_uid, st.st_gid)
        os.chmod(dest, stat.S_IMODE(st.st_mode))
        if sha256_file(dest) != row['sha256']:
            raise TrashError('copy of %s to %s does not match its sha256; the original is left in place' % (src, dest))
    os.unlink(src)


def _verify(path, row):
    """Differences between the file at ``path`` and its MANIFEST row, as text; empty when identical."""
    if not os.path.lexists(path):
        return ['missing']
    now = describe(path)
    problems = []
    for key in ('kind', 'owner', 'group', 'sha256', 'link_target'):
        if now[key] != row[key]:
            problems.append('%s %s != %s' % (key, now[key], row[key]))
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


def retire(trash_dir, paths, units=(), check_mode=False, comments=(), known_sha256=None):
    """Move ``paths`` (and what they expand to) into ``trash_dir``; return what happened.

    ``known_sha256`` maps a path as given to the sha256 its caller just computed of it (a multi-GiB
    file is then not hashed again for its row); the file in the trash is still verified against it.

    A path that is absent but already sits in the trash counts as retired; one that is
    absent everywhere is reported as missing. A path whose trash slot is taken by
    different content is a refusal: nothing is overwritten.
    """
    trash_dir = check_trash_dir(trash_dir)
    for unit in units:
        check_unit_name(unit.get('unit'))
    manifest = os.path.join(trash_dir, MANIFEST_NAME)
    old_files, old_units = [], []
    if os.path.exists(manifest):
        with open(manifest) as handle:
            old_files, old_units = parse_manifest(handle.read(), manifest)

    earlier = earlier_trash_dirs(trash_dir)
    plan, already, missing, duplicates = [], [], [], []
    for path, given in expand(paths, duplicates=duplicates):
        dest = trash_path(trash_dir, path)
        if path == trash_dir or path.startswith(trash_dir + os.sep):
            raise TrashError('%s lies inside the trash directory %s: it cannot be retired into itself' % (given, trash_dir))
        if trash_dir.startswith(path.rstrip('/') + '/'):
            raise TrashError('the trash directory %s lies inside %s: it cannot be retired into itself' % (trash_dir, given))
        if os.path.lexists(path):
            row = describe(path, given, (known_sha256 or {}).get(given))
            if os.path.lexists(dest):
                raise TrashError(
                    '%s cannot be retired: %s already exists in the trash (an earlier retire into the same '
                    'directory). Restore or move that one aside, or retire under another tag.' % (path, dest))
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

    if not os.path.isdir(trash_dir):
        os.makedirs(trash_dir, 0o700)
    moved_rows = []
    try:
        for path, dest, row in plan:
            try:
                _move(path, dest, row)
            except FileNotFoundError:
                raise TrashError('%s (given as %s) vanished before it was moved: another spelling of it moved it '
                                 'already, or something else removed it. What moved is in %s'
                                 % (path, row['given'], manifest))
            moved_rows.append(row)
    finally:
        # Whatever moved is on record, even if a later move failed.
        if moved_rows:
            unit_rows = list(old_units)
            known = set((u['unit'], u['scope'], u.get('user')) for u in unit_rows)
            for unit in units:
                key = (unit['unit'], unit['scope'], unit.get('user'))
                if key not in known:
                    unit_rows.append(unit)
                    known.add(key)
            rows = [r for r in old_files if r['path'] not in set(m['path'] for m in moved_rows)] + moved_rows
            tmp = manifest + '.tmp'
            with open(tmp, 'w') as handle:
                handle.write(format_manifest(rows, unit_rows, comments))
            os.chmod(tmp, 0o600)
            os.rename(tmp, manifest)
    for path, dest, row in plan:
        problems = _verify(dest, row)
        if problems:
            raise TrashError('%s in the trash differs from the original (%s)' % (dest, '; '.join(problems)))
    return result


def restore(trash_dir, check_mode=False, now=None):
    """Move every file of ``trash_dir``'s MANIFEST back to its original path, byte-identical."""
    trash_dir = check_trash_dir(trash_dir)
    manifest = os.path.join(trash_dir, MANIFEST_NAME)
    if not os.path.exists(manifest):
        done = sorted(glob.glob(os.path.join(glob.escape(trash_dir), MANIFEST_NAME + '.restored-*')))
        if done:
            _, units = _read(done[-1])
            return {'changed': False, 'trash_dir': trash_dir, 'manifest': done[-1], 'moves': [],
                    'already_restored': True, 'units': units}
        raise TrashError('%s has no MANIFEST: not a trash directory written by runtime_retire '
                         '(look for <trash>/<YYYYMMDD>-<tag>/MANIFEST)' % trash_dir)
    files, units = _read(manifest)

    plan, in_place = [], []
    for row in files:
        src = trash_path(trash_dir, row['path'])
        dest = row['path']
        if os.path.lexists(dest):
            problems = _verify(dest, row)
            if not problems and not os.path.lexists(src):
                in_place.append(dest)
                continue
            raise TrashError('%s cannot be restored: %s exists already (%s). Move it aside first.'
                             % (src, dest, '; '.join(problems) if problems else 'identical, and the trash copy exists too'))
        if not os.path.lexists(src):
            raise TrashError('%s is listed in %s but is neither in the trash (%s) nor at its original path'
                             % (row['path'], manifest, src))
        problems = _verify(src, row)
        if problems:
            raise TrashError('%s in the trash no longer matches its MANIFEST row (%s): refusing to restore it'
                             % (src, '; '.join(problems)))
        plan.append((src, dest, row))

    result = _result(plan, trash_dir, manifest)
    result.update({'in_place': in_place, 'already_restored': False, 'units': units})
    if check_mode:
        return result
    for src, dest, row in plan:
        _move(src, dest, row)
        uid, gid = _id_of('owner', row['owner']), _id_of('group', row['group'])
        os.lchown(dest, uid, gid)
        if row['kind'] == 'file':
            os.chmod(dest, int(row['mode'], 8))
        problems = _verify(dest, row)
        if problems:
            raise TrashError('%s was restored but differs from its MANIFEST row (%s)' % (dest, '; '.join(problems)))
    stamp = (now or datetime.datetime.utcnow()).strftime('%Y%m%dT%H%M%SZ')
    done = manifest + '.restored-' + stamp
    os.rename(manifest, done)
    result['changed'] = True
    result['manifest'] = done
    return result


def _read(manifest):
    with open(manifest) as handle:
        return parse_manifest(handle.read(), manifest)
