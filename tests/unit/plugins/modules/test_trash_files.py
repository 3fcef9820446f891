# -*- coding: utf-8 -*-
"""dankfleet.llm.trash_files as Ansible runs it: the module's main() with real arguments (and twice through the
``ansible`` command itself), over the classes of issue 23: names that are not UTF-8, a trash that fills
midway, a parent swapped for a symlink, a MANIFEST owned by another user or cut to its header."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.dankfleet.llm.plugins.modules import trash_files as module
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module
from ansible_collections.dankfleet.llm.tests.unit.trash_testlib import NOBODY, needs_root, snapshot, tmpfs
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import ansible_env


def run(capsys, **args):
    return run_module(capsys, module.main, **args)


@pytest.fixture
def tree(tmp_path):
    d = os.fsencode(str(tmp_path / 'rt'))
    os.mkdir(d)
    for name in (b'bad\xff\xfe.service', b'vt\x0b', 'nel\x85'.encode(), 'ls\u2028'.encode(), b'plain'):
        with open(os.path.join(d, name), 'wb') as handle:
            handle.write(name)
    return os.fsdecode(d)


def test_names_that_are_not_utf8_retire_and_restore_through_the_module(capsys, tmp_path, tree):
    before = snapshot(tree)
    trash = str(tmp_path / 'trash' / '20260916-x-retire')
    dry = run(capsys, trash_dir=trash, paths=[tree], check_mode=True, comments=['two\nlines'])
    assert dry['changed'] and len(dry['moves']) == 5 and not os.path.exists(trash)
    r = run(capsys, trash_dir=trash, paths=[tree], comments=['two\nlines'],
            units=[{'unit': 'x.service', 'active_state': 'active', 'sub_state': 'run\u2028ning'}])
    assert not r.get('failed') and r['changed'] and len(r['moves']) == 5 and snapshot(tree) == {}
    srcs = sorted(m['src'] for m in r['moves'])
    assert os.path.join(tree, 'bad\\xff\\xfe.service') in srcs       # JSON carries the undecodable bytes as \xHH
    again = run(capsys, trash_dir=trash, paths=[tree])
    assert again['changed'] is False
    back = run(capsys, trash_dir=trash, state='restored')
    assert back['changed'] and back['units'][0]['sub_state'] == 'run\u2028ning'
    assert snapshot(tree) == before
    assert run(capsys, trash_dir=trash, state='restored')['already_restored'] is True


def test_a_trash_that_fills_midway_fails_naming_it_and_restores(capsys, tmp_path):
    src = tmp_path / 'models'
    src.mkdir()
    for n in range(4):
        (src / ('m%d' % n)).write_bytes(os.urandom(400 * 1024))
    before = snapshot(src)
    with tmpfs(str(tmp_path / 'small')) as small:
        trash = os.path.join(small, 'trash')
        r = run(capsys, trash_dir=trash, paths=[str(src)])
        assert r['failed'] and 'm2 could not be moved to the trash (No space left on device): it stays where it was' \
            in r['msg']
        back = run(capsys, trash_dir=trash, state='restored')
        assert not back.get('failed') and len(back['moves']) == 2
    assert snapshot(src) == before


def test_a_symlink_swapped_in_after_the_retire_is_refused(capsys, tmp_path):
    units = tmp_path / 'units'
    units.mkdir()
    (units / 'x.service').write_text('x')
    victim = tmp_path / 'victim'
    victim.mkdir()
    trash = str(tmp_path / 'trash')
    assert run(capsys, trash_dir=trash, paths=[str(units / 'x.service')])['changed']
    units.rmdir()
    units.symlink_to(victim)
    r = run(capsys, trash_dir=trash, state='restored')
    assert r['failed'] and 'units is a symlink' in r['msg']
    assert os.listdir(str(victim)) == []
    link = tmp_path / 'link-trash'
    link.symlink_to('/etc')
    r = run(capsys, trash_dir=str(link), paths=[str(victim)])
    assert r['failed'] and 'is a symlink' in r['msg'] and victim.exists()


@needs_root
def test_a_foreign_manifest_and_a_cut_one_are_refused(capsys, tmp_path):
    (tmp_path / 'f').write_text('x')
    trash = str(tmp_path / 'trash')
    run(capsys, trash_dir=trash, paths=[str(tmp_path / 'f')])
    manifest = os.path.join(trash, 'MANIFEST')
    os.chown(manifest, NOBODY, NOBODY)
    r = run(capsys, trash_dir=trash, state='restored')
    assert r['failed'] and 'neither root nor the user running this' in r['msg']
    os.chown(manifest, 0, 0)
    with open(manifest, 'rb') as handle:
        header = handle.readline()
    with open(manifest, 'wb') as handle:
        handle.write(header)
    r = run(capsys, trash_dir=trash, state='restored')
    assert r['failed'] and 'cut short' in r['msg'] and r.get('changed') is not True
    assert not (tmp_path / 'f').exists() and os.path.exists(manifest)


def _ansible(args):
    env = ansible_env(ANSIBLE_STDOUT_CALLBACK='json',
                      ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_LOCALHOST_WARNING='0', ANSIBLE_INVENTORY_UNPARSED_WARNING='0')
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible'), 'localhost', '-m',
                           'dankfleet.llm.trash_files', '-a', json.dumps(args)],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    out = json.loads(proc.stdout)
    return out['plays'][0]['tasks'][0]['hosts']['localhost']


def test_through_ansible_a_name_that_is_not_utf8(tmp_path, tree):
    """The retire that used to crash after the files moved ('surrogates not allowed'), via the real CLI."""
    before = snapshot(tree)
    trash = str(tmp_path / 'trash')
    r = _ansible({'trash_dir': trash, 'paths': [tree], 'comments': ['a\nb']})
    assert not r.get('failed'), r.get('msg')
    assert r['changed'] and len(r['moves']) == 5 and snapshot(tree) == {}
    r = _ansible({'trash_dir': trash, 'state': 'restored'})
    assert not r.get('failed'), r.get('msg')
    assert snapshot(tree) == before


def test_diff_lists_the_moved_paths_before_and_after_in_check_mode_and_for_real(capsys, tmp_path):
    src = tmp_path / 'opt'
    src.mkdir()
    (src / 'proxy.py').write_text('x')
    os.symlink('proxy.py', str(src / 'link'))
    trash = str(tmp_path / 'trash' / '20260916-x-retire')
    want_before = sorted([str(src / 'link'), str(src / 'proxy.py')])
    want_after = sorted(trash + p for p in want_before)
    dry = run(capsys, trash_dir=trash, paths=[str(src)], check_mode=True, _ansible_diff=True)
    real = run(capsys, trash_dir=trash, paths=[str(src)], _ansible_diff=True)
    for r in (dry, real):
        assert r['changed'] and sorted(r['diff']['before'].splitlines()) == want_before, r['diff']
        assert sorted(r['diff']['after'].splitlines()) == want_after
        assert [line for line in r['diff']['before'].splitlines()] == [m['src'] for m in r['moves']]
    assert not os.path.lexists(str(src / 'proxy.py')) and os.path.islink(trash + str(src / 'link'))
    again = run(capsys, trash_dir=trash, paths=[str(src)], _ansible_diff=True)
    assert again['changed'] is False and again['diff']['before'] == again['diff']['after'] == ''
    back = run(capsys, trash_dir=trash, state='restored', _ansible_diff=True)
    assert sorted(back['diff']['before'].splitlines()) == want_after
    assert sorted(back['diff']['after'].splitlines()) == want_before and os.path.isfile(str(src / 'proxy.py'))
    assert 'diff' not in run(capsys, trash_dir=trash, state='restored')
