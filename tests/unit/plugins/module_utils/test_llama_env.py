# -*- coding: utf-8 -*-
"""llama_env: the one env-file reader, and the stdlib copy the role's host-side checker keeps of it."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import importlib.util
import os

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils import llama_env
from ansible_collections.dankfleet.llm.plugins.module_utils import plan_actual

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


@pytest.mark.parametrize('text', [c[0] for c in CASES])
def test_the_host_checker_copy_reads_every_case_alike(text):
    assert checker.parse(text) == llama_env.parse(text)


def test_the_copy_has_the_same_rules():
    assert checker.DOUBLE_QUOTE_ESCAPES == llama_env.DOUBLE_QUOTE_ESCAPES
    assert checker.NAME.pattern == llama_env.NAME.pattern


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
