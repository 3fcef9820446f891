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

    # dankfleet.llm trash MANIFEST v1
    # kind  path  owner  group  mode  sha256  link_target
    file  /etc/systemd/system/x.service  root  root  0644  <sha256>  -
    link  /etc/systemd/system/multi-user.target.wants/x.service  root  root  0777  -  /etc/...
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
import hashlib
import os
import pwd
import re
import shutil
import stat

MANIFEST_NAME = 'MANIFEST'
MANIFEST_HEADER = '# dankfleet.llm trash MANIFEST v1'
FILE_COLUMNS = ('kind', 'path', 'owner', 'group', 'mode', 'sha256', 'link_target')
UNIT_COLUMNS = ('kind', 'unit', 'scope', 'user', 'active_state', 'unit_file_state', 'sub_state')
UNIT_STATE_KEYS = ('active_state', 'unit_file_state', 'sub_state')
# Where systemd reads unit configuration we may have written (never /usr/lib or /run).
SYSTEM_UNIT_DIRS = ('/etc/systemd/system',)
USER_UNIT_DIRS = ('.config/systemd/user',)  # relative to the user's home
LINK_DIR_SUFFIXES = ('.wants', '.requires', '.upholds')


class TrashError(Exception):
    """A refusal with a message that names the path and what to do about it."""


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def _name_of_uid(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _name_of_gid(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _uid_of(name):
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise TrashError('MANIFEST names owner %r, which does not exist on this host: create the user first' % name)


def _gid_of(name):
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        if name.isdigit():
            return int(name)
        raise TrashError('MANIFEST names group %r, which does not exist on this host: create the group first' % name)


def _check_text(value, what):
    if any(c in value for c in '\t\n\r'):
        raise TrashError('%s %r contains a tab or newline, which the MANIFEST cannot record: rename it first'
                         % (what, value))
    return value


def trash_path(trash_dir, path):
    """Where ``path`` lives inside ``trash_dir`` (its absolute path below the trash)."""
    if not os.path.isabs(path):
        raise TrashError('path %r is not absolute: give the full path of the file to retire' % path)
    return os.path.join(trash_dir, os.path.normpath(path).lstrip('/'))


def describe(path):
    """One MANIFEST file row (as a dict) for an existing file or symlink."""
    _check_text(path, 'path')
    st = os.lstat(path)
    row = {
        'path': path,
        'owner': _name_of_uid(st.st_uid),
        'group': _name_of_gid(st.st_gid),
        'mode': '%04o' % stat.S_IMODE(st.st_mode),
        'sha256': '-',
        'link_target': '-',
    }
    if stat.S_ISLNK(st.st_mode):
        row['kind'] = 'link'
        row['link_target'] = _check_text(os.readlink(path), 'link target of %s' % path)
    elif stat.S_ISREG(st.st_mode):
        row['kind'] = 'file'
        row['sha256'] = sha256_file(path)
    else:
        raise TrashError('%s is neither a regular file nor a symlink: list the files inside it instead' % path)
    return row


def expand(paths):
    """Files and links to move for the given paths: a directory stands for every file below it."""
    out = []
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    out.append(os.path.join(root, name))
                for name in dirs:
                    full = os.path.join(root, name)
                    if os.path.islink(full):
                        out.append(full)
        else:
            out.append(path)
    seen = set()
    unique = []
    for path in out:
        norm = os.path.normpath(path)
        if norm not in seen:
            seen.add(norm)
            unique.append(norm)
    return unique


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
    found = []
    for base in unit_dirs(scope, user, root):
        own = os.path.join(base, unit)
        if os.path.lexists(own):
            found.append(own)
        dropin = own + '.d'
        if os.path.isdir(dropin) and not os.path.islink(dropin):
            found.extend(expand([dropin]))
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
        lines.append('\t'.join([row['kind']] + [row[c] for c in FILE_COLUMNS[1:]]))
    lines.append('# ' + '\t'.join(UNIT_COLUMNS))
    for row in unit_rows:
        lines.append('\t'.join(['unit'] + [row.get(c) or '-' for c in UNIT_COLUMNS[1:]]))
    return '\n'.join(lines) + '\n'


def parse_manifest(text, source='MANIFEST'):
    """(file_rows, unit_rows) of a MANIFEST; a malformed line is an error naming its number."""
    files, units = [], []
    lines = text.splitlines()
    if not lines or lines[0].strip() != MANIFEST_HEADER:
        raise TrashError('%s does not start with %r: not a dankfleet.llm trash MANIFEST' % (source, MANIFEST_HEADER))
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith('#'):
            continue
        cells = line.split('\t')
        kind = cells[0]
        if kind in ('file', 'link') and len(cells) == len(FILE_COLUMNS):
            files.append(dict(zip(FILE_COLUMNS, cells)))
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


def retire(trash_dir, paths, units=(), check_mode=False, comments=()):
    """Move ``paths`` (and what they expand to) into ``trash_dir``; return what happened.

    A path that is absent but already sits in the trash counts as retired; one that is
    absent everywhere is reported as missing. A path whose trash slot is taken by
    different content is a refusal: nothing is overwritten.
    """
    trash_dir = os.path.normpath(trash_dir)
    manifest = os.path.join(trash_dir, MANIFEST_NAME)
    old_files, old_units = [], []
    if os.path.exists(manifest):
        with open(manifest) as handle:
            old_files, old_units = parse_manifest(handle.read(), manifest)

    earlier = earlier_trash_dirs(trash_dir)
    plan, already, missing = [], [], []
    for path in expand(paths):
        dest = trash_path(trash_dir, path)
        if path == trash_dir or path.startswith(trash_dir + os.sep):
            raise TrashError('%s lies inside the trash directory %s: it cannot be retired into itself' % (path, trash_dir))
        if os.path.lexists(path):
            row = describe(path)
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

    result = {
        'changed': bool(plan),
        'trash_dir': trash_dir,
        'manifest': manifest,
        'moves': [{'src': p, 'dest': d, 'kind': r['kind'], 'sha256': r['sha256'], 'link_target': r['link_target']}
                  for p, d, r in plan],
        'already_retired': already,
        'missing': missing,
    }
    if check_mode or not plan:
        return result

    if not os.path.isdir(trash_dir):
        os.makedirs(trash_dir, 0o700)
    moved_rows = []
    try:
        for path, dest, row in plan:
            _move(path, dest, row)
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
    trash_dir = os.path.normpath(trash_dir)
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

    result = {
        'changed': bool(plan),
        'trash_dir': trash_dir,
        'manifest': manifest,
        'moves': [{'src': s, 'dest': d, 'kind': r['kind'], 'sha256': r['sha256'], 'link_target': r['link_target']}
                  for s, d, r in plan],
        'in_place': in_place,
        'already_restored': False,
        'units': units,
    }
    if check_mode:
        return result
    for src, dest, row in plan:
        _move(src, dest, row)
        uid, gid = _uid_of(row['owner']), _gid_of(row['group'])
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
