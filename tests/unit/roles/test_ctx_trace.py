# -*- coding: utf-8 -*-
"""The trace of one value (issue 32): llama_server_ctx_size reaches llama-server's --ctx-size through at most 6 hops
under at most 3 names (docs/ARCHITECTURE.md, "One value's trace"). The test walks it with the real code: each hop's
text is where the trace says, and the value is carried across it by the code that runs in a deploy (the settle
step, the plan's result, the env file's writer, the launcher). A task, var or template that picks the context up
under a new name or adds a step on its way fails the scan below: add it to TRACE (and to ARCHITECTURE.md) only if
it still fits the budget, or list it as a reader that carries nothing further (READERS), saying why."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os
import re

import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.base import llama_env
from ansible_collections.dankfleet.llm.plugins.module_utils.plan import plan_result, settle
from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import render

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
HOPS_MAX, NAMES_MAX = 6, 3
# (the name it leaves, the name it arrives under, the file that moves it, the text there that does)
TRACE = (
    ('llama_server_ctx_size', 'ctx_size', 'plugins/module_utils/plan/settle.py', 'name = "llama_server_" + key'),
    ('ctx_size', 'ctx_size', 'roles/llm_plan/defaults/main.yml', 'llm_plan_serve: "{{ dankfleet_settled.serve'),
    ('ctx_size', 'ctx_size', 'roles/llm_plan/tasks/plan.yml', 'dankfleet.llm.plan_result(serve=llm_plan_serve'),
    ('ctx_size', 'ctx_size', 'roles/llama_server/defaults/main.yml', 'llama_server_llm_plan: "{{ llm_plan'),
    ('ctx_size', 'CTX_SIZE', 'roles/llama_server/templates/llama-server.env.j2', "line('CTX_SIZE', shape.ctx_size)"),
    ('CTX_SIZE', '--ctx-size', 'roles/llama_server/templates/serve-llama-server.sh.j2', 'opt --ctx-size CTX_SIZE'),
)
# Every other expression in roles/ and playbooks/ that reads the context, and why it carries nothing to --ctx-size.
READERS = {
    ('roles/llm_plan/tasks/facts.yml', 'ctx_size: "{{ _origin.ctx_size }}"'): 'its origin (dankfleet.llm.serve_origin)',
    ('roles/llm_plan/tasks/facts.yml', 'ctx_size: "{{ llm_plan_serve.ctx_size | int }}"'):
        'llm_plan before a plan ran (the same hop as plan.yml: the value llm_plan publishes)',
    ('roles/llama_server/templates/llama-server.env.j2', '{% set _ctx = shape.ctx_size | int %}'): 'a comment',
    ('roles/llama_server/templates/llama-server.plan.txt.j2', "{% if origin.ctx_size == 'pinned' %}"): 'the narrative',
    ('roles/llama_server/tasks/known_good_check.yml', "ctx {{ _llama_server_known_good_env.CTX_SIZE | default('?') }}"):
        'a message about the known-good env file',
}
_EXPRESSION = re.compile(r'\{\{.*?\}\}|\{%.*?%\}|^\s*opt .*$', re.M)
_CONTEXT = re.compile(r'ctx_size|CTX_SIZE')


def _read(path):
    with open(os.path.join(REPO, path)) as handle:
        return handle.read()


def test_the_budget():
    assert len(TRACE) <= HOPS_MAX
    names = set(name for hop in TRACE for name in hop[:2]) - {'--ctx-size'}
    assert len(names) <= NAMES_MAX, names
    for (_, arrives, _, _), (leaves, _, _, _) in zip(TRACE, TRACE[1:]):
        assert arrives == leaves  # one walk, no gap


def test_each_hop_is_where_the_trace_says():
    for _, _, path, text in TRACE:
        assert text in _read(path), '%s no longer has %r: the trace changed - update TRACE and ARCHITECTURE.md' % (
            path, text)


def test_no_task_var_or_template_carries_the_context_outside_the_trace():
    on_trace = set((path, text) for _, _, path, text in TRACE)
    found = set()
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', '*', '*', '*.yml'))
                       + glob.glob(os.path.join(REPO, 'roles', '*', 'templates', '*.j2'))
                       + glob.glob(os.path.join(REPO, 'playbooks', '**', '*.yml'), recursive=True)):
        rel = os.path.relpath(path, REPO)
        for line in _read(rel).splitlines():
            if line.lstrip().startswith('#') or not _CONTEXT.search(line):
                continue
            if any(_CONTEXT.search(x) for x in _EXPRESSION.findall(line)):
                found.add((rel, line.strip()))
    unexplained = [(p, t) for p, t in sorted(found)
                   if not any(p == q and s in t for q, s in on_trace | set(READERS))]
    assert unexplained == [], ('these carry the context outside its trace (a new hop or name): %s' % unexplained)
    gone = [k for k in READERS if not any(p == k[0] and k[1] in t for p, t in found)]
    assert gone == [], 'READERS names what is no longer there: %s' % gone


def test_the_value_walks_the_trace_in_the_code_that_runs():
    lab = yaml.safe_load(_read('inventory/lab/group_vars/llm_endpoints/lab.yml'))
    ctx = lab['llama_server_ctx_size']
    # hop 1: the settle step types the inventory's value into dankfleet_settled.serve
    values = {'llama_server_ctx_size': ctx, 'llama_server_parallel': 2, 'llama_server_tensor_split': [],
              'llama_server_devices': [], 'gguf_fetch_models_dir': '/m', 'gguf_fetch_manifest': [
                  {'name': 'm', 'role': 'target', 'repo': 'o/m', 'revision': 'main', 'file': 'm.gguf',
                   'url': 'http://x/m.gguf', 'size': 10, 'sha256': 'a' * 64}]}
    settled = settle.settle(values, {}, [], host='lab')
    assert settled['serve']['ctx_size'] == ctx
    # hops 2-3: llm_plan_serve is that serve; the plan's result publishes the complete shape with it (pinned)
    fit = {'fits': True, 'errors': [], 'warnings': [], 'devices': [], 'ctx_size': ctx * 2, 'parallel': 2}
    llm_plan = plan_result.plan_result(fit, settled['serve'], host='lab')
    assert llm_plan['shape']['ctx_size'] == ctx and llm_plan['shape']['origin']['ctx_size'] == 'pinned'
    # hops 4-5: llama_server_llm_plan is llm_plan; the env file's writer puts its shape's context in CTX_SIZE, never
    # the role's own llama_server_ctx_size again
    text = render('llama_server', 'llama-server.env.j2', {
        'llama_server_llm_plan': llm_plan, 'llama_server_ctx_size': ctx + 2, 'llama_server_parallel': 2,
        '_llama_server_release_target': '/r', 'llama_server_model_path': '/m/m/m.gguf'})
    variables, problems = llama_env.parse(text)
    assert problems == [] and variables['CTX_SIZE'] == str(ctx)
    # hop 6: the launcher passes CTX_SIZE as --ctx-size
    assert re.search(r'^opt --ctx-size CTX_SIZE$', _read('roles/llama_server/templates/serve-llama-server.sh.j2'), re.M)
