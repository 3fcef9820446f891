# -*- coding: utf-8 -*-
"""The changelog as antsibull-changelog keeps it, and every entry in community.general's shape.

- `antsibull-changelog lint` passes on the pending fragments and `lint-changelog-yaml` on the
  released changelogs/changelog.yaml;
- CHANGELOG.rst is what antsibull-changelog renders from changelog.yaml (a release was made with the
  tool, not edited by hand), rendered in a copy so the tree is not touched;
- every entry, pending or released, is one short line: `name - what changed.`, optionally with a
  `(https://github.com/dankfleet/llm/issues/N)` reference; no `#N`/`issue N` shorthand, and no test,
  lab or molecule paths outside the `trivial` section (which is not rendered).
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
CHANGELOGS = os.path.join(REPO, 'changelogs')
TOOL = os.path.join(os.path.dirname(sys.executable), 'antsibull-changelog')
ENTRY = re.compile(r'^[\w.,/ -]+? - [^\n]+\.$')
REFERENCE = re.compile(r'\((?!https://github\.com/dankfleet/llm/(?:issues|pull)/\d+\))[^)]*(?:#\d+|issue \d+)[^)]*\)'
                       r'|(?<!/)#\d+\b|\bissue \d+', re.I)
# One sentence and its reference; the reasons belong in the commit.
MAX_LENGTH = 200
# .yamllint's line-length, which `make lint` holds every fragment's lines to (a long entry folds over lines)
MAX_LINE = 160
INTERNAL = re.compile(r'\b(?:tests|molecule|benchmarks|\.config)/')


def _run(args, cwd):
    env = {'PATH': os.path.dirname(sys.executable) + os.pathsep + '/usr/bin:/bin', 'HOME': str(cwd),
           'LANG': 'C.UTF-8'}
    return subprocess.run([TOOL] + args, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=120)


def test_every_fragment_line_fits_yamllint():
    long_lines = []
    for path in sorted(glob.glob(os.path.join(CHANGELOGS, 'fragments', '*.yml'))):
        with open(path) as handle:
            long_lines += ['%s:%d: %d characters' % (os.path.basename(path), n, len(line.rstrip('\n')))
                           for n, line in enumerate(handle, 1) if len(line.rstrip('\n')) > MAX_LINE]
    assert long_lines == [], 'fold the entry over lines (yamllint allows %d): %s' % (MAX_LINE, long_lines)


def test_the_fragments_lint():
    run = _run(['lint'], REPO)
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_the_released_changelog_lints():
    run = _run(['lint-changelog-yaml', os.path.join('changelogs', 'changelog.yaml')], REPO)
    assert run.returncode == 0 and not run.stdout.strip(), run.stdout + run.stderr


def test_changelog_rst_is_rendered_from_changelog_yaml(tmp_path):
    os.mkdir(str(tmp_path / 'changelogs'))
    shutil.copy(os.path.join(REPO, 'galaxy.yml'), str(tmp_path))
    for name in ('config.yaml', 'changelog.yaml'):
        shutil.copy(os.path.join(CHANGELOGS, name), str(tmp_path / 'changelogs'))
    run = _run(['generate', '--output', str(tmp_path / 'CHANGELOG.rst'), '--output-format', 'rst'], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    with open(os.path.join(REPO, 'CHANGELOG.rst')) as committed:
        assert (tmp_path / 'CHANGELOG.rst').read_text() == committed.read()


def _entries():
    """(where, section, entry) for every pending fragment entry and every released change."""
    fragments = os.path.join(CHANGELOGS, 'fragments')
    for name in sorted(os.listdir(fragments)):
        if name.endswith(('.yml', '.yaml')):
            with open(os.path.join(fragments, name)) as handle:
                for section, entries in (yaml.safe_load(handle) or {}).items():
                    for entry in (entries if isinstance(entries, list) else [entries]):
                        yield 'fragments/' + name, section, entry
    with open(os.path.join(CHANGELOGS, 'changelog.yaml')) as handle:
        releases = (yaml.safe_load(handle) or {}).get('releases') or {}
    for version, release in sorted(releases.items()):
        for section, entries in ((release.get('changes') or {}).items()):
            for entry in (entries if isinstance(entries, list) else [entries]):
                yield 'release ' + version, section, entry


ENTRIES = list(_entries())


def test_there_are_entries():
    assert len(ENTRIES) > 10


@pytest.mark.parametrize('where,section,entry', [e for e in ENTRIES if e[1] != 'release_summary'],
                         ids=lambda value: str(value)[:40])
def test_every_entry_is_one_line_in_community_generals_shape(where, section, entry):
    assert isinstance(entry, str) and ENTRY.match(entry), '%s %s: not "name - what changed.": %r' % (
        where, section, entry)
    assert len(entry) <= MAX_LENGTH, '%s: %d characters, a sentence is at most %d: %r' % (
        where, len(entry), MAX_LENGTH, entry)
    assert not REFERENCE.search(entry), '%s: a reference is (https://github.com/dankfleet/llm/issues/N): %r' % (
        where, entry)
    if section != 'trivial':
        assert not INTERNAL.search(entry), '%s: an internal path in a rendered entry: %r' % (where, entry)
