# -*- coding: utf-8 -*-
"""A role's restart reaches only its own service (issue 32, item 5): `meta: flush_handlers` runs every role's pending
handlers in the play - a worker's firewall reload from llama_rpc_worker, anything an operator's role notified - at a
point the flushing role chose. No role flushes; llama_server restarts in its own tasks, once, only when the files (or
the switch onto staged files, or the rollback's restore) changed, never in check mode nor in the stage half, and
marks the gate pending first. Behaviour of the restart itself is run by the molecule scenarios and the rehearsal."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
SERVE = os.path.join(REPO, 'roles', 'llama_server', 'tasks')


def _walk(tasks):
    for task in tasks or []:
        yield task
        for key in ('block', 'rescue', 'always'):
            for inner in _walk(task.get(key)):
                yield inner


def _tasks(path):
    with open(path) as handle:
        return list(_walk(yaml.safe_load(handle)))


def _module(task, name):
    return task.get('ansible.builtin.' + name, task.get(name))


def test_no_role_flushes_handlers():
    found = ['%s: %s' % (os.path.relpath(p, REPO), t.get('name')) for p in sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml')))
             for t in _tasks(p) if _module(t, 'meta') == 'flush_handlers']
    assert found == [], 'restart in the role itself (a task conditioned on the registered change): %s' % found


def test_llama_server_has_no_handlers_and_notifies_none():
    assert not os.path.exists(os.path.join(REPO, 'roles', 'llama_server', 'handlers', 'main.yml'))
    notifying = [t.get('name') for p in glob.glob(os.path.join(SERVE, '*.yml')) for t in _tasks(p) if 'notify' in t]
    assert notifying == []


def test_the_start_restarts_once_after_a_change_never_in_check_mode_or_the_stage():
    tasks = _tasks(os.path.join(SERVE, 'service.yml'))
    restarts = [t for t in tasks if (_module(t, 'systemd_service') or {}).get('state') == 'restarted']
    assert len(restarts) == 1, 'one restart in the start step'
    (block,) = [t for t in tasks if 'block' in t]
    wanted = block['vars']['_llama_server_restart_wanted']
    assert '__llama_server_files' in wanted and 'is changed' in wanted and '__llama_server_onto_staged' in wanted
    when = restarts[0]['when']
    assert when == ['_llama_server_restart_wanted | bool', 'not ansible_check_mode', 'not (llama_server_stage_only | bool)']
    names = [t.get('name') for t in block['block']]
    assert names == ['Mark the gate pending before the restart', 'Restart llama-server',
                     'Note that llama-server (re)started and needs the gate'], 'the mark, the restart, the note - in order'
    # the note the gate reads: a change, or a start of a unit that was down; not in the stage half
    note = block['block'][2]['when']
    assert '__llama_server_started is changed' in note[0] and note[1] == 'not (llama_server_stage_only | bool)'
    staged = [t for t in tasks if t.get('register') == '__llama_server_onto_staged']
    assert staged and staged[0]['changed_when'] is True


def test_the_rollback_restarts_only_when_the_restore_or_the_link_changed():
    tasks = _tasks(os.path.join(SERVE, 'rollback.yml'))
    names = [t.get('name') for t in tasks]
    restarts = [t for t in tasks if (_module(t, 'systemd_service') or {}).get('state') == 'restarted']
    assert [t['name'] for t in restarts] == ['Restart onto the previous shape']
    assert restarts[0]['when'][0] == '__common_restored is changed or __llama_server_release_back is changed'
    assert names.index('Point the release link back at that release') < names.index('Restart onto the previous shape') \
        < names.index('Re-gate the previous shape')
