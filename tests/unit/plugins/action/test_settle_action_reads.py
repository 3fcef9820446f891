# -*- coding: utf-8 -*-
"""The settle action reads the roles' argument specs alone (issue 32, item 3): no task file, no role's defaults file.
What it reads of them - every option and its documented default - is what it read from the defaults files before."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import builtins
import glob
import os

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.dankfleet.llm.plugins.action import settle as action

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))


def _read_by_the_action(monkeypatch):
    """(options, defaults, every file the action opened or loaded)."""
    seen = []
    loader = DataLoader()
    real_load, real_open = loader.load_from_file, builtins.open

    def load_from_file(path, *args, **kwargs):
        seen.append(os.path.realpath(path))
        return real_load(path, *args, **kwargs)

    def opened(path, *args, **kwargs):
        seen.append(os.path.realpath(str(path)))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(loader, 'load_from_file', load_from_file)
    monkeypatch.setattr(builtins, 'open', opened)
    monkeypatch.setattr(action, '_CACHE', {})
    options, defaults = action._collection(loader)
    monkeypatch.undo()
    return options, defaults, seen


def test_the_action_reads_the_argument_specs_alone(monkeypatch):
    _, _, seen = _read_by_the_action(monkeypatch)
    specs = sorted(os.path.realpath(p) for p in glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')))
    collection = [p for p in seen if p.startswith(os.path.realpath(REPO) + os.sep)]
    assert sorted(set(collection)) == specs
    assert not [p for p in collection if os.sep + 'tasks' + os.sep in p or os.sep + 'defaults' + os.sep in p]


def test_the_documented_defaults_are_the_roles_defaults(monkeypatch):
    """Every role default is in its spec (tests/unit/roles/test_argument_specs.py), so the specs give the action what
    the defaults files gave it: the same names and values, a templated one as its template (an option the spec marks
    required has none there)."""
    options, defaults, _ = _read_by_the_action(monkeypatch)
    merged = {}
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'defaults', 'main.yml'))):
        with open(path) as handle:
            merged.update(yaml.safe_load(handle) or {})
    required = set(n for n, spec in options.items() if spec.get('required'))
    assert dict((n, v) for n, v in merged.items() if n not in required) == defaults
    assert defaults['llama_server_alias'] == '{{ llama_server_service_name }}'
    assert defaults['llama_server_port'] == 8080


def test_a_templated_default_is_left_as_text_until_the_action_templates_it(monkeypatch):
    """A spec writes a templated default !unsafe. Loaded as a role loads its meta files (trusted as templates), it
    stays its text, as role argument validation must leave it; the action trusts it as a template and templates it in
    the play's scope."""
    _, defaults, _ = _read_by_the_action(monkeypatch)
    spec = DataLoader().load_from_file(os.path.join(REPO, 'roles', 'llama_server', 'meta', 'argument_specs.yml'),
                                       trusted_as_template=True)['argument_specs']['main']['options']
    templar = Templar(loader=DataLoader(), variables={'llama_server_service_name': 'llm-a', 'llama_server_state_dir': '/s'})
    assert templar.template(spec['llama_server_alias']['default']) == '{{ llama_server_service_name }}'
    assert templar.template(spec['llama_server_read_write_paths']['default']) == ['{{ llama_server_state_dir }}/cache']
    assert templar.template(spec['llama_server_alias']['description']) == spec['llama_server_alias']['description']
    alias, paths = defaults['llama_server_alias'], defaults['llama_server_read_write_paths']
    assert (alias, paths) == (spec['llama_server_alias']['default'], spec['llama_server_read_write_paths']['default'])
    assert templar.template(action._trusted(alias)) == 'llm-a'
    assert templar.template(action._trusted(paths)) == ['/s/cache']
