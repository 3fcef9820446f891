# -*- coding: utf-8 -*-
"""Hostile inventory values against the settle step (issue 33): the production inventory's real values, with any
JSON value substituted at any position of any spec'd name. Every run ends in settle's normal result or a problem
naming that variable -- never an exception, never a value of the wrong type accepted (an oracle here, written
from the argument specs independently of settle's shapes, says what the right type is)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st
from jinja2.nativetypes import NativeEnvironment

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import settle as s
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile
from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
PRODUCTION = os.path.join(REPO, 'inventory', 'production')


def _specs():
    out = {}
    for path in glob.glob(os.path.join(REPO, 'roles', '*', 'meta', 'argument_specs.yml')):
        with open(path) as handle:
            out[path.split(os.sep)[-3]] = role_yaml.load(handle)['argument_specs']
    return out


OPTIONS = s.spec_options(_specs())


def _spec_of(name):
    """(spec, the option whose tables apply) of a name settle types."""
    if name in OPTIONS:
        return OPTIONS[name], name
    key = s.DANKFLEET_NAMES[name]
    return OPTIONS.get(key) or {'type': key}, key


def _render(variables):
    """The host's variables with their templates rendered as Ansible's native templating does (a list stays a list)."""
    env = NativeEnvironment()
    env.filters['combine'] = lambda a, b: dict(a, **b)
    env.filters['bool'] = lambda v: v in (True, 'true', 'yes', '1', 1)
    out = dict(variables, playbook_dir='/controller/playbooks')
    for _ in range(6):
        for name, value in list(out.items()):
            if isinstance(value, str) and ('{{' in value or '{%' in value):
                try:
                    out[name] = env.from_string(value).render(**out)
                except Exception:  # noqa - a template of a variable not rendered yet: the next pass
                    continue
    return out


def _host(host):
    values = {}
    for path in sorted(glob.glob(os.path.join(PRODUCTION, 'group_vars', '**', '*.yml'), recursive=True)) + [
            os.path.join(PRODUCTION, 'host_vars', '%s.yml' % host)]:
        with open(path) as handle:
            values.update(yaml.safe_load(handle) or {})
    rendered = _render(values)
    return dict((n, v) for n, v in rendered.items() if n in OPTIONS or n in s.DANKFLEET_NAMES)


HOSTS = dict((h, _host(h)) for h in ('dankserver', 'frank-zealot'))


def _int(value, bounds):
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        value = int(value) if math.isfinite(value) and value.is_integer() else None
    elif isinstance(value, str):
        value = int(value) if value.strip().lstrip('+-').isdigit() and value.strip().isascii() else None
    if not isinstance(value, int):
        return None
    return value if bounds is None or bounds[0] <= value <= bounds[1] else None


def conforms(value, spec, key):
    """value has spec's type by Ansible's rules (written apart from settle's shapes), inside the bounds table."""
    spec = spec or {}
    kind = spec.get('type') or 'raw'
    bounds = s.BOUNDS.get(key)
    if value is None:
        return kind == 'raw'
    if kind == 'list':
        item = dict(type=spec.get('elements') or 'raw', options=spec.get('options'), choices=spec.get('choices'))
        return isinstance(value, list) and all(conforms(v, item, key + '[]') for v in value)
    if spec.get('choices') and value not in spec['choices']:
        return False
    if kind == 'dict':
        if not isinstance(value, dict):
            return False
        options = spec.get('options')
        if not options:
            return True
        return (set(value) <= set(options) and all(f in value for f, o in options.items() if o.get('required'))
                and all(conforms(v, options[f], '%s.%s' % (key, f)) for f, v in value.items()))
    if kind == 'int':
        return _int(value, bounds) is not None
    if kind == 'float' or (kind == 'raw' and bounds and key.endswith('[]')):
        try:
            number = float(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError, OverflowError):
            return False
        return number is not None and math.isfinite(number) and (bounds is None or bounds[0] <= number <= bounds[1])
    if kind == 'bool':
        return isinstance(value, bool) or (isinstance(value, (str, int, float)) and str(value).lower().strip() in (
            'y', 'yes', 'on', '1', 'true', 't', 'n', 'no', 'off', '0', 'false', 'f', '1.0', '0.0'))
    if kind in ('str', 'path'):
        if isinstance(value, bool) or not isinstance(value, (str, int)) or (kind == 'path' and not isinstance(value, str)):
            return False
        text = str(value)
        free = key in s.FREE_TEXT
        return all(ord(c) >= 32 and not 0x7f <= ord(c) <= 0x9f or (free and c in '\t\n') for c in text)
    return True


def _settle(values):
    return s.settle(dict(values), OPTIONS, list(values), host='hostile', placeholders_refused=False)


@pytest.mark.parametrize('host', sorted(HOSTS))
def test_the_production_values_settle_cleanly(host):
    values = HOSTS[host]
    assert 'gguf_fetch_manifest' in values and isinstance(values['gguf_fetch_manifest'], list), values.keys()
    out = _settle(values)
    assert out['problems'] == [], out['problems']
    assert out['payload_paths'].get('target')
    for name, value in values.items():
        spec, key = _spec_of(name)
        assert conforms(value, spec, key), name


def _mutations(host):
    values = HOSTS[host]
    names = sorted(values)
    return st.sampled_from(names).flatmap(
        lambda name: hostile.hostile_answers(values[name]).map(lambda pv: (name, pv[0], pv[1])))


def _law(values, name, new):
    """settle ends in its result or a problem naming name; accepted only when new has the spec's type."""
    mutated = dict(values, **{name: new})
    out = _settle(mutated)
    assert set(out) >= {'problems', 'checklist', 'serve', 'payload_paths', 'port_handover_units', 'origin'}
    named = [p for p in out['problems'] if p.variable == name]
    for p in out['problems']:
        assert typed_reader.printable(p.message) == p.message, p.message
    for p in named:
        assert name in p.message, p.message      # the message names the variable the operator edits
    spec, key = _spec_of(name)
    if not named:
        assert conforms(new, spec, key), (name, new)
    return out


@pytest.mark.parametrize('host', sorted(HOSTS))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_any_value_at_any_position_of_the_production_inventory(host, data):
    name, _path, new = data.draw(_mutations(host))
    _law(HOSTS[host], name, new)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(set(OPTIONS) | set(s.DANKFLEET_NAMES))), new=hostile.json_values())
def test_any_value_of_any_spec_d_name(name, new):
    """Every option of every role, not only those production sets."""
    _law(HOSTS['dankserver'], name, new)


def test_an_empty_manifest_is_named():
    out = _law(HOSTS['dankserver'], 'gguf_fetch_manifest', [])
    assert any(p.variable == 'gguf_fetch_manifest' and 'no entry with role: target' in p.message
               for p in out['problems'])


@pytest.mark.parametrize('value', hostile.SPECIAL, ids=[typed_reader.quote(v) for v in hostile.SPECIAL])
@pytest.mark.parametrize('where', ['gguf_fetch_manifest.0.size', 'gguf_fetch_manifest.0.sha256',
                                   'gguf_fetch_manifest.1.role', 'gguf_fetch_manifest.0', 'llama_server_tensor_split.0',
                                   'runtime_retire_runtimes.0.quadlets.0.path', 'runtime_retire_runtimes.0.ports',
                                   'llama_server_ctx_size', 'llama_server_alias', 'llama_server_extra_env'])
def test_every_special_value_at_the_positions_the_issue_names(where, value):
    name, _, rest = where.partition('.')
    values = HOSTS['dankserver']
    path = tuple(int(p) if p.isdigit() else p for p in rest.split('.') if p)
    new = hostile.substitute(values.get(name, {}), path, value) if path else value
    _law(values, name, new)
