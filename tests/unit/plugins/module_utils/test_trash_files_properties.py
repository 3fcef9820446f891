# -*- coding: utf-8 -*-
"""trash_files path decisions, property-based: random trees with symlinks, random spellings.

Whatever the tree and however the paths are spelled (symlinked parents, '..', '.', links to
outside the tree), retire moves exactly the kernel's files of the named paths -- nothing
outside them -- and restore puts every byte back.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.host import trash_files as tf

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
COLLECTIONS = os.path.join(REPO, 'collections')

NAMES = st.sampled_from(['a', 'b', 'c', 'd'])


@st.composite
def trees(draw):
    """(entries, links, named): dirs/files under 't', symlinks anywhere (in or out), paths to retire."""
    dirs = ['t', 'outside']
    for _ in range(draw(st.integers(0, 5))):
        dirs.append(os.path.join(draw(st.sampled_from(dirs)), draw(NAMES)))
    dirs = sorted(set(dirs))
    files = sorted(set(os.path.join(draw(st.sampled_from(dirs)), 'f' + draw(NAMES))
                       for _ in range(draw(st.integers(1, 8)))) - set(dirs))
    links = {}
    for _ in range(draw(st.integers(0, 4))):
        where = os.path.join(draw(st.sampled_from(dirs)), 'l' + draw(NAMES))
        links[where] = draw(st.sampled_from(dirs + files + ['/nonexistent']))
    spellings = []
    for _ in range(draw(st.integers(1, 4))):
        base = draw(st.sampled_from(dirs + list(links)))
        extra = draw(st.sampled_from(['', '/..', '/.', '/f' + draw(NAMES), '/../f' + draw(NAMES)]))
        spellings.append(base + extra)
    return dirs, files, links, spellings


def _snapshot(root):
    out = {}
    for base, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(base, d))]:
            path = os.path.join(base, name)
            if os.path.islink(path):
                out[path] = ('link', os.readlink(path))
            else:
                with open(path, 'rb') as handle:
                    out[path] = ('file', handle.read())
    return out


def _build(root, dirs, files, links):
    for d in dirs:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    for f in files:
        with open(os.path.join(root, f), 'w') as handle:
            handle.write('content of %s' % f)
    for where, target in links.items():
        full = os.path.join(root, where)
        if not os.path.lexists(full) and os.path.isdir(os.path.dirname(full)):
            os.symlink(target if target.startswith('/') else os.path.join(root, target), full)


def _named(root, spellings):
    """What the kernel says each spelling names: the entries retire may move."""
    allowed = set()
    for spelling in spellings:
        try:
            path = tf.kernel_path(os.path.join(root, spelling))
        except tf.TrashError:
            continue  # a spelling the kernel cannot walk: retire refuses it (below), it names nothing
        if os.path.isdir(path) and not os.path.islink(path):
            for base, dirs, files in os.walk(path):
                allowed.update(os.path.join(base, n) for n in files + dirs)
        allowed.add(path)
    return allowed


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_nothing_outside_the_named_paths_moves(tree):
    dirs, files, links, spellings = tree
    root = os.path.realpath(tempfile.mkdtemp(prefix='trash-prop-'))
    try:
        _build(root, dirs, files, links)
        before = _snapshot(root)
        allowed = _named(root, spellings)
        trash = os.path.join(root, 'trash')
        try:
            r = tf.retire(trash, [os.path.join(root, s) for s in spellings])
        except tf.TrashError as exc:
            # the refusals a tree in a temp dir may meet: the trash inside a named path, or a spelling
            # that resolves to a system tree (a link to /nonexistent, then '..': the kernel's '/'), or one the
            # kernel cannot walk (a link to a file, then '..': ENOTDIR, where realpath() made up a directory)
            assert ('retired into itself' in str(exc) or 'never moves a system tree' in str(exc)
                    or 'not a directory' in str(exc)), str(exc)
            assert _snapshot(root) == before
            return
        after = dict((p, v) for p, v in _snapshot(root).items() if not p.startswith(trash + '/'))
        gone = set(before) - set(after)
        assert gone <= allowed, 'moved outside the named paths: %s' % sorted(gone - allowed)
        assert set(m['src'] for m in r['moves']) == gone
        for p in after:
            assert after[p] == before[p]
        if r['moves']:
            tf.restore(trash)
            assert dict((p, v) for p, v in _snapshot(root).items() if not p.startswith(trash + '/')) == before
    finally:
        shutil.rmtree(root)
