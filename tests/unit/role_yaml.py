# -*- coding: utf-8 -*-
"""YAML as the collection's roles write it, for the unit tests: safe loading plus Ansible's ``!unsafe`` tag, read as
its plain value.

A role's meta/argument_specs.yml writes every templated default ``!unsafe``: ansible-core's role argument validation
templates the whole spec it is given, so an untagged one would be evaluated at every role start
(tests/unit/roles/test_spec_defaults_unevaluated.py). A test that reads a spec, or globs the roles' YAML, reads it
through here."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import yaml


class Loader(getattr(yaml, 'CSafeLoader', yaml.SafeLoader)):
    """yaml.safe_load's loader that also reads ``!unsafe`` (the value, untagged)."""


def unsafe(loader, node):
    """The value of an ``!unsafe`` node as safe loading reads it untagged (a scalar as its text)."""
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)


Loader.add_constructor('!unsafe', unsafe)


def load(stream):
    """yaml.safe_load(stream), ``!unsafe`` read as its value."""
    return yaml.load(stream, Loader=Loader)
