# -*- coding: utf-8 -*-
"""trash_files: retire into a dated trash with a MANIFEST and restore byte-identical."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import grp
import hashlib
import os
import pwd
import stat

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
COLLECTIONS = os.path.join(REPO, 'collections')


def _snapshot(root):
    """Every file and link below root: (kind, mode, sha256 or link target)."""
    out = {}
    for base, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            path = os.path.join(base, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[path] = ('link', os.readlink(path))
            else:
                with open(path, 'rb') as handle:
                    out[path] = ('file', '%o' % stat.S_IMODE(st.st_mode), hashlib.sha256(handle.read()).hexdigest())
    return out


@pytest.fixture
def host(tmp_path):
    """A fake earlier runtime: a unit linked into a repo, its wants link, a quadlet, helper scripts."""
    root = tmp_path / 'host'
    (root / 'opt/radiance/units').mkdir(parents=True)
    (root / 'etc/systemd/system/multi-user.target.wants').mkdir(parents=True)
    (root / 'home/dank/.config/containers/systemd').mkdir(parents=True)
    unit = root / 'opt/radiance/units/proxy.service'
    unit.write_text('[Service]\nExecStart=/opt/radiance/proxy.py\n')
    (root / 'etc/systemd/system/proxy.service').symlink_to(unit)
    (root / 'etc/systemd/system/multi-user.target.wants/proxy.service').symlink_to(
        root / 'etc/systemd/system/proxy.service')
    proxy = root / 'opt/radiance/proxy.py'
    proxy.write_bytes(b'#!/usr/bin/python3\nprint("proxy")\n\x00\xff binary tail')
    proxy.chmod(0o750)
    (root / 'home/dank/.config/containers/systemd/radiance.container').write_text('[Container]\nImage=x\n')
    return root


def _paths(root):
    return [str(root / 'etc/systemd/system/proxy.service'),
            str(root / 'etc/systemd/system/multi-user.target.wants/proxy.service'),
            str(root / 'opt/radiance'),
            str(root / 'home/dank/.config/containers/systemd/radiance.container')]


UNIT = {'unit': 'proxy.service', 'scope': 'system', 'user': None,
        'active_state': 'active', 'unit_file_state': 'enabled', 'sub_state': 'running'}


def test_retire_then_restore_is_byte_identical(host, tmp_path):
    before = _snapshot(str(host))
    trash = str(tmp_path / 'trash/20260916-radiance-retire')
    result = tf.retire(trash, _paths(host), units=[UNIT], comments=['retired for the test'])
    assert result['changed'] is True
    assert len(result['moves']) == 5
    assert _snapshot(str(host)) == {}  # nothing left behind
    # Original paths are preserved below the trash, links stay links.
    moved_link = tf.trash_path(trash, str(host / 'etc/systemd/system/proxy.service'))
    assert os.path.islink(moved_link)
    assert os.readlink(moved_link) == str(host / 'opt/radiance/units/proxy.service')
    manifest = open(os.path.join(trash, 'MANIFEST')).read()
    assert manifest.startswith(tf.MANIFEST_HEADER + '\n# retired for the test\n')
    files, units = tf.parse_manifest(manifest)
    assert {r['path'] for r in files} == set(before)
    assert units == [dict(UNIT, kind='unit')]
    proxy_row = [r for r in files if r['path'].endswith('proxy.py')][0]
    assert proxy_row['mode'] == '0750'
    assert proxy_row['sha256'] == hashlib.sha256(
        b'#!/usr/bin/python3\nprint("proxy")\n\x00\xff binary tail').hexdigest()

    restored = tf.restore(trash)
    assert restored['changed'] is True
    assert _snapshot(str(host)) == before
    assert restored['units'][0]['unit'] == 'proxy.service'
    assert not os.path.exists(os.path.join(trash, 'MANIFEST'))
    assert restored['manifest'].startswith(os.path.join(trash, 'MANIFEST.restored-'))


def test_retire_is_idempotent_and_check_mode_changes_nothing(host, tmp_path):
    trash = str(tmp_path / 'trash/d')
    before = _snapshot(str(host))
    dry = tf.retire(trash, _paths(host), units=[UNIT], check_mode=True)
    assert dry['changed'] is True and len(dry['moves']) == 5
    assert dry['moves'][0]['dest'].startswith(trash + '/')
    assert _snapshot(str(host)) == before
    assert not os.path.exists(trash)

    tf.retire(trash, _paths(host), units=[UNIT])
    again = tf.retire(trash, _paths(host)[:2] + [str(host / 'home/dank/.config/containers/systemd/radiance.container')])
    assert again['changed'] is False
    assert again['moves'] == []
    assert len(again['already_retired']) == 3
    assert again['missing'] == []


def test_a_later_day_finds_what_an_earlier_day_retired(host, tmp_path):
    path = str(host / 'home/dank/.config/containers/systemd/radiance.container')
    tf.retire(str(tmp_path / 'trash/20260916-radiance-retire'), [path])
    later = tf.retire(str(tmp_path / 'trash/20260917-radiance-retire'), [path])
    assert later['changed'] is False and later['missing'] == []
    assert later['already_retired'][0]['dest'].startswith(str(tmp_path / 'trash/20260916-radiance-retire'))
    other_tag = tf.retire(str(tmp_path / 'trash/20260917-other-retire'), [path])
    assert other_tag['missing'] == [path]


def test_missing_paths_are_reported_not_invented(tmp_path):
    result = tf.retire(str(tmp_path / 'trash'), [str(tmp_path / 'never-existed')])
    assert result['changed'] is False
    assert result['missing'] == [str(tmp_path / 'never-existed')]
    assert not os.path.exists(str(tmp_path / 'trash'))


NEWCOMER = 'a new file at the same path'


@pytest.fixture
def retaken(host, tmp_path):
    """(trash, path): the quadlet retired into trash, then a new file written at its old path."""
    trash = str(tmp_path / 'trash')
    path = str(host / 'home/dank/.config/containers/systemd/radiance.container')
    tf.retire(trash, [path])
    with open(path, 'w') as handle:
        handle.write(NEWCOMER)
    return trash, path


def test_retire_refuses_to_overwrite_the_trash(retaken):
    trash, path = retaken
    with pytest.raises(tf.TrashError, match='already exists in the trash'):
        tf.retire(trash, [path])
    assert open(path).read() == NEWCOMER


def test_restore_refuses_when_the_original_path_is_taken(retaken):
    trash, path = retaken
    with pytest.raises(tf.TrashError, match='exists already'):
        tf.restore(trash)
    assert open(path).read() == NEWCOMER
    assert os.path.exists(os.path.join(trash, 'MANIFEST'))


def test_manifest_owner_and_group_names():
    assert (tf._name_of('owner', 0), tf._name_of('group', 0)) == ('root', 'root')
    assert (tf._id_of('owner', 'root'), tf._id_of('group', 'root')) == (0, 0)
    unused = next(n for n in range(54321, 65534) if not _known(pwd.getpwuid, n) and not _known(grp.getgrgid, n))
    assert (tf._name_of('owner', unused), tf._name_of('group', unused)) == (str(unused), str(unused))
    assert (tf._id_of('owner', str(unused)), tf._id_of('group', str(unused))) == (unused, unused)
    with pytest.raises(tf.TrashError, match="MANIFEST names owner 'no-such-dank', .* create the user first"):
        tf._id_of('owner', 'no-such-dank')
    with pytest.raises(tf.TrashError, match="MANIFEST names group 'no-such-dank', .* create the group first"):
        tf._id_of('group', 'no-such-dank')


def _known(lookup, number):
    try:
        lookup(number)
    except KeyError:
        return False
    return True


def test_restore_refuses_a_tampered_trash_copy(host, tmp_path):
    trash = str(tmp_path / 'trash')
    path = str(host / 'home/dank/.config/containers/systemd/radiance.container')
    tf.retire(trash, [path])
    with open(tf.trash_path(trash, path), 'a') as handle:
        handle.write('edited in the trash')
    with pytest.raises(tf.TrashError, match='no longer matches its MANIFEST'):
        tf.restore(trash)
    assert not os.path.exists(path)


def test_restore_is_idempotent(host, tmp_path):
    trash = str(tmp_path / 'trash')
    tf.retire(trash, _paths(host), units=[UNIT])
    tf.restore(trash)
    again = tf.restore(trash)
    assert again['changed'] is False and again['already_restored'] is True
    assert again['units'][0]['active_state'] == 'active'
    assert tf.restore(trash, check_mode=True)['changed'] is False


def test_restore_check_mode_lists_moves_and_changes_nothing(host, tmp_path):
    trash = str(tmp_path / 'trash')
    tf.retire(trash, _paths(host), units=[UNIT])
    dry = tf.restore(trash, check_mode=True)
    assert dry['changed'] is True and len(dry['moves']) == 5
    assert _snapshot(str(host)) == {}
    assert os.path.exists(os.path.join(trash, 'MANIFEST'))


def test_unit_paths_finds_the_unit_dropins_and_wants_links(host):
    (host / 'etc/systemd/system/proxy.service.d').mkdir()
    (host / 'etc/systemd/system/proxy.service.d/override.conf').write_text('[Service]\nNice=5\n')
    (host / 'etc/systemd/system/default.target.requires').mkdir()
    (host / 'etc/systemd/system/default.target.requires/proxy.service').symlink_to('/etc/systemd/system/proxy.service')
    found = tf.unit_paths('proxy.service', 'system', root=str(host))
    rel = sorted(os.path.relpath(p, str(host)) for p in found)
    assert rel == sorted([
        'etc/systemd/system/proxy.service',
        'etc/systemd/system/proxy.service.d/override.conf',
        'etc/systemd/system/multi-user.target.wants/proxy.service',
        'etc/systemd/system/default.target.requires/proxy.service',
    ])
    assert tf.unit_paths('other.service', 'system', root=str(host)) == []


def test_user_scope_needs_a_user():
    with pytest.raises(tf.TrashError, match='needs its user'):
        tf.unit_paths('x.service', 'user')
    with pytest.raises(tf.TrashError, match='does not exist'):
        tf.unit_paths('x.service', 'user', user='no-such-user-dankfleet')


def test_names_with_tabs_and_newlines_round_trip(tmp_path):
    """v3 escapes every byte outside printable ASCII: what v2 refused now retires and restores."""
    bad = tmp_path / 'tab\there\nand\x0bmore'
    bad.write_text('x')
    trash = str(tmp_path / 'trash')
    tf.retire(trash, [str(bad)])
    assert not bad.exists()
    (row,), _ = tf._read(os.path.join(trash, 'MANIFEST'))
    assert row['path'] == str(bad) and row['state'] == 'moved'
    tf.restore(trash)
    assert bad.read_text() == 'x'


def test_relative_paths_and_the_trash_itself_are_refused(tmp_path):
    with pytest.raises(tf.TrashError, match='not absolute'):
        tf.trash_path('/trash', 'etc/x')
    inside = tmp_path / 'trash' / 'x'
    inside.parent.mkdir()
    inside.write_text('x')
    with pytest.raises(tf.TrashError, match='inside the trash'):
        tf.retire(str(tmp_path / 'trash'), [str(inside)])


@pytest.mark.parametrize('text, match', [
    ('not a manifest\n', 'does not start with'),
    (tf.MANIFEST_HEADER + '\nfile\t/x\troot\n', 'line 2 is malformed'),
    (tf.MANIFEST_HEADER + '\nbogus\t/x\troot\troot\t0644\t-\t-\n', "kind 'bogus'"),
])
def test_malformed_manifests_name_the_line(text, match):
    with pytest.raises(tf.TrashError, match=match):
        tf.parse_manifest(text)


def test_cross_filesystem_move_copies_verifies_and_unlinks(host, tmp_path, monkeypatch):
    """EXDEV from every rename into or out of the trash: the copy path moves everything (a real second
    filesystem is in test_trash_files_wal.py)."""
    real_rename = tf._rename_noreplace
    calls = []

    def rename(src_fd, name, dst_fd, dest_name):
        if os.path.samestat(os.fstat(src_fd), os.fstat(dst_fd)):
            return real_rename(src_fd, name, dst_fd, dest_name)
        calls.append(name)
        raise OSError(18, 'Invalid cross-device link')

    monkeypatch.setattr(tf, '_rename_noreplace', rename)
    before = _snapshot(str(host))
    trash = str(tmp_path / 'trash')
    tf.retire(trash, _paths(host), units=[UNIT])
    assert len(calls) == 5 and _snapshot(str(host)) == {}
    tf.restore(trash)
    assert len(calls) == 10 and _snapshot(str(host)) == before


# ----------------------------------------------------------------------------- careless paths (issue 15)

@pytest.mark.parametrize('path', ['/', '/etc', '/usr', '/home', '/var/lib', '/usr/lib/..', '/etc/systemd/system',
                                  '/root', '/etc/../usr/', '/proc'])
def test_system_trees_and_what_is_above_them_are_refused(tmp_path, path):
    with pytest.raises(tf.TrashError, match='never moves a system tree'):
        tf.retire(str(tmp_path / 'trash'), [path])
    assert not (tmp_path / 'trash').exists()


def test_a_users_home_is_refused(tmp_path):
    import pwd
    home = pwd.getpwuid(os.getuid()).pw_dir
    with pytest.raises(tf.TrashError, match='never moves a system tree'):
        tf.retire(str(tmp_path / 'trash'), [home])
    with pytest.raises(tf.TrashError, match='never moves a system tree'):
        tf.retire(str(tmp_path / 'trash'), [os.path.join(home, '.config/systemd/user')])


def test_mount_points_are_refused(tmp_path):
    """Check mode only, and a kernel pseudo-filesystem: the refusal comes before any move either way."""
    mount = next((m for m in ('/dev/shm', '/dev/mqueue', '/dev/pts', '/sys/fs/cgroup') if os.path.ismount(m)), None)
    if mount is None:
        pytest.skip('no kernel pseudo-filesystem mount on this host')
    with pytest.raises(tf.TrashError, match='is a mount point'):
        tf.retire(str(tmp_path / 'trash'), [mount], check_mode=True)
    inside = tmp_path / 'tree'
    inside.mkdir()
    (inside / 'shm').symlink_to(mount)         # a link to a mount moves as a link: no refusal
    assert tf.retire(str(tmp_path / 'trash'), [str(inside)], check_mode=True)['moves'][0]['kind'] == 'link'


@pytest.mark.parametrize('trash', ['trash', './x', '', '/', '/etc'])
def test_trash_dir_must_be_absolute_and_its_own(tmp_path, trash, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / 'f'
    f.write_text('x')
    with pytest.raises(tf.TrashError, match='trash_dir'):
        tf.retire(trash, [str(f)])
    with pytest.raises(tf.TrashError, match='trash_dir'):
        tf.restore(trash)
    assert f.exists() and sorted(os.listdir(str(tmp_path))) == ['f']


def test_parents_resolve_the_kernels_way_and_the_manifest_records_both(tmp_path):
    """a/link/../x: lexically a/x, for the kernel real/x (link -> real/sub). The kernel's file moves."""
    (tmp_path / 'a').mkdir()
    (tmp_path / 'real' / 'sub').mkdir(parents=True)
    (tmp_path / 'a' / 'link').symlink_to(tmp_path / 'real' / 'sub')
    (tmp_path / 'a' / 'x').write_text('lexical decoy')
    (tmp_path / 'real' / 'x').write_text('the kernel file')
    given = str(tmp_path / 'a' / 'link' / '..' / 'x')
    trash = str(tmp_path / 'trash')
    r = tf.retire(trash, [given])
    assert [m['src'] for m in r['moves']] == [str(tmp_path / 'real' / 'x')]
    assert (tmp_path / 'a' / 'x').read_text() == 'lexical decoy'
    files, _ = tf._read(os.path.join(trash, 'MANIFEST'))
    assert [(row['path'], row['given']) for row in files] == [(str(tmp_path / 'real' / 'x'), given)]
    tf.restore(trash)
    assert (tmp_path / 'real' / 'x').read_text() == 'the kernel file'


def test_same_file_under_two_spellings_moves_once_with_a_named_duplicate(tmp_path):
    (tmp_path / 'real').mkdir()
    (tmp_path / 'alias').symlink_to(tmp_path / 'real')
    (tmp_path / 'real' / 'f').write_text('x')
    r = tf.retire(str(tmp_path / 'trash'), [str(tmp_path / 'real' / 'f'), str(tmp_path / 'alias' / 'f'),
                                            str(tmp_path / 'real' / '.' / 'f')])
    assert len(r['moves']) == 1
    assert r['duplicates'] == [{'given': str(tmp_path / 'alias' / 'f'), 'same_as': str(tmp_path / 'real' / 'f'),
                                'path': str(tmp_path / 'real' / 'f')}]


@pytest.mark.parametrize('unit', ['../../etc/passwd', 'a/b.service', '.hidden.service', 'x.service/..',
                                  'x', 'x.exe', 'sp ace.service', 'nl\n.service', 'a' * 250 + '.service'])
def test_unit_names_are_validated(tmp_path, unit):
    with pytest.raises(tf.TrashError, match='is not a unit name'):
        tf.unit_paths(unit, 'system', root=str(tmp_path))
    with pytest.raises(tf.TrashError, match='is not a unit name'):
        tf.retire(str(tmp_path / 'trash'), [], units=[dict(UNIT, unit=unit)])


@pytest.mark.parametrize('unit', ['x.service', 'getty@tty1.service', 'a:b_c-d.e.timer', 'dev-sda1.device',
                                  'sys-x\\x2dy.mount'])
def test_good_unit_names_pass(unit):
    assert tf.check_unit_name(unit) == unit


def test_role_and_module_share_the_unit_name_rule():
    import yaml
    with open(os.path.join(REPO, 'roles', 'runtime_retire', 'vars', 'main.yml')) as handle:
        role_vars = yaml.safe_load(handle)
    assert role_vars['_runtime_retire_unit_name'] == tf.UNIT_NAME.pattern
