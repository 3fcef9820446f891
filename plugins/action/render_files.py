# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dankfleet.llm.render_files: render a set of templates on the controller, then make the directories given and
compare, validate and write the files on the host in one module run (none when ``known`` shows them all current).
The documentation is in plugins/modules/render_files.py, the host side in plugins/module_utils/host/render_files.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import hashlib
import os

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template

from ansible_collections.dankfleet.llm.plugins.module_utils.host.host_state import HostStateError, is_current
from ansible_collections.dankfleet.llm.plugins.module_utils.host.render_files import ARGUMENT_SPEC, RenderError, check_specs
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import printable

try:  # ansible-core 2.19: the variables ansible.builtin.template adds (template_path, template_host, ...)
    from ansible._internal._templating import _template_vars
except ImportError:  # pragma: no cover - older cores render without them
    _template_vars = None

SENT = ('dest', 'content', 'owner', 'group', 'mode', 'validate', 'compare')


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('files', 'directories', 'known'))

    def _render(self, spec, task_vars):
        """The text of one file: its content, a template rendered like ansible.builtin.template's, or a file."""
        if (spec.get('src') is None) == (spec.get('content') is None):
            raise AnsibleError('%s: give exactly one of src and content' % spec['dest'])
        if spec.get('content') is not None:
            return spec['content']
        source = self._find_needle('templates' if spec['template'] else 'files', spec['src'])
        text = to_text(self._loader.get_text_file_contents(source))
        if not spec['template']:
            return text
        searchpath = list(task_vars.get('ansible_search_path', [])) + [self._loader._basedir, os.path.dirname(source)]
        searchpath = [p for base in searchpath for p in (os.path.join(base, 'templates'), base)]
        variables = dict(task_vars)
        if spec.get('item') is not None:  # one template, many files: each reads its own item, as in a loop
            variables['item'] = spec['item']
        if _template_vars is not None:
            variables.update(_template_vars.generate_ansible_template_vars(
                path=spec['src'], fullpath=source, dest_path=spec['dest'],
                include_ansible_managed='ansible_managed' not in variables))
        templar = self._templar.copy_with_new_env(searchpath=searchpath, available_variables=variables)
        rendered = templar.template(trust_as_template(text), escape_backslashes=False,
                                    overrides=dict(trim_blocks=True, lstrip_blocks=False))
        return '' if rendered is None else to_text(rendered)

    @staticmethod
    def _known_current(known, spec):
        """Whether the host_state reading (known) shows spec's file or directory already as wanted."""
        if not known:
            return False
        try:
            if 'path' in spec:
                return is_current(known.get(spec['path']), state='directory', mode=spec.get('mode'),
                                  owner=spec.get('owner'), group=spec.get('group'))
            return is_current(known.get(spec['dest']), content=spec['content'], mode=spec.get('mode'),
                              owner=spec.get('owner'), group=spec.get('group'))
        except (HostStateError, TypeError, ValueError):
            return False

    @staticmethod
    def _no_message(answer):
        """A failure the module did not name (it crashed): its last line of output says why."""
        said = [line for line in to_text(answer.get('module_stderr') or answer.get('exception') or
                                         answer.get('module_stdout') or '').splitlines() if line.strip()]
        return 'dankfleet.llm.render_files: the module failed on the host without a message%s' % (
            (': ' + said[-1].strip()) if said else ' or output (see the task with -vvv)')

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:    # every option before any template is rendered or the host is asked
            check_specs(args['files'], args['directories'], need_content=False)
        except RenderError as exc:
            result.update(failed=True, msg='dankfleet.llm.render_files: %s; nothing was changed' % exc)
            return result
        try:
            files = []
            for spec in args['files']:
                spec = dict(spec)
                spec['content'] = self._render(spec, task_vars)
                files.append(spec)
        except AnsibleError as exc:
            result.update(failed=True, msg='dankfleet.llm.render_files: %s; nothing was changed' % to_text(exc))
            return result

        report = dict((f['dest'], {'changed': False, 'values_changed': False, 'reasons': [],
                                   'checksum': hashlib.sha1(f['content'].encode('utf-8')).hexdigest()})
                      for f in files)
        directories = [dict(d) for d in args['directories']]
        dir_report = dict((d['path'], {'changed': False, 'reasons': []}) for d in directories)
        send = [f for f in files if not self._known_current(args.get('known'), f)]
        send_dirs = [d for d in directories if not self._known_current(args.get('known'), d)]
        result.update(changed=False, values_changed=False, files=report, directories=dir_report, round_trips=0)
        if send or send_dirs:
            answer = self._execute_module(
                module_name='dankfleet.llm.render_files',
                module_args={'files': [dict((k, f.get(k)) for k in SENT) for f in send], 'directories': send_dirs},
                task_vars=task_vars)
            if answer.get('failed'):
                result.update(failed=True, msg=printable(answer.get('msg') or self._no_message(answer), limit=4000))
                return result
            for dest, found in answer.get('files', {}).items():
                report[dest] = found
            for path, found in answer.get('directories', {}).items():
                dir_report[path] = found
            result.update(changed=bool(answer.get('changed')), values_changed=bool(answer.get('values_changed')),
                          round_trips=1)
            if self._task.diff and answer.get('diff'):
                result['diff'] = answer['diff']
        return result
