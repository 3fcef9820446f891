# -*- coding: utf-8 -*-
"""Tasks and vars order steps; a loop, an assignment or a record built in Jinja is logic, and logic lives in Python
(a filter over module_utils, tested directly). A `{%` in roles/*/tasks or roles/*/vars is allowed only as a
one-line conditional: `{% if %}...{% else %}...{% endif %}` opened and closed on the same line."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os
import re

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
FILES = sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml'))
               + glob.glob(os.path.join(REPO, 'roles', '*', 'vars', '*.yml')))
TAG = re.compile(r'{%-?\s*(\w+)')
CONDITIONAL = ('if', 'elif', 'else', 'endif')


def offences(text):
    """(line number, line) of every `{%` that is not part of a one-line conditional."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        tags = TAG.findall(line)
        if not tags:
            continue
        if any(t not in CONDITIONAL for t in tags) or tags.count('if') != tags.count('endif'):
            out.append((number, line.strip()))
    return out


def _rel(path):
    return os.path.relpath(path, REPO)


def test_the_rule_sees_a_loop_and_passes_a_one_line_conditional():
    assert offences("x: \"{% if a %}b{% else %}c{% endif %}\"\n") == []
    assert offences("x: >-\n  {%- set out = [] -%}\n  {{ out }}\n") == [(2, '{%- set out = [] -%}')]
    assert [n for n, _ in offences("x: >-\n  {% if a %}\n  b\n  {% endif %}\n")] == [2, 4]
    assert [n for n, _ in offences("  {%- for e in m -%}{{ e }}{%- endfor -%}\n")] == [1]


def test_no_jinja_logic_in_tasks_or_vars():
    found = ['%s:%d: %s' % (_rel(p), n, line) for p in FILES
             for n, line in offences(open(p).read())]
    assert found == [], 'move the logic into a filter over module_utils (plugins/filter/*.py):\n' + '\n'.join(found)
