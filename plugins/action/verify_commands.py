# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dankfleet.llm.verify_commands: the operator's battery, run on the controller (no connection, no module);
the documentation is in plugins/modules/verify_commands.py, the logic in module_utils/serve/verify_commands.py."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import verify_commands as vc


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('commands', 'url', 'alias', 'api_key'))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # nothing goes to a host
        _, args = self.validate_argument_spec(argument_spec=dict(
            commands=dict(type='list', elements='raw', required=True),
            url=dict(type='str', default=''),
            alias=dict(type='str', default=''),
            api_key=dict(type='str', default='', no_log=True),
        ))
        empty = dict(passed=None, results=[], findings=[], warn_findings=[], would_run=[], changed=False)
        try:
            commands = vc.normalize(args['commands'])
        except vc.CommandsError as exc:
            result.update(empty, failed=True, msg='dankfleet.llm.verify_commands: %s. Nothing was run.' % exc)
            return result
        would = vc.would_run(commands, args['url'])
        if self._task.check_mode or not commands:
            result.update(empty, would_run=would, passed=None if commands else True,
                          message='check mode: would run %d command(s)' % len(commands) if commands else 'no commands')
            return result
        if not args['url']:
            result.update(empty, would_run=would, failed=True,
                          msg='dankfleet.llm.verify_commands: no url of the endpoint for the commands: set '
                              'llama_server_verify_commands_url. Nothing was run.')
            return result
        out = vc.run_battery(commands, args['url'], args['alias'], args['api_key'])
        result.update(empty, would_run=would, passed=out['passed'], results=out['results'], findings=out['findings'],
                      warn_findings=out['warnings'], message=out['message'])
        for line in out['warnings']:
            result.setdefault('warnings', []).append(line)
        return result
