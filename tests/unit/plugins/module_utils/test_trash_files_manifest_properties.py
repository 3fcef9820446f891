# -*- coding: utf-8 -*-
"""The v3 MANIFEST round trip, property-based: any byte string as a name, any text as a comment or unit state.

The v2 writer escaped only \\t\\r\\n while its reader split on every Unicode line break, so a name with
\\x0b, U+0085 or U+2028 (or a comment with a newline) retired and never restored, and a name that was not
UTF-8 crashed the retire after the files moved. These properties draw from exactly those bytes.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf

# The bytes every line splitter, decoder and escaper disagrees about, mixed with arbitrary ones.
TRICKY = [b'\x0b', b'\x0c', b'\x1c', b'\x1d', b'\x1e', '\x85'.encode(), '\u2028'.encode(), '\u2029'.encode(),
          b'\x85', b'\xff', b'\xc3', b'\xed\xa0\x80', b'\t', b'\n', b'\r', b'\\', b'\\x41', b'\\\\', b'-', b'#',
          b'# ', b' ', b'a', '\u00e9'.encode(), b'\x7f', b'\x01']
PIECE = st.one_of(st.sampled_from(TRICKY), st.binary(min_size=1, max_size=4))
NAMES = st.lists(PIECE, min_size=1, max_size=6).map(b''.join).map(lambda b: b.replace(b'/', b'_').replace(b'\0', b'0')) \
    .filter(lambda b: b not in (b'.', b'..') and len(b) <= 200)
TEXT = st.one_of(st.text(max_size=30), st.sampled_from(['', '-', '\n', 'a\nb', '\u2028', '\x85', '\\x41', '# x', '\t']))
UNIT_STATE = st.one_of(st.none(), TEXT)


@st.composite
def rows(draw):
    path = '/' + '/'.join(os.fsdecode(n) for n in draw(st.lists(NAMES, min_size=1, max_size=3)))
    kind = draw(st.sampled_from(['file', 'link']))
    state = draw(st.sampled_from(['moved', 'failed', 'pending']))
    row = {
        'kind': kind, 'path': path,
        'owner': draw(st.sampled_from(['root', 'dank', '1234', ''])), 'group': draw(st.sampled_from(['root', 'x y'])),
        'mode': draw(st.sampled_from(['0644', '0755', '4750'])),
        'sha256': hashlib.sha256(path.encode('utf-8', 'surrogateescape')).hexdigest() if kind == 'file' else '-',
        'link_target': os.fsdecode(draw(NAMES)) if kind == 'link' else '-',
        'given': draw(st.one_of(st.just(path), st.just(path + '/../' + os.path.basename(path)))),
        'parent': draw(st.one_of(st.none(), st.integers(0, 2 ** 64).map(lambda n: '%d:%d' % (n % 4096, n)))),
        'state': state,
    }
    if state == 'failed':
        row['reason'] = draw(TEXT)
    return row


UNITS = st.fixed_dictionaries({
    'kind': st.just('unit'),
    'unit': st.sampled_from(['x.service', 'getty@tty1.service', 'sys-x\\x2dy.mount']),
    'scope': st.sampled_from(['system', 'user']),
    'user': st.one_of(st.none(), st.just('dank')),
    'active_state': UNIT_STATE, 'unit_file_state': UNIT_STATE, 'sub_state': UNIT_STATE,
})


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(rows(), max_size=6, unique_by=lambda r: r['path']), st.lists(UNITS, max_size=3), st.lists(TEXT, max_size=4))
def test_every_row_comment_and_unit_state_reads_back_as_written(files, units, comments):
    data = tf.format_manifest(files, units, comments)
    assert all(0x20 <= b < 0x7f or b in (0x09, 0x0a) for b in data)        # printable ASCII, \t and \n only
    parsed = tf.read_manifest(data)
    assert parsed['version'] == 3 and parsed['torn'] is False
    assert parsed['comments'] == comments
    assert parsed['units'] == units
    assert parsed['files'] == files
    assert tf.parse_manifest(data) == (files, units)


def _snapshot(root):
    out = {}
    for base, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            path = os.path.join(base, name)
            if os.path.islink(path):
                out[path] = ('link', os.readlink(path))
            else:
                with open(path, 'rb') as handle:
                    out[path] = ('file', os.lstat(path).st_mode, handle.read())
    return out


@st.composite
def trees(draw):
    names = draw(st.lists(NAMES, min_size=1, max_size=5, unique=True))
    sub = draw(NAMES)
    entries = []
    for n, name in enumerate(names):
        where = (sub, name) if n % 2 and sub != name else (name,)
        if draw(st.booleans()):
            entries.append((where, 'link', draw(NAMES)))
        else:
            entries.append((where, 'file', draw(st.binary(max_size=64))))
    return entries


def _build(root, entries):
    made = []
    for where, kind, value in entries:
        path = os.path.join(root, *where)
        if os.path.lexists(path) or (len(where) > 1 and os.path.lexists(os.path.join(root, where[0]))
                                     and not os.path.isdir(os.path.join(root, where[0]))):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if kind == 'link':
            os.symlink(value, path)
        else:
            with open(path, 'wb') as handle:
                handle.write(value)
        made.append(path)
    return made


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(trees(), st.lists(TEXT, max_size=3), st.lists(UNITS, max_size=2, unique_by=lambda u: (u['unit'], u['scope'])))
def test_any_names_retire_and_restore_byte_identical(entries, comments, units):
    tmp = tempfile.mkdtemp(prefix='trash-names-')
    try:
        root = os.path.join(os.fsencode(tmp), b'tree')
        os.mkdir(root)
        _build(root, entries)
        before = _snapshot(root)
        trash = os.path.join(tmp, 'trash')
        units = [dict(u) for u in units]
        r = tf.retire(trash, [os.fsdecode(root)], units=[dict((k, v) for k, v in u.items() if k != 'kind')
                                                         for u in units], comments=comments)
        assert len(r['moves']) == len(before) and _snapshot(root) == {}
        with open(os.path.join(trash, 'MANIFEST'), 'rb') as handle:
            parsed = tf.read_manifest(handle.read())
        assert parsed['comments'] == comments and parsed['units'] == units
        assert set(os.fsencode(row['path']) for row in parsed['files']) == set(before)
        back = tf.restore(trash)
        assert back['units'] == units
        assert _snapshot(root) == before
    finally:
        shutil.rmtree(tmp)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10 ** 6), st.integers(1, 5))
def test_a_manifest_cut_anywhere_restores_all_or_refuses_and_moves_nothing(cut, count):
    """Cut the MANIFEST at any byte: the restore puts every file back, or refuses by name and moves nothing.
    Never 'changed' with files left in the trash."""
    tmp = tempfile.mkdtemp(prefix='trash-cut-')
    try:
        root = os.path.join(tmp, 'tree')
        os.mkdir(root)
        for n in range(count):
            with open(os.path.join(root, 'f%d' % n), 'w') as handle:
                handle.write('content %d' % n)
        before = _snapshot(root)
        trash = os.path.join(tmp, 'trash')
        tf.retire(trash, [root], comments=['a comment'])
        manifest = os.path.join(trash, 'MANIFEST')
        with open(manifest, 'rb') as handle:
            data = handle.read()
        with open(manifest, 'wb') as handle:
            handle.write(data[:cut % (len(data) + 1)])
        try:
            tf.restore(trash)
        except tf.TrashError as exc:
            assert any(why in str(exc) for why in ('cut short', 'does not start with', 'malformed', 'no row above')), exc
            assert _snapshot(root) == {}
            return
        assert _snapshot(root) == before
        assert [p for p in _snapshot(trash) if not os.path.basename(p).startswith('MANIFEST')] == []
    finally:
        shutil.rmtree(tmp)
