# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dankfleet.llm.settle: check every inventory value of a host at once, on the controller, and return the serve
role's inputs. The documentation is in plugins/modules/settle.py, the logic in plugins/module_utils/plan/settle.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import glob
import os

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

try:  # ansible-core 2.19+ (meta/runtime.yml): a string read from a file is templated only when trusted
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - an older core templates every plain str, never an !unsafe one
    def trust_as_template(value):
        return str(value)  # a plain copy: the !unsafe marking is the str subclass, which str() drops

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import settle as settle_utils
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.plan_result import serve_shape

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
_CACHE = {}
# the way to a plan while the inventory is incomplete or the host out of reach: nothing is contacted or changed
OFFLINE = ('To plan without reaching or changing a host: ansible-playbook playbooks/plan.yml '
           '(-e dankfleet_offline=true: every host offline, from records).')
# the play's own names, never an inventory's
_MAGIC = frozenset(('vars', 'hostvars', 'groups', 'group_names', 'play_hosts', 'omit', 'playbook_dir', 'role_names',
                    'inventory_hostname', 'inventory_hostname_short', 'inventory_dir', 'inventory_file', 'environment',
                    'role_path', 'role_name', 'ansible_facts'))


def _trusted(value):
    """A documented default as a role's defaults file gives it: its templates are templates. A spec writes every
    templated default `!unsafe` (so ansible-core's role argument validation, which templates the whole spec, never
    evaluates one; tests/unit/roles/test_spec_defaults_unevaluated.py), and this step templates it itself, in the
    play's scope."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return dict((k, _trusted(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _collection(loader):
    """(options, defaults) of the collection's roles, read once per process from their argument specs alone
    (meta/argument_specs.yml): every documented input, and its documented default (a templated one as its
    template; tests/unit/roles/test_argument_specs.py holds each to the role's defaults/main.yml). No role's
    defaults file and no task file is read."""
    if 'options' not in _CACHE:
        specs = {}
        for path in sorted(glob.glob(os.path.join(ROOT, 'roles', '*', 'meta', 'argument_specs.yml'))):
            role = path.split(os.sep)[-3]
            specs[role] = (loader.load_from_file(path) or {}).get('argument_specs') or {}
        options = settle_utils.spec_options(specs)
        _CACHE.update(options=options, defaults=settle_utils.spec_defaults(options))
    return _CACHE['options'], _CACHE['defaults']


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('placeholders', 'strict', 'plan'))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # nothing goes to a host
        task_vars = task_vars or {}
        _, args = self.validate_argument_spec(argument_spec=dict(
            placeholders=dict(type='str', default='refuse', choices=['refuse', 'list']),
            strict=dict(type='bool', default=True),
            plan=dict(type='dict'),
        ))
        options, defaults = _collection(self._loader)
        host = task_vars.get('inventory_hostname', 'this host')
        # the host's own: every name of the collection's prefixes that is not a role's untouched default
        given = set(n for n in task_vars if isinstance(n, str) and not n.startswith('_')
                    and n.startswith(settle_utils.PLACEHOLDER_PREFIXES)
                    and (n not in defaults or task_vars[n] != defaults[n]))
        given.discard('dankfleet_settled')
        # placeholders live where the inventory writes them, under any name (frank_medium_files): every plain
        # variable whose raw value holds one is read too, so the checklist names the variable the operator edits
        written = set(n for n in task_vars if isinstance(n, str) and not n.startswith(('_', 'ansible_'))
                      and n not in _MAGIC and n not in given and n not in defaults and isinstance(task_vars[n], (str, list, dict))
                      and 'FILL' in to_text(task_vars[n]))
        values, unreadable = {}, []
        # the documented defaults under the host's variables, as a play that imports every role sees them (a
        # default may name another role's default the play has not imported)
        missing = dict((n, _trusted(v)) for n, v in defaults.items() if n not in task_vars)
        templar = self._templar.copy_with_new_env(available_variables=dict(missing, **task_vars)) if missing \
            else self._templar
        for name in sorted(given | written | set(settle_utils.READS)):
            if name in task_vars:
                raw = task_vars[name]
            elif name in missing:
                raw = missing[name]
            else:
                continue
            try:
                values[name] = templar.template(raw)
            except AnsibleError as exc:
                if 'ansible_facts' in to_text(raw):
                    continue  # a value of the host's facts: the step runs before the host is contacted
                unreadable.append(settle_utils.Problem(name, '%s cannot be read: %s' % (name, to_text(exc.message))))
        out = settle_utils.settle(values, options, given, host=host, scanned=written,
                                  extra_known=settle_utils.PUBLISHED, placeholders_refused=args['placeholders'] == 'refuse',
                                  derived=set(n for n in values if n in task_vars and isinstance(task_vars[n], str)
                                              and '{{' in task_vars[n]))
        # one cause (a selector naming nothing: dankfleet_shape: nope) leaves many values unreadable: one line
        by_cause = {}
        for p in unreadable:
            by_cause.setdefault(p.message.split(' cannot be read: ', 1)[1], []).append(p.variable)
        unreadable = [settle_utils.Problem(', '.join(names), '%s cannot be read: %s' % (', '.join(names), cause))
                      for cause, names in sorted(by_cause.items())]
        problems = unreadable + out.pop('problems')
        if args['plan'] is not None:
            # the serve role's reading of the plan (llm_plan): refused first, as that, when it cannot be served
            serve = out['serve']
            devices = values.get('llama_server_devices')
            shape, refused = serve_shape(serve['tensor_split'], serve['ctx_size'], serve['cache_ram'], args['plan'],
                                         parallel=serve['parallel'],
                                         devices=devices if isinstance(devices, list) else None,
                                         n_cpu_moe=serve['n_cpu_moe'])
            out['shape'] = shape
            problems = refused + problems
        unknown = [p for p in problems if p.kind == 'unknown']
        if not args['strict']:
            for p in unknown:
                self._display.warning('dankfleet.llm.settle: %s' % p.message)
            problems = [p for p in problems if p not in unknown]
        out['placeholders'] = out.pop('checklist')
        out['checklist'] = settle_utils.checklist_lines(out['placeholders'])
        out['problems'] = [p.as_dict() for p in problems]
        result.update(out, changed=False)
        if problems:
            # the same list whether the run plans or changes the host: a plan-only run that stops here lists what is
            # still to fill too (its checklist never runs); a run that changes the host refused those already
            listed = problems + (settle_utils.to_fill(out['placeholders']) if args['placeholders'] == 'list' else [])
            result['failed'] = True
            result['msg'] = ('%d problem(s) in the inventory of %s, all listed; nothing was changed:\n%s%s' % (
                len(listed), host, '\n'.join('- %s' % p.message for p in listed),
                '' if args['placeholders'] == 'list' else '\n' + OFFLINE))
        return result
