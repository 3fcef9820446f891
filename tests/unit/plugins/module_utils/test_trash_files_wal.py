# -*- coding: utf-8 -*-
"""trash_files' MANIFEST as a write-ahead log, and the restore's trust checks (issue 23 item 3).

Real filesystems, no mocks of the file layer: a 1 MiB tmpfs as a trash that fills midway, a child
process killed between a move and its 'moved' record, a parent directory swapped for a symlink after
the retire, a MANIFEST owned by another user, a MANIFEST cut down to its header, v1 and v2 MANIFESTs
as the old writer wrote them.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf
from ansible_collections.dankfleet.llm.tests.unit.trash_testlib import NOBODY, needs_root, snapshot, tmpfs
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import COLLECTIONS, ansible_env

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))


def manifest_of(trash):
    with open(os.path.join(trash, 'MANIFEST'), 'rb') as handle:
        return tf.read_manifest(handle.read())


# ----------------------------------------------------------------------------- a trash that fills midway

def _payloads(tmp_path, count=4, size=400 * 1024):
    src = tmp_path / 'models'
    src.mkdir()
    paths = []
    for n in range(count):
        p = src / ('part%d.bin' % n)
        p.write_bytes(os.urandom(size))
        paths.append(str(p))
    return src, paths


def test_a_trash_that_fills_midway_keeps_every_file_on_record(tmp_path):
    """1 MiB trash, 4 x 400 KiB files on another filesystem: two copy, the third fills the trash. The third
    stays where it was, the MANIFEST says so, and the restore puts the first two back."""
    src, paths = _payloads(tmp_path)
    before = snapshot(src)
    with tmpfs(str(tmp_path / 'small')) as small:
        trash = os.path.join(small, 'trash')
        with pytest.raises(tf.TrashError, match=r'part2.bin could not be moved to the trash \(No space left on '
                                                r'device\): it stays where it was'):
            tf.retire(trash, [str(src)])
        left = snapshot(src)
        assert sorted(os.path.basename(p) for p in left) == [b'part2.bin', b'part3.bin']
        assert all(left[p] == before[p] for p in left)                         # the failed one is intact
        m = manifest_of(trash)
        assert [(os.path.basename(r['path']), r['state']) for r in m['files']] == [
            ('part0.bin', 'moved'), ('part1.bin', 'moved'), ('part2.bin', 'failed')]
        assert 'No space left' in m['files'][2]['reason']
        assert not os.path.lexists(tf.trash_path(trash, paths[2]))              # no half copy left behind
        r = tf.restore(trash)
        assert r['changed'] and [m['dest'] for m in r['moves']] == paths[:2] and r['in_place'] == [paths[2]]
    assert snapshot(src) == before


def test_a_trash_too_full_for_the_record_moves_nothing(tmp_path):
    src, paths = _payloads(tmp_path, count=1, size=1000)
    before = snapshot(src)
    with tmpfs(str(tmp_path / 'small'), size='64k') as small:
        trash = os.path.join(small, 'trash')
        os.mkdir(trash, 0o700)
        with open(os.path.join(small, 'filler'), 'wb', buffering=0) as handle:
            with pytest.raises(OSError):
                while True:
                    handle.write(b'\0' * 4096)
        with pytest.raises(tf.TrashError, match='trash filesystem is full|No space left'):
            tf.retire(trash, [str(src)])
        assert snapshot(src) == before
        assert not os.path.lexists(tf.trash_path(trash, paths[0]))


def test_a_cross_filesystem_move_restores_byte_identical(tmp_path):
    src, paths = _payloads(tmp_path, count=2, size=100 * 1024)
    os.chmod(paths[0], 0o640)
    os.chown(paths[1], NOBODY, NOBODY) if os.geteuid() == 0 else None
    os.symlink(paths[0], str(src / 'link'))
    before = snapshot(src)
    with tmpfs(str(tmp_path / 'small')) as small:
        trash = os.path.join(small, 'trash')
        r = tf.retire(trash, [str(src)])
        assert len(r['moves']) == 3 and snapshot(src) == {}
        assert [x['state'] for x in manifest_of(trash)['files']] == ['moved'] * 3
        tf.restore(trash)
    assert snapshot(src) == before


# ----------------------------------------------------------------------------- a crash between move and record

CRASH = textwrap.dedent('''
    import os, sys
    from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf
    real, count = tf.move_at, [0]
    def move_then_die(*args, **kwargs):
        real(*args, **kwargs)
        count[0] += 1
        if count[0] == int(sys.argv[3]):
            os._exit(9)          # killed after the move, before its 'moved' record
    tf.move_at = move_then_die
    tf.retire(sys.argv[1], [sys.argv[2]])
''')


def crash(trash, src, die_after):
    """retire(trash, [src]) in a child process killed right after its die_after-th move."""
    return subprocess.run([sys.executable, '-c', CRASH, trash, src, str(die_after)],
                          env=ansible_env(PYTHONPATH=COLLECTIONS))


@pytest.mark.parametrize('die_after', [1, 2])
def test_a_crash_after_a_move_leaves_it_on_record(tmp_path, die_after):
    src, paths = _payloads(tmp_path, count=3, size=1000)
    before = snapshot(src)
    trash = str(tmp_path / 'trash')
    proc = crash(trash, str(src), die_after)
    assert proc.returncode == 9
    states = [r['state'] for r in manifest_of(trash)['files']]
    assert states == ['moved'] * (die_after - 1) + ['pending']     # the row was there before the move
    with open(os.path.join(trash, 'MANIFEST'), 'ab') as handle:
        handle.write(b'file\t/torn by the crash')                  # a record cut off mid-write is never acted on
    assert manifest_of(trash)['torn'] is True
    r = tf.restore(trash)
    assert len(r['moves']) == die_after
    assert snapshot(src) == before


def test_a_retire_after_a_crash_goes_on_where_it_stopped(tmp_path):
    src, paths = _payloads(tmp_path, count=3, size=1000)
    before = snapshot(src)
    trash = str(tmp_path / 'trash')
    crash(trash, str(src), 1)
    with open(os.path.join(trash, 'MANIFEST'), 'ab') as handle:
        handle.write(b'file\t/torn')
    again = tf.retire(trash, paths)
    assert len(again['moves']) == 2 and len(again['already_retired']) == 1
    assert manifest_of(trash)['torn'] is False                     # the torn tail was cut before appending
    tf.restore(trash)
    assert snapshot(src) == before


# ----------------------------------------------------------------------------- a parent swapped for a link

@pytest.fixture
def retired(tmp_path):
    """(trash, unit dir, victim dir): /etc-like dir's file retired; a victim dir root must never write in."""
    units = tmp_path / 'home' / 'dank' / 'units'
    units.mkdir(parents=True)
    (units / 'x.service').write_text('[Service]\n')
    victim = tmp_path / 'victim'
    victim.mkdir()
    (victim / 'keep').write_text('root only')
    trash = str(tmp_path / 'trash')
    tf.retire(trash, [str(units / 'x.service')])
    return trash, units, victim


def test_a_parent_swapped_for_a_symlink_after_the_retire_is_refused(retired):
    trash, units, victim = retired
    os.rmdir(str(units))
    os.symlink(str(victim), str(units))
    before = snapshot(victim)
    with pytest.raises(tf.TrashError, match=r'units is a symlink: trash_files never follows a link'):
        tf.restore(trash)
    assert snapshot(victim) == before
    assert os.path.exists(tf.trash_path(trash, str(units / 'x.service')))
    with pytest.raises(tf.TrashError, match='is a symlink'):
        tf.restore(trash, check_mode=True)


def test_a_grandparent_swapped_for_a_symlink_is_refused(retired):
    trash, units, victim = retired
    dank = units.parent
    os.rename(str(dank), str(dank) + '.moved')
    (victim / 'units').mkdir()
    os.symlink(str(victim), str(dank))
    with pytest.raises(tf.TrashError, match=r'dank is a symlink'):
        tf.restore(trash)
    assert os.listdir(str(victim / 'units')) == []


def test_a_parent_replaced_by_another_directory_is_refused_a_missing_one_made(retired):
    trash, units, victim = retired
    os.rename(str(units), str(units) + '.old')
    units.mkdir()
    with pytest.raises(tf.TrashError, match=r'is not the directory it was retired from \(inode'):
        tf.restore(trash)
    os.rmdir(str(units))
    r = tf.restore(trash)                           # gone entirely: made again, the file restored
    assert r['changed'] and (units / 'x.service').read_text() == '[Service]\n'


def test_a_symlinked_trash_dir_is_refused(tmp_path):
    f = tmp_path / 'f'
    f.write_text('x')
    target = tmp_path / 'elsewhere'
    target.mkdir()
    os.symlink(str(target), str(tmp_path / 'trash'))
    os.symlink('/etc', str(tmp_path / 'etc-trash'))
    for link in ('trash', 'etc-trash'):
        with pytest.raises(tf.TrashError, match=r'trash_dir .*%s is a symlink' % link):
            tf.retire(str(tmp_path / link), [str(f)])
        with pytest.raises(tf.TrashError, match=r'is a symlink'):
            tf.restore(str(tmp_path / link))
    assert f.exists() and os.listdir(str(target)) == []


# ----------------------------------------------------------------------------- who wrote the MANIFEST

@needs_root
def test_a_manifest_owned_by_another_user_is_refused(retired):
    trash, units, victim = retired
    manifest = os.path.join(trash, 'MANIFEST')
    os.chown(manifest, NOBODY, NOBODY)
    with pytest.raises(tf.TrashError, match=r'MANIFEST .* is owned by (nobody|65534), neither root nor the user'):
        tf.restore(trash)
    with pytest.raises(tf.TrashError, match=r'owned by'):
        tf.retire(trash, [str(victim / 'keep')])
    assert (victim / 'keep').exists() and not (units / 'x.service').exists()
    os.chown(manifest, 0, 0)
    os.chmod(manifest, 0o666)
    with pytest.raises(tf.TrashError, match=r'writable by its group or by others \(mode 0666\)'):
        tf.restore(trash)
    os.chmod(manifest, 0o600)
    os.chown(trash, NOBODY, NOBODY)
    with pytest.raises(tf.TrashError, match=r'trash_dir .* is owned by'):
        tf.restore(trash)
    os.chown(trash, 0, 0)
    tf.restore(trash)
    assert (units / 'x.service').exists()


def test_a_symlinked_manifest_is_refused(retired, tmp_path):
    trash, units, victim = retired
    manifest = os.path.join(trash, 'MANIFEST')
    os.rename(manifest, str(tmp_path / 'real-manifest'))
    os.symlink(str(tmp_path / 'real-manifest'), manifest)
    with pytest.raises(tf.TrashError, match=r'MANIFEST is a symlink'):
        tf.restore(trash)


# ----------------------------------------------------------------------------- a MANIFEST cut short

def test_a_manifest_cut_to_its_header_is_refused_by_name(retired):
    trash, units, victim = retired
    manifest = os.path.join(trash, 'MANIFEST')
    with open(manifest, 'rb') as handle:
        header = handle.readline()
    with open(manifest, 'wb') as handle:
        handle.write(header)
    with pytest.raises(tf.TrashError, match=r'accounts for 0 file\(s\) but the trash directory holds 1 it does not '
                                            r'name \(.*x.service\): the MANIFEST was cut short'):
        tf.restore(trash)
    with pytest.raises(tf.TrashError, match='cut short'):
        tf.restore(trash, check_mode=True)
    assert os.path.exists(manifest)


def test_a_manifest_missing_one_row_of_many_is_refused(tmp_path):
    src, paths = _payloads(tmp_path, count=3, size=10)
    trash = str(tmp_path / 'trash')
    tf.retire(trash, [str(src)])
    manifest = os.path.join(trash, 'MANIFEST')
    with open(manifest, 'rb') as handle:
        lines = handle.read().split(b'\n')
    kept = [line for line in lines if b'part1.bin' not in line]
    with open(manifest, 'wb') as handle:
        handle.write(b'\n'.join(kept))
    with pytest.raises(tf.TrashError, match=r'accounts for 2 file\(s\) .* holds 1 it does not name \(.*part1.bin\)'):
        tf.restore(trash)
    assert sorted(os.listdir(str(src))) == []


# ----------------------------------------------------------------------------- names no old writer could hold

def test_a_name_that_is_not_utf8_retires_and_restores(tmp_path):
    src = os.fsencode(str(tmp_path / 'd'))
    os.mkdir(src)
    names = [b'bad\xff\xfe', b'v\x0btab', 'nel\x85'.encode(), 'ls\u2028'.encode(), b'back\\x41slash', b'-']
    for name in names:
        with open(os.path.join(src, name), 'wb') as handle:
            handle.write(name * 3)
    os.symlink(b'/target/\xff\n', os.path.join(src, b'link\xc3'))
    before = snapshot(src)
    trash = str(tmp_path / 'trash')
    r = tf.retire(trash, [os.fsdecode(src)], comments=['two\nlines', 'u\u2028v', ''])
    assert len(r['moves']) == len(names) + 1
    with open(os.path.join(trash, 'MANIFEST'), 'rb') as handle:
        raw = handle.read()
    assert all(0x20 <= b < 0x7f for b in raw.replace(b'\n', b'').replace(b'\t', b''))   # plain ASCII records
    assert manifest_of(trash)['comments'] == ['two\nlines', 'u\u2028v', '']
    tf.restore(trash)
    assert snapshot(src) == before


# ----------------------------------------------------------------------------- v1 and v2 still restore

def old_manifest(version, rows, units, comments):
    """A MANIFEST exactly as the v1/v2 writer wrote it (after the moves, tab-separated, nothing escaped)."""
    columns = ('kind', 'path', 'owner', 'group', 'mode', 'sha256', 'link_target') + (('given',) if version == 2 else ())
    lines = ['# dankfleet.llm trash MANIFEST v%d' % version]
    lines += ['# %s' % c for c in comments]
    lines.append('# ' + '\t'.join(columns))
    lines += ['\t'.join(row[c] for c in columns) for row in rows]
    lines.append('# ' + '\t'.join(tf.UNIT_COLUMNS))
    lines += ['\t'.join(['unit'] + [u.get(c) or '-' for c in tf.UNIT_COLUMNS[1:]]) for u in units]
    return ('\n'.join(lines) + '\n').encode()


@pytest.mark.parametrize('version', [1, 2])
def test_old_manifests_still_restore(tmp_path, version):
    src, paths = _payloads(tmp_path, count=2, size=10)
    os.symlink(paths[0], str(src / 'link'))
    name_v = str(src / 'vt\x0bname')                 # a name v2 wrote raw: split on \n only, it reads back
    with open(name_v, 'w') as handle:
        handle.write('v')
    before = snapshot(src)
    trash = str(tmp_path / 'trash')
    unit = {'unit': 'x.service', 'scope': 'system', 'user': None, 'active_state': 'active',
            'unit_file_state': 'enabled', 'sub_state': 'running'}
    tf.retire(trash, [str(src)], units=[unit])
    rows = manifest_of(trash)['files']
    for row in rows:
        row['given'] = row['given'] + '/.' if version == 2 else row['given']
    with open(os.path.join(trash, 'MANIFEST'), 'wb') as handle:
        handle.write(old_manifest(version, rows, [unit], ['retired by the v%d writer' % version]))
    parsed = manifest_of(trash)
    assert parsed['version'] == version and parsed['comments'] == ['retired by the v%d writer' % version]
    assert [r['state'] for r in parsed['files']] == ['moved'] * 4
    r = tf.restore(trash)
    assert r['changed'] and len(r['moves']) == 4 and r['units'] == [dict(unit, kind='unit')]
    assert snapshot(src) == before


def test_a_retire_into_a_v2_trash_rewrites_it_as_v3_and_loses_no_row(tmp_path):
    src, paths = _payloads(tmp_path, count=2, size=10)
    before = snapshot(src)
    trash = str(tmp_path / 'trash')
    tf.retire(trash, [paths[0]])
    rows = manifest_of(trash)['files']
    with open(os.path.join(trash, 'MANIFEST'), 'wb') as handle:
        handle.write(old_manifest(2, rows, [], ['first']))
    tf.retire(trash, [paths[1]], comments=['second'])
    m = manifest_of(trash)
    assert m['version'] == 3 and m['comments'] == ['first', 'second']
    assert [os.path.basename(r['path']) for r in m['files']] == ['part0.bin', 'part1.bin']
    tf.restore(trash)
    assert snapshot(src) == before
