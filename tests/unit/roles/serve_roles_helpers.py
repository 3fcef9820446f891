# -*- coding: utf-8 -*-
"""Render the llama_server role's templates as Ansible would, for the unit tests of both roles."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import functools
import importlib.util
import os

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLES = os.path.join(REPO, 'roles')


def role_file(role, *parts):
    return os.path.join(ROLES, role, *parts)


@functools.lru_cache(maxsize=None)
def load_role_script(role, name):
    """roles/<role>/files/<name>.py as a module object. It is a stdlib-only script that goes to the host,
    no part of any package, so it is loaded by path and has no import name."""
    spec = importlib.util.spec_from_file_location(name, role_file(role, 'files', name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_yaml(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


def _trust(value):
    from ansible.template import trust_as_template
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, _trust(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trust(v) for v in value]
    return value


def plain(value):
    """Templar's result as plain containers (it may hand back its own lazy types)."""
    if isinstance(value, dict) or hasattr(value, 'items'):
        return dict((k, plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def render_expr(expr, variables, templated=None):
    """expr as a task renders it, by ansible-core's own Templar: the variables, and ``templated`` (a task's or a
    role's vars) as lazy templates; the collection's filters by their FQCN. Plain containers back."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    templar = Templar(loader=DataLoader(), variables=dict(variables, **_trust(templated or {})))
    templar.environment.filters.update(collection_filters())
    return plain(templar.template(_trust(expr.strip() if isinstance(expr, str) else expr)))


def settled(variables):
    """The variables with the serve shape the preflight settles (__llama_server_settled.shape) made of their
    shape_<key> entries: the role's own values where no plan published one."""
    from ansible_collections.dankfleet.llm.plugins.module_utils.plan.shape import origin
    variables = dict(variables)
    mine = dict((key, variables.get('llama_server_' + key, default)) for key, default in (
        ('tensor_split', []), ('ctx_size', 0), ('cache_ram', 'auto'), ('n_cpu_moe', 0)))
    shape = {'tensor_split': [], 'ctx_size': 0, 'cache_ram': 8192, 'origin': origin(mine), 'n_cpu_moe': mine['n_cpu_moe']}
    for key in [k for k in variables if k.startswith('shape_')]:
        shape[key[len('shape_'):]] = variables.pop(key)
    variables['__llama_server_settled'] = {'shape': shape}
    return variables


def render(role, template, overrides=None):
    """Render roles/<role>/templates/<template> with the role's defaults and vars plus overrides."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    variables = {}
    variables.update(_trust(load_yaml(role_file(role, 'defaults', 'main.yml'))))
    variables.update(_trust(load_yaml(role_file(role, 'vars', 'main.yml'))))
    # llama_server_rpc's default reads the inventory's llm_rpc_workers group through a filter of the collection:
    # these renders stand for a host without workers
    if 'llama_server_rpc' in variables:
        variables['llama_server_rpc'] = []
    variables.update(settled(overrides or {}))
    with open(role_file(role, 'templates', template)) as handle:
        source = handle.read()
    templar = Templar(loader=DataLoader(), variables=variables)
    # the collection's filters, by their FQCN, as a play resolves them (no collection loader runs here)
    templar.environment.filters.update(collection_filters())
    return templar.template(_trust(source))


@functools.lru_cache(maxsize=None)
def collection_filters():
    """{dankfleet.llm.<name>: the filter} of every filter plugin of the collection."""
    out = {}
    folder = os.path.join(REPO, 'plugins', 'filter')
    for name in sorted(n[:-3] for n in os.listdir(folder) if n.endswith('.py') and not n.startswith('_')):
        module = importlib.import_module('ansible_collections.dankfleet.llm.plugins.filter.' + name)
        out.update(('dankfleet.llm.' + key, value) for key, value in module.FilterModule().filters().items())
    return out
