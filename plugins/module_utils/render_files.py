# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host side of dankfleet.llm.render_files: a set of rendered files compared, validated and written in one call.

The action plugin renders every template on the controller and sends the texts; this compares each with the
file on the host (content, mode, owner, group), then, in the order given, validates each file that would change
on a private copy named like it and writes it atomically through regular_file (no link followed where another
user can write, an O_EXCL temporary, fsync, rename). A refused file stops the set there: the files before it are
written (a later file's validate may need them: a unit's ExecStart, the checker of an env file), none after.

Directories (``directories``) come first, compared and created the same way as the file layer makes a file's
directory (opened component by component, no link followed where another user can write): a missing one is made
with its mode, owner and group, as is each missing directory above it (like ``ansible.builtin.file``), and an
existing one gets the mode, owner and group given. So a role's files and the directories they go in are one call.

An env file (``compare: values``) also says whether its *values* changed - what systemd's
``EnvironmentFile=`` reads, parsed by the collection's one env-file reader (llama_env) - so a change to its
comments alone is written without restarting the service that reads it.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import grp
import hashlib
import os
import pwd
import shutil
import stat
import tempfile

from ansible_collections.dankfleet.llm.plugins.module_utils.llama_env import parse as parse_env
from ansible_collections.dankfleet.llm.plugins.module_utils.regular_file import FileRefused, open_dir, open_parent

COMPARE = ('bytes', 'values')
DIR_MODE = 0o755
DIFF_MAX_BYTES = 256 * 1024


class RenderError(Exception):
    """A file that cannot be compared, validated or written; the message names it and the fix."""


# The options of dankfleet.llm.render_files, one copy for the action (which validates them on the controller)
# and the module (which the action runs with what it rendered).
FILE_OPTIONS = dict(
    dest=dict(type='path', required=True),
    src=dict(type='str'),
    content=dict(type='str'),
    template=dict(type='bool', default=True),
    owner=dict(type='str'),
    group=dict(type='str'),
    mode=dict(type='raw'),
    validate=dict(type='str'),
    compare=dict(type='str', choices=['bytes', 'values'], default='bytes'),
    item=dict(type='raw'),
)
DIRECTORY_OPTIONS = dict(
    path=dict(type='path', required=True),
    owner=dict(type='str'),
    group=dict(type='str'),
    mode=dict(type='raw'),
)
ARGUMENT_SPEC = dict(
    files=dict(type='list', elements='dict', default=[], options=FILE_OPTIONS),
    directories=dict(type='list', elements='dict', default=[], options=DIRECTORY_OPTIONS),
    known=dict(type='dict'),
)


def sha1_text(text):
    return hashlib.sha1(text.encode('utf-8')).hexdigest()


def env_values(text):
    """What systemd's EnvironmentFile= reads from text: {name: value}, or None when it is not a clean env file."""
    variables, problems = parse_env(text)
    return None if problems else variables


def values_differ(before, after):
    """Whether an env file's values differ between two texts (comments, blank lines and quoting aside)."""
    if before is None:
        return True
    old, new = env_values(before), env_values(after)
    return old is None or new is None or old != new


def parse_mode(mode, dest):
    if mode is None or mode == '':
        return None
    if isinstance(mode, int):
        value = mode
    else:
        try:
            value = int(str(mode), 8)
        except ValueError:
            raise RenderError('%s: mode %r is not an octal number; give it quoted, e.g. "0640"' % (dest, mode))
    if value < 0 or value > 0o7777:
        raise RenderError('%s: mode %r is out of range' % (dest, mode))
    return value


def _lookup(table, name):
    """uid/gid of a name or number; None when it does not exist (check mode on a fresh host)."""
    if name is None or name == '':
        return -1
    text = str(name)
    if text.isdigit():
        return int(text)
    try:
        return table(text)[2]
    except KeyError:
        return None


def resolve_owner(spec):
    uid = _lookup(pwd.getpwnam, spec.get('owner'))
    gid = _lookup(grp.getgrnam, spec.get('group'))
    return uid, gid


def compare_one(spec, want_diff=False):
    """What writing spec would change: a dict with changed, values_changed, reasons, the old text for a diff."""
    dest = spec['dest']
    if not isinstance(dest, str) or not os.path.isabs(dest):
        raise RenderError('dest %r must be an absolute path' % (dest,))
    compare = spec.get('compare') or 'bytes'
    if compare not in COMPARE:
        raise RenderError('%s: compare %r; use one of %s' % (dest, compare, ', '.join(COMPARE)))
    content = spec.get('content')
    if not isinstance(content, str):
        raise RenderError('%s: no content (the action renders src into content)' % dest)
    mode = parse_mode(spec.get('mode'), dest)
    uid, gid = resolve_owner(spec)
    result = {'dest': dest, 'checksum': sha1_text(content), 'reasons': [], 'before': None}
    head, name = os.path.split(os.path.normpath(dest))
    try:
        parent = open_parent(dest, 'file')[0] if os.path.isdir(head) else None
    except FileRefused as exc:
        raise RenderError(str(exc))
    before_st = None
    if parent is not None:
        with parent:
            before_st = parent.lstat(name)
            if before_st is not None and stat.S_ISDIR(before_st.st_mode):
                raise RenderError('%s is a directory where a file belongs: move it aside' % dest)
            if before_st is not None and stat.S_ISREG(before_st.st_mode):
                try:
                    data = parent.read_bytes(name, 'file')
                except FileRefused as exc:
                    raise RenderError(str(exc))
                try:
                    result['before'] = data.decode('utf-8')
                except UnicodeDecodeError:
                    result['before'] = None  # not text: its content differs from any render
    if before_st is None:
        result['reasons'].append('absent' if parent is not None else 'absent (its directory too)')
    elif not stat.S_ISREG(before_st.st_mode):
        result['reasons'].append('not a regular file')
    else:
        if result['before'] != content:
            result['reasons'].append('content')
        if mode is not None and stat.S_IMODE(before_st.st_mode) != mode:
            result['reasons'].append('mode')
        if uid is None or (uid != -1 and before_st.st_uid != uid):
            result['reasons'].append('owner')
        if gid is None or (gid != -1 and before_st.st_gid != gid):
            result['reasons'].append('group')
    result['changed'] = bool(result['reasons'])
    if not result['changed']:
        result['values_changed'] = False
    elif compare == 'values':
        # mode, owner or group alone: what the service reads is the same; otherwise compare what it reads
        # (an absent, non-regular or non-UTF-8 old file has no values: before is None, so they changed)
        result['values_changed'] = 'content' in result['reasons'] and values_differ(result['before'], content) \
            or not set(result['reasons']) <= set(['content', 'mode', 'owner', 'group'])
    else:
        result['values_changed'] = True
    if mode is None and before_st is not None and stat.S_ISREG(before_st.st_mode):
        mode = stat.S_IMODE(before_st.st_mode)  # not given: an existing file keeps its mode
    result.update(mode=mode, uid=uid, gid=gid)
    if want_diff and before_st is None:
        result['before'] = ''
    elif not want_diff or (result['before'] is not None and len(result['before']) > DIFF_MAX_BYTES):
        result['before'] = None
    return result


def validate_one(spec, content, run):
    """Run spec's validate command (with %s) on a private copy named like the file; RenderError when it refuses."""
    command = spec.get('validate')
    if not command:
        return
    if '%s' not in command:
        raise RenderError('%s: validate %r must contain %%s (the path of the candidate)' % (spec['dest'], command))
    workdir = tempfile.mkdtemp(prefix='render_files.')
    try:
        path = os.path.join(workdir, os.path.basename(spec['dest']))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_NOFOLLOW', 0), 0o600)
        with os.fdopen(fd, 'wb') as handle:
            handle.write(content.encode('utf-8'))
        rc, out, err = run(command % path)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if rc != 0:
        raise RenderError('%s: the validate command refused the new file (rc %d); it was not written, nor any file after it: %s'
                          % (spec['dest'], rc, (err or out or '').strip()))


def write_one(spec, found):
    uid, gid = found['uid'], found['gid']
    if uid is None or gid is None:
        raise RenderError('%s: the owner %r or group %r does not exist on the host; create it first'
                          % (spec['dest'], spec.get('owner'), spec.get('group')))
    mode = found['mode'] if found['mode'] is not None else 0o644
    try:
        parent, name = open_parent(spec['dest'], 'file', reserve=30)
        with parent:
            parent.write_atomic(name, spec['content'].encode('utf-8'), mode=mode,
                                uid=None if uid == -1 else uid, gid=None if gid == -1 else gid)
    except FileRefused as exc:
        raise RenderError(str(exc))


def _describe_dir(mode, owner, group):
    return 'directory %04o %s:%s\n' % (mode, owner, group)


def compare_dir(spec):
    """What making spec's directory would change: a dict with changed, reasons, and before/after for a diff."""
    path = spec.get('path')
    if not isinstance(path, str) or not os.path.isabs(path):
        raise RenderError('directory %r must be an absolute path' % (path,))
    mode = parse_mode(spec.get('mode'), path)
    uid, gid = resolve_owner(spec)
    try:
        found = open_dir(os.path.normpath(path), 'directory', must_exist=False)
    except FileRefused as exc:
        raise RenderError(str(exc))
    reasons = []
    if found is None:
        reasons.append('absent')
        before = 'absent\n'
        now_mode, now_uid, now_gid = DIR_MODE, os.geteuid(), os.getegid()
    else:
        with found:
            now_mode, now_uid, now_gid = stat.S_IMODE(found.st.st_mode), found.st.st_uid, found.st.st_gid
        before = _describe_dir(now_mode, now_uid, now_gid)
        if mode is not None and now_mode != mode:
            reasons.append('mode')
        if uid is None or (uid != -1 and now_uid != uid):
            reasons.append('owner')
        if gid is None or (gid != -1 and now_gid != gid):
            reasons.append('group')
    # what it will be: the given values (a name that does not exist yet as given), else what it is or gets
    after = _describe_dir(now_mode if mode is None else mode,
                          spec.get('owner') if uid is None else (now_uid if uid == -1 else uid),
                          spec.get('group') if gid is None else (now_gid if gid == -1 else gid))
    return {'path': path, 'changed': bool(reasons), 'reasons': reasons, 'mode': mode, 'uid': uid, 'gid': gid,
            'before': before, 'after': after}


def _set_dir_attributes(path, mode, uid, gid):
    with open_dir(path, 'directory') as handle:
        if mode is not None and stat.S_IMODE(handle.st.st_mode) != mode:
            os.fchmod(handle.fd, mode)
        want_uid = -1 if uid == -1 or uid == handle.st.st_uid else uid
        want_gid = -1 if gid == -1 or gid == handle.st.st_gid else gid
        if want_uid != -1 or want_gid != -1:
            os.fchown(handle.fd, want_uid, want_gid)


def make_dir(spec, found):
    """Create the directory (and each missing one above it, with the same mode, owner and group), then set them."""
    path = os.path.normpath(spec['path'])
    uid, gid = found['uid'], found['gid']
    if uid is None or gid is None:
        raise RenderError('%s: the owner %r or group %r does not exist on the host; create it first'
                          % (path, spec.get('owner'), spec.get('group')))
    mode = found['mode']
    missing = []
    here = path
    while not os.path.lexists(here) and here != os.path.dirname(here):
        missing.insert(0, here)
        here = os.path.dirname(here)
    try:
        if missing:  # made under the umask: each gets its mode, owner and group set after
            open_dir(path, 'directory', create_mode=DIR_MODE if mode is None else mode).close()
        for here in missing or [path]:
            _set_dir_attributes(here, DIR_MODE if mode is None and missing else mode, uid, gid)
    except FileRefused as exc:
        raise RenderError(str(exc))
    except OSError as exc:
        raise RenderError('%s: cannot set its mode, owner or group: %s' % (path, exc))


def converge(files, check_mode=False, want_diff=False, run=None, directories=None):
    """Compare every directory and file, then make each directory and validate and write each file that would
    change, in order (nothing in check mode).

    Returns {changed, values_changed, files: {dest: {changed, values_changed, reasons, checksum}},
    directories: {path: {changed, reasons}}, diff: [...]}. A directory is no change of values.
    """
    seen = set()
    dirs = []
    for spec in directories or []:
        if spec.get('path') in seen:
            raise RenderError('directory %s is given twice; each directory once' % spec.get('path'))
        seen.add(spec.get('path'))
        dirs.append(compare_dir(spec))
    seen = set()
    found = []
    for spec in files:
        if spec.get('dest') in seen:
            raise RenderError('%s is given twice; each file once' % spec.get('dest'))
        seen.add(spec.get('dest'))
        found.append(compare_one(spec, want_diff))
    pending = [(spec, f) for spec, f in zip(files, found) if f['changed']]
    made = [(spec, d) for spec, d in zip(directories or [], dirs) if d['changed']]
    if not check_mode:
        for spec, d in made:  # first: the files below may go into them
            make_dir(spec, d)
        for spec, f in pending:  # in order: a unit's validate may need the launcher written just before it
            validate_one(spec, spec['content'], run)
            write_one(spec, f)
    result = {'changed': bool(pending or made), 'values_changed': any(f['values_changed'] for f in found),
              'files': {}, 'directories': {}}
    diff = []
    for d in dirs:
        result['directories'][d['path']] = {'changed': d['changed'], 'reasons': d['reasons']}
        if want_diff and d['changed']:
            diff.append({'before': d['before'], 'after': d['after'],
                         'before_header': d['path'], 'after_header': d['path']})
    for spec, f in zip(files, found):
        result['files'][f['dest']] = dict((k, f[k]) for k in ('changed', 'values_changed', 'reasons', 'checksum'))
        if want_diff and f['changed'] and f['before'] is not None:
            diff.append({'before': f['before'], 'after': spec['content'],
                         'before_header': f['dest'], 'after_header': f['dest']})
    if want_diff:
        result['diff'] = diff
    return result
