# -*- coding: utf-8 -*-
"""One role entry point run by ansible-playbook in check mode on a local stand-in host (nothing leaves the
controller), and the argument errors it stopped at: what the entry-point spec tests of every role share."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import subprocess
import sys

import yaml

from ansible_collections.dankfleet.llm.tests.unit import role_yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
BIN = os.path.dirname(sys.executable)


def validate_task(role):
    """The name of the task each secondary entry point checks main's options with."""
    return "dankfleet.llm.%s : Validate the inputs against the main entry point's options" % role


def specs(role):
    with open(os.path.join(REPO, 'roles', role, 'meta', 'argument_specs.yml')) as handle:
        return role_yaml.load(handle)['argument_specs']


def run_entry(tmp_path, role, entry, extra):
    """(rc, [(task name, the stand-in's result)]) of include_role ``role`` ``tasks_from: entry`` with ``extra``
    as the host's variables."""
    (tmp_path / 'hosts.yml').write_text(json.dumps({'all': {'hosts': {'standin': dict(
        extra, ansible_connection='local', ansible_python_interpreter=sys.executable)}}}))
    (tmp_path / 'play.yml').write_text(yaml.safe_dump([{'name': 'entry', 'hosts': 'all', 'gather_facts': False, 'tasks': [
        {'ansible.builtin.include_role': {'name': 'dankfleet.llm.' + role, 'tasks_from': entry}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_STDOUT_CALLBACK='ansible.posix.json',
               ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, 'collections'), PATH='%s:%s' % (BIN, os.environ['PATH']))
    run = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-C', '-i', str(tmp_path / 'hosts.yml'),
                          str(tmp_path / 'play.yml')], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    return run.returncode, [(t['task']['name'], t['hosts'].get('standin', {}))
                            for t in json.loads(run.stdout)['plays'][0]['tasks']]


def argument_errors(results):
    """(task name, sorted argument errors) of the one task that failed."""
    failed = [(name, r) for name, r in results if r.get('failed')]
    assert len(failed) == 1, [name for name, _ in results]
    return failed[0][0], sorted(failed[0][1]['argument_errors'])


def main_refusal(tmp_path, role, bad, variable):
    """The argument errors main stops ``bad`` at (two, one of them naming ``variable``)."""
    rc, results = run_entry(tmp_path, role, 'main', bad)
    assert rc != 0
    name, errors = argument_errors(results)
    assert name.startswith("dankfleet.llm.%s : Validating arguments against arg spec 'main'" % role)
    assert len(errors) == 2 and variable in errors[0] + errors[1]
    return errors
