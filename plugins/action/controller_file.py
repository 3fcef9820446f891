# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dankfleet.llm.controller_file: write a text file on the controller without a module run (no connection,
no temp dir, no stat module): the documentation is in plugins/modules/controller_file.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.dankfleet.llm.plugins.module_utils.base.controller_file import ControllerFileError, write_text


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('dest', 'content', 'mode'))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # nothing goes to a host
        _, args = self.validate_argument_spec(argument_spec=dict(
            dest=dict(type='path', required=True),
            content=dict(type='str', required=True),
            mode=dict(type='raw', default='0644'),
        ))
        try:
            written = write_text(args['dest'], args['content'], args['mode'], check=self._task.check_mode)
        except (ControllerFileError, IOError, OSError) as exc:
            result.update(failed=True, msg='dankfleet.llm.controller_file: %s' % exc)
            return result
        result.update(changed=written['changed'], dest=args['dest'])
        if self._task.diff and written['changed']:
            result['diff'] = {'before': written['before'] or '', 'after': args['content'],
                              'before_header': args['dest'], 'after_header': args['dest']}
        return result
