# -*- coding: utf-8 -*-
"""Issue 26 item 4: every role writes its files and makes its host directories through dankfleet.llm.render_files,
and the skip-when-current logic lives in that action (given ``known``), not in a task's ``when:``. A task that
probes per file in its ``when:`` (host_state_current, a template lookup compared with a reading) or writes with
ansible.builtin.template fails here, naming the file and the task."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import (
    ROLES, _trust, load_yaml, role_file)

PROBES = ('host_state_current', 'is_current', "lookup('ansible.builtin.template'", "lookup('template'",
          'lookup("ansible.builtin.template"', 'lookup("template"', "query('ansible.builtin.template'")
TASK_FILES = sorted(p for sub in ('tasks', 'handlers') for p in glob.glob(os.path.join(ROLES, '*', sub, '*.yml')))


def _tasks(node):
    """Every task in a task list, blocks' rescue and always included."""
    for task in node or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ('block', 'rescue', 'always'):
            for inner in _tasks(task.get(key)):
                yield inner


def _when(task):
    when = task.get('when', [])
    return [str(w) for w in (when if isinstance(when, list) else [when])]


def _findings(path):
    found = []
    for task in _tasks(load_yaml(path)):
        name = task.get('name', '?')
        for condition in _when(task):
            if any(p in condition for p in PROBES):
                found.append('%s: %r probes in its when: %s' % (os.path.relpath(path, ROLES), name, condition))
        if 'ansible.builtin.template' in task or 'template' in task:
            found.append('%s: %r writes with ansible.builtin.template, not dankfleet.llm.render_files'
                         % (os.path.relpath(path, ROLES), name))
        args = task.get('ansible.builtin.file') or {}
        if args.get('state') == 'directory' and not args.get('recurse') and task.get('delegate_to') != 'localhost':
            found.append('%s: %r makes a host directory with ansible.builtin.file, not render_files directories'
                         % (os.path.relpath(path, ROLES), name))
    return found


def test_the_roles_are_read():
    assert len(TASK_FILES) > 40
    assert {os.path.basename(os.path.dirname(os.path.dirname(p))) for p in TASK_FILES} >= {
        '_common', 'gguf_fetch', 'runtime_retire', 'llama_cpp_build', 'llama_rpc_worker', 'llama_server',
        'llm_plan', 'llm_bench', 'llm_observability'}


@pytest.mark.parametrize('path', TASK_FILES, ids=lambda p: os.path.relpath(p, ROLES))
def test_no_task_probes_per_file_in_its_when_or_writes_around_render_files(path):
    assert _findings(path) == []


@pytest.mark.parametrize('task, bad', [
    ({'name': 'x', 'ansible.builtin.file': {'path': '/a', 'state': 'directory'},
      'when': ["not (s['/a'] | dankfleet.llm.host_state_current(state='directory'))"]}, 2),
    ({'name': 'x', 'ansible.builtin.template': {'src': 'a.j2', 'dest': '/a'},
      'when': "lookup('ansible.builtin.template', 'a.j2') | hash('sha1') != s.checksum"}, 2),
    ({'name': 'x', 'dankfleet.llm.render_files': {'known': '{{ s }}', 'files': []}}, 0),
])
def test_the_check_sees_the_patterns_it_forbids(tmp_path, task, bad):
    path = tmp_path / 'tasks.yml'
    path.write_text(yaml.safe_dump([{'name': 'b', 'block': [task]}]))
    assert len(_findings(str(path))) == bad


def test_the_rpc_worker_renders_one_unit_per_device_each_with_its_item():
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    variables = {}
    for part in ('defaults', 'vars'):
        variables.update(_trust(load_yaml(role_file('llama_rpc_worker', part, 'main.yml'))))
    devices = [{'device': 'Vulkan0', 'port': 50052}, {'device': 'Vulkan1', 'port': 50053}]
    variables.update(llama_rpc_worker_devices=devices, llama_rpc_worker_service_prefix='rpc')
    (task,) = [t for t in load_yaml(role_file('llama_rpc_worker', 'tasks', 'service.yml'))
               if 'dankfleet.llm.render_files' in t]
    files = Templar(loader=DataLoader(), variables=variables).template(
        trust_as_template(task['dankfleet.llm.render_files']['files']))
    assert [(f['dest'], f['item']) for f in files] == [
        ('/etc/systemd/system/rpc-50052.service', devices[0]), ('/etc/systemd/system/rpc-50053.service', devices[1])]
    assert all(f['src'] == 'llama-rpc-worker.service.j2' and f['mode'] == '0644' and f['owner'] == 'root'
               and f['validate'] == 'systemd-analyze verify %s' for f in files)
