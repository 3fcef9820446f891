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

Every option is checked before anything is compared, run or written (check_specs, which the action runs too before
it renders): a destination normalised (no ``..``; ``/d/./a.env`` and ``/d//a.env`` are ``/d/a.env``) and given once,
an owner or group a name or an id from 0 to 2**32-2 (2**32-1 is chown's "leave it"), a mode of octal digits, a
validate command with exactly one ``%s`` and no other ``%`` but ``%%`` (ansible.builtin.template formats it with
Python's ``%``, which raises on any other). Each refusal names the file, the option and the fix.
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
import tempfile

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import parse as parse_env
from ansible_collections.dankfleet.llm.plugins.module_utils.base.regular_file import FileRefused, open_dir, open_parent

COMPARE = ('bytes', 'values')
DIR_MODE = 0o755
DIFF_MAX_BYTES = 256 * 1024
ID_MAX = 2 ** 32 - 2        # uid_t/gid_t; 2**32-1 is (uid_t)-1, chown's "leave it as it is"
PATH_MAX = 4096
VALIDATE_MAX = 4096
MSG_MAX = 2000
# A user or group name: no control character (Str name=True), no ':' (the passwd field separator), no '/', no
# white space, not starting with '-' (an option to every tool); all digits is an id, read as a number.
OWNER_NAME = tr.Str(max_len=256, min_len=1, name=True, pattern=r'[^:/\s-][^:/\s]*',
                    what='a user or group name (no ":", "/", white space or leading "-") or an id')
_ID = re.compile(r'[0-9]+\Z', re.ASCII)
_MODE = re.compile(r'(?:0o)?([0-7]{1,5})\Z', re.ASCII)
_PERCENT = re.compile(r'%(.?)', re.S)
PATH = tr.Str(max_len=PATH_MAX, min_len=1, name=True, what='an absolute path without control characters')
VALIDATE = tr.Str(max_len=VALIDATE_MAX, name=True, what='a command without control characters')


def _show(value):
    """A value as a refusal quotes it: in full up to a path's length (the 60 characters of tr.quote cut a path
    before the name that differs), printable."""
    return tr.printable(repr(value), limit=PATH_MAX) if isinstance(value, str) else tr.quote(value)


class RenderError(Exception):
    """A file that cannot be compared, validated or written; the message names it and the fix (printable: the
    names in it may come from anywhere)."""

    def __init__(self, msg):
        Exception.__init__(self, tr.printable(msg, limit=MSG_MAX))


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
    """Permission bits of an octal string (``"0640"``, ``"0o640"``) or an integer, at most 0o7777."""
    if mode is None or mode == '':
        return None
    value = None
    if isinstance(mode, int) and not isinstance(mode, bool):
        value = mode
    elif isinstance(mode, str):
        m = _MODE.match(mode)
        if not m:
            raise RenderError('%s: mode %s is not an octal number; give it quoted, e.g. "0640"' % (dest, tr.quote(mode)))
        value = int(m.group(1), 8)
    if value is None:
        raise RenderError('%s: mode %s is not an octal number; give it quoted, e.g. "0640"' % (dest, tr.quote(mode)))
    if value < 0 or value > 0o7777:
        raise RenderError('%s: mode %s is out of range: permission bits are 0 to 07777' % (dest, tr.quote(mode)))
    return value


def owner_id(value, option, where):
    """An owner or group as given: -1 when not given, an int for an id (0..ID_MAX), the name otherwise; a value
    that is neither is refused naming where and the option."""
    if value is None or value == '':
        return -1
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    try:
        if isinstance(value, str) and _ID.match(value):
            return tr.int_text(value, '%s: %s' % (where, option), 0, ID_MAX)
        return tr.read(OWNER_NAME, value, '%s: %s' % (where, option))
    except tr.ShapeError as exc:
        raise RenderError('%s; give a name that exists on the host or an id from 0 to %d' % (exc, ID_MAX))


def _lookup(table, value, option, where):
    """uid/gid of a name or number; None when the name does not exist (check mode on a fresh host)."""
    value = owner_id(value, option, where)
    if isinstance(value, int):
        return value
    try:
        return table(value)[2]
    except KeyError:
        return None
    except (ValueError, UnicodeError) as exc:   # a name the system's encoding cannot hold
        raise RenderError('%s: %s %s cannot be looked up: %s' % (where, option, tr.quote(value), exc))


def resolve_owner(spec, where=None):
    where = where or spec.get('dest') or spec.get('path')
    uid = _lookup(pwd.getpwnam, spec.get('owner'), 'owner', where)
    gid = _lookup(grp.getgrnam, spec.get('group'), 'group', where)
    return uid, gid


def normal_path(path, option, where=None):
    """The absolute path as one spelling (``/d/./a.env``, ``/d//a.env`` and ``//d/a.env/`` are ``/d/a.env``);
    ``..`` is refused (it may cross a link), as are control characters and a relative path."""
    label = '%s %s' % (option, _show(path)) if where is None else '%s: %s' % (where, option)
    try:
        tr.read(PATH, path, label)
    except tr.ShapeError as exc:
        raise RenderError('%s; give the absolute path of the file' % exc)
    if not path.startswith('/'):
        raise RenderError('%s %s must be an absolute path' % (option, _show(path)))
    if '..' in path.split('/'):
        raise RenderError('%s %s holds "..": give the path without it (a ".." after a link leads elsewhere)'
                          % (option, _show(path)))
    return '/' + os.path.normpath(path).lstrip('/')


def check_validate(command, dest):
    """validate as ansible.builtin.template runs it (``command % path``): exactly one ``%s``; ``%%`` is a literal
    ``%``; any other ``%`` would raise in Python's formatting, so it is refused here by name, before anything."""
    if command is None or command == '':
        return
    try:
        tr.read(VALIDATE, command, '%s: validate' % dest)
    except tr.ShapeError as exc:
        raise RenderError(str(exc))
    places = 0
    for m in _PERCENT.finditer(command):
        if m.group(1) == 's':
            places += 1
        elif m.group(1) != '%':
            raise RenderError('%s: validate %s holds %s, a "%%" other than the one %%s (the path of the candidate): '
                              'write a literal %% as %%%%' % (dest, _show(command), tr.quote(m.group(0))))
    if places != 1:
        raise RenderError('%s: validate %s must contain %%s exactly once (the path of the candidate), not %d times'
                          % (dest, _show(command), places))


def check_specs(files, directories=None, need_content=True):
    """Check every option of every file and directory before anything is compared, run or written: paths
    (normalised, each once), owner, group, mode, compare, validate and, with need_content, the content."""
    if not isinstance(files, list) or not isinstance(directories or [], list):
        raise RenderError('files and directories must be lists')
    seen = {}
    for spec in directories or []:
        if not isinstance(spec, dict):
            raise RenderError('each directory must be a dict with path, not %s' % tr.kind(spec))
        key = normal_path(spec.get('path'), 'directory')
        if key in seen:
            raise RenderError('directory %s is given twice (as %s and %s); each directory once'
                              % (key, _show(seen[key]), _show(spec.get('path'))))
        seen[key] = spec.get('path')
        parse_mode(spec.get('mode'), key)
        owner_id(spec.get('owner'), 'owner', key)
        owner_id(spec.get('group'), 'group', key)
    seen = {}
    for spec in files:
        if not isinstance(spec, dict):
            raise RenderError('each file must be a dict with dest, not %s' % tr.kind(spec))
        key = normal_path(spec.get('dest'), 'dest')
        if key in seen:
            raise RenderError('%s is given twice (as %s and %s); each file once'
                              % (key, _show(seen[key]), _show(spec.get('dest'))))
        seen[key] = spec.get('dest')
        compare = spec.get('compare') or 'bytes'
        if compare not in COMPARE:
            raise RenderError('%s: compare %s; use one of %s' % (key, tr.quote(compare), ', '.join(COMPARE)))
        parse_mode(spec.get('mode'), key)
        owner_id(spec.get('owner'), 'owner', key)
        owner_id(spec.get('group'), 'group', key)
        check_validate(spec.get('validate'), key)
        if need_content:
            content = spec.get('content')
            if not isinstance(content, str):
                raise RenderError('%s: no content (the action renders src into content)' % key)
            try:
                content.encode('utf-8')
            except UnicodeEncodeError as exc:
                raise RenderError('%s: the content holds %s at character %d, which UTF-8 cannot hold'
                                  % (key, tr.quote(content[exc.start]), exc.start))


def compare_one(spec, want_diff=False):
    """What writing spec would change: a dict with changed, values_changed, reasons, the old text for a diff."""
    dest = spec['dest']
    normal_path(dest, 'dest')
    compare = spec.get('compare') or 'bytes'
    if compare not in COMPARE:
        raise RenderError('%s: compare %s; use one of %s' % (dest, tr.quote(compare), ', '.join(COMPARE)))
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
    check_validate(command, spec['dest'])
    workdir = None
    try:
        workdir = tempfile.mkdtemp(prefix='render_files.')
        path = os.path.join(workdir, os.path.basename(os.path.normpath(spec['dest'])))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_NOFOLLOW', 0), 0o600)
        with os.fdopen(fd, 'wb') as handle:
            handle.write(content.encode('utf-8'))
        rc, out, err = run(command % path)
    except OSError as exc:
        raise RenderError('%s: cannot make the private copy for validate: %s; nothing after it was written'
                          % (spec['dest'], exc))
    finally:
        if workdir:
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
    normal_path(path, 'directory')
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
    check_specs(files, directories)     # every option, before anything is compared, run or written
    dirs = [compare_dir(spec) for spec in directories or []]
    found = [compare_one(spec, want_diff) for spec in files]
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
