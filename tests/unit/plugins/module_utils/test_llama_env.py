# -*- coding: utf-8 -*-
"""llama_env: the one env-file reader - the modules import it, and the role's host-side checker runs it too
(the role installs this very file beside the checker; from the source tree the checker loads the repo's)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_env
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import plan_actual

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
CHECKER = os.path.join(REPO, 'roles', 'llama_server', 'files', 'llama_env_check.py')
_spec = importlib.util.spec_from_file_location('llama_env_check', CHECKER)
checker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checker)

# What systemd's EnvironmentFile= reading gives for each line (env-file.c, no continuations).
CASES = [
    ('A=plain', {'A': 'plain'}, 0),
    ("A='single $quoted \\n'", {'A': 'single $quoted \\n'}, 0),
    ('A="double \\"esc\\" \\\\ \\` \\$ \\n"', {'A': 'double "esc" \\ ` $ \\n'}, 0),
    ("A=mixed'part'\"two\"rest", {'A': 'mixedparttworest'}, 0),
    ('A=back\\ slash', {'A': 'back slash'}, 0),
    ('  A = spaced  ', {'A': 'spaced'}, 0),
    ('A=', {'A': ''}, 0),
    ('# comment\n; also a comment\n\nA=1', {'A': '1'}, 0),
    ('A={"enable_thinking":true}', {'A': '{enable_thinking:true}'}, 0),     # bare quotes quote
    ("A='{\"k\": [1, 2]}'", {'A': '{"k": [1, 2]}'}, 0),
    ('A=1\nA=2', {'A': '1'}, 1),                          # set twice: the first wins, a problem
    ('no equals sign', {}, 1),
    ('1BAD=x', {}, 1),
    ("A='unterminated", {}, 1),
    ('A="unterminated', {}, 1),
    ('LLAMA_API_KEY=\'k\'\nB=2', {'LLAMA_API_KEY': 'k', 'B': '2'}, 0),
]


@pytest.mark.parametrize('text, variables, problems', CASES)
def test_the_reader_reads_like_systemd(text, variables, problems):
    got, found = llama_env.parse(text)
    assert got == variables and len(found) == problems, found


def test_the_host_checker_has_no_parser_of_its_own():
    """One copy: the checker's parse/parse_value are llama_env's, loaded from plugins/module_utils in the tree."""
    assert os.path.samefile(checker.llama_env.__file__, llama_env.__file__)
    assert checker.parse.__code__.co_code == llama_env.parse.__code__.co_code
    assert checker.parse_value.__code__.co_code == llama_env.parse_value.__code__.co_code
    source = open(CHECKER).read()
    assert 'def parse' not in source and 'DOUBLE_QUOTE_ESCAPES' not in source


def test_the_role_installs_this_file_beside_the_checker():
    """The checker loads llama_env.py from its own directory on the host: install.yml must put the collection's
    module_utils/base/llama_env.py there, under that name, beside the checker."""
    tasks = yaml.safe_load(open(os.path.join(REPO, 'roles', 'llama_server', 'tasks', 'install.yml')))
    role_vars = yaml.safe_load(open(os.path.join(REPO, 'roles', 'llama_server', 'vars', 'main.yml')))
    copies = dict((f['src'], f['dest']) for t in tasks if 'dankfleet.llm.render_files' in t
                  for f in t['dankfleet.llm.render_files']['files'] if f.get('template') is False)
    src = '{{ role_path }}/../../plugins/module_utils/base/llama_env.py'
    assert copies[src] == '{{ _llama_server_env_parser }}'
    assert copies['llama_env_check.py'] == '{{ _llama_server_env_checker }}'
    assert role_vars['_llama_server_env_parser'] == '{{ llama_server_libexec_dir }}/llama_env.py'
    assert role_vars['_llama_server_env_checker'] == '{{ llama_server_libexec_dir }}/llama_env_check.py'
    assert os.path.samefile(os.path.join(REPO, 'roles', 'llama_server', src.split('}}/', 1)[1]), llama_env.__file__)


def test_the_installed_pair_runs_alone_and_the_checker_alone_names_what_is_missing(tmp_path):
    """As on the host: the two files in a libexec directory outside any collection, run with -I (no user site,
    no PYTHONPATH, no cwd)."""
    libexec = tmp_path / 'libexec'
    libexec.mkdir()
    shutil.copy(CHECKER, str(libexec / 'llama_env_check.py'))
    env = tmp_path / 'e.env'
    env.write_text("LLAMA_API_KEY='k'\nALIAS=\"a \\$b\"\n")
    alone = subprocess.run([sys.executable, '-I', str(libexec / 'llama_env_check.py'), '--json', str(env)],
                           capture_output=True, text=True, cwd=str(tmp_path))
    assert alone.returncode == 2 and alone.stdout == ''
    assert 'llama_env.py (the env-file parser) is neither beside %s' % libexec in alone.stderr
    assert 'run the llama_server role again' in alone.stderr
    shutil.copy(llama_env.__file__, str(libexec / 'llama_env.py'))
    pair = subprocess.run([sys.executable, '-I', str(libexec / 'llama_env_check.py'), '--json', str(env)],
                          capture_output=True, text=True, cwd=str(tmp_path))
    assert pair.returncode == 1, pair.stderr      # a partial file: the required names are missing
    assert 'LLAMA_BIN is missing or empty' in pair.stderr
    expected = {'LLAMA_API_KEY': 'k', 'ALIAS': 'a $b'}
    assert json.loads(pair.stdout) == llama_env.parse(env.read_text())[0] == expected


def test_read_env_file_names_an_unreadable_file(tmp_path):
    with pytest.raises(llama_env.LlamaEnvError, match='the env file %s is not readable' % (tmp_path / 'nope')):
        llama_env.read_env_file(str(tmp_path / 'nope'))
    path = tmp_path / 'e.env'
    path.write_text("ALIAS='frank'\nLLAMA_API_KEY=\"s3cret\"\n")
    variables, problems = llama_env.read_env_file(str(path))
    assert variables == {'ALIAS': 'frank', 'LLAMA_API_KEY': 's3cret'} and problems == []
    assert llama_env.without_secrets(variables) == {'ALIAS': 'frank'}


def test_plan_actual_reads_through_it(tmp_path):
    path = tmp_path / 'e.env'
    path.write_text('A="x \\$y"\nA=again\n')
    assert plan_actual.read_env_file(str(path)) == llama_env.read_env_file(str(path))[0] == {'A': 'x $y'}
    with pytest.raises(plan_actual.PlanActualError, match='not readable.*pass the live env file'):
        plan_actual.read_env_file(str(tmp_path / 'nope'))
