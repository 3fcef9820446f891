# -*- coding: utf-8 -*-
"""The preflight's one dankfleet.llm.host_state_info call reads every path a writing task of the role targets, and
every file the role writes goes through dankfleet.llm.render_files given what that call read (``known``): a new
file, directory or release path the probe does not read would cost a round trip on every re-run."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit.roles.serve_roles_helpers import _trust, load_yaml, role_file

TASKS = ('install.yml', 'config.yml', 'service.yml', 'watch.yml')


def _templar(overrides=None):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    variables = {}
    for part in ('defaults', 'vars'):
        variables.update(_trust(load_yaml(role_file('llama_server', part, 'main.yml'))))
    variables.update(overrides or {})
    templar = Templar(loader=DataLoader(), variables=variables)
    return lambda expression: templar.template(trust_as_template(expression))


def _tasks(name):
    with open(role_file('llama_server', 'tasks', name)) as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize('overrides', [
    {},
    {'llama_server_service_name': 'frank-medium', 'llama_server_spec_type': ['draft-dflash', 'ngram-mod'],
     'llama_server_drafter_path': '/m/d.gguf', 'llama_server_vision': True, 'llama_server_mmproj_path': '/m/mm.gguf',
     'llama_server_chat_template_file': '/etc/llama-server/t.jinja', 'llama_server_model_path': '/m/t.gguf'},
])
def test_the_probe_reads_every_path_the_role_writes_or_checks(overrides):
    t = _templar(overrides)
    probed = t('{{ _llama_server_probe_paths }}')
    assert len(probed) == len(set(probed)) and all(p.startswith('/') for p in probed)
    written = [t(d['path']) for d in t('{{ _llama_server_directories }}')]
    for name in TASKS:
        for task in _tasks(name):
            for spec in task.get('dankfleet.llm.render_files', {}).get('files', []):
                written.append(t(spec['dest']))
    # directories, checker + parser, env/launcher/unit, the plan's narrative, the watch's three
    assert len(written) == 5 + 2 + 3 + 1 + 3
    inputs = [i['path'] for i in t('{{ _llama_server_inputs }}') if i['path']]
    marks = [t('{{ _llama_server_gate_pending }}'), t('{{ _llama_server_rollback_dir }}/env'), t('{{ llama_server_release_link }}')]
    assert sorted(set(written + inputs + marks)) == sorted(probed)
    if overrides:
        assert {'/m/d.gguf', '/m/mm.gguf', '/m/t.gguf', '/etc/llama-server/t.jinja'} <= set(probed)


def test_an_empty_or_relative_input_is_not_read_but_counts_as_missing():
    t = _templar({'llama_server_model_path': '', 'llama_server_chat_template_file': 'rel/t.jinja'})
    probed = t('{{ _llama_server_probe_paths }}')
    assert '' not in probed and 'rel/t.jinja' not in probed
    assert [i['what'] for i in t('{{ _llama_server_inputs }}')] == ['llama-server binary', 'model', 'chat template']


def test_every_file_is_written_by_render_files_given_what_the_probe_read():
    for name in ('install.yml', 'config.yml', 'watch.yml'):
        for task in _tasks(name):
            assert 'ansible.builtin.template' not in task and 'ansible.builtin.copy' not in task, task['name']
            if 'dankfleet.llm.render_files' in task:
                args = task['dankfleet.llm.render_files']
                assert args['known'] == '{{ _llama_server_paths_now }}', task['name']
                assert 'when' not in task, task['name']  # no per-file probe left
                for spec in args['files']:
                    assert set(spec) >= {'dest', 'owner', 'group', 'mode'}, spec


def test_only_the_env_file_compares_values_and_the_narrative_notifies_nothing():
    (files,) = [t for t in _tasks('config.yml') if t.get('register') == '__llama_server_files']
    specs = files['dankfleet.llm.render_files']['files']
    assert [s['src'] for s in specs if s.get('compare') == 'values'] == ['llama-server.env.j2']
    assert 'notify' not in files and files['changed_when'] == '__llama_server_files.values_changed'
    (plan,) = [t for t in _tasks('config.yml') if t.get('register') == '__llama_server_plan_file']
    assert 'notify' not in plan and 'changed_when' not in plan
    assert [s['src'] for s in plan['dankfleet.llm.render_files']['files']] == ['llama-server.plan.txt.j2']


def test_the_directories_are_made_by_render_files_given_what_the_probe_read():
    common = load_yaml(role_file('_common', 'tasks', 'install.yml'))
    (directories,) = [t for t in common if t.get('name') == 'Create the directories']
    args = directories['dankfleet.llm.render_files']
    assert args['known'] == '{{ _common_state }}' and '_common_directories' in args['directories']
    assert 'when' not in directories and 'loop' not in directories  # one call, the skip is the action's
    (install,) = [t for t in _tasks('install.yml') if 'ansible.builtin.import_role' in t]
    assert install['vars']['_common_state'] == '{{ _llama_server_paths_now }}'
