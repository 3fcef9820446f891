# -*- coding: utf-8 -*-
"""trash_files: retire into a dated trash with a MANIFEST and restore byte-identical."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import os
import stat
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
COLLECTIONS = os.path.join(REPO, 'collections')
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

from ansible_collections.dankfleet.llm.plugins.module_utils import trash_files as tf  # noqa: E402


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


def test_retire_refuses_to_overwrite_the_trash(host, tmp_path):
    trash = str(tmp_path / 'trash')
    path = str(host / 'home/dank/.config/containers/systemd/radiance.container')
    tf.retire(trash, [path])
    with open(path, 'w') as handle:
        handle.write('a new file at the same path')
    with pytest.raises(tf.TrashError, match='already exists in the trash'):
        tf.retire(trash, [path])
    assert open(path).read() == 'a new file at the same path'


def test_restore_refuses_when_the_original_path_is_taken(host, tmp_path):
    trash = str(tmp_path / 'trash')
    path = str(host / 'home/dank/.config/containers/systemd/radiance.container')
    tf.retire(trash, [path])
    with open(path, 'w') as handle:
        handle.write('someone else')
    with pytest.raises(tf.TrashError, match='exists already'):
        tf.restore(trash)
    assert open(path).read() == 'someone else'
    assert os.path.exists(os.path.join(trash, 'MANIFEST'))


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


def test_paths_that_the_manifest_cannot_hold_are_refused(tmp_path):
    bad = tmp_path / 'tab\there'
    bad.write_text('x')
    with pytest.raises(tf.TrashError, match='tab or newline'):
        tf.retire(str(tmp_path / 'trash'), [str(bad)])
    assert bad.exists()


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
    real_rename = os.rename
    calls = []

    def rename(src, dest):
        if ('/trash/' in src) != ('/trash/' in dest):
            calls.append(src)
            raise OSError(18, 'Invalid cross-device link')
        return real_rename(src, dest)

    monkeypatch.setattr(tf.os, 'rename', rename)
    before = _snapshot(str(host))
    trash = str(tmp_path / 'trash')
    tf.retire(trash, _paths(host), units=[UNIT])
    assert calls and _snapshot(str(host)) == {}
    tf.restore(trash)
    assert _snapshot(str(host)) == before
