# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""dankfleet.llm.job_progress: poll an async job's log on the host and print a progress line on the
controller at each poll, until the job has finished (the documentation is in plugins/modules/job_progress.py).

A loop of tasks cannot do this in YAML: an `until` retry shows only the task name, and an include that
includes itself once per poll nests the play iterator one level a poll (about 400 polls exhaust Python's
recursion limit). Here one task polls: the module waits up to `delay` seconds on the host (returning as soon
as the job's results file holds its result), reads the log, and the line is displayed here at once."""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.dankfleet.llm.plugins.module_utils.host.job_progress import (
    ARGUMENT_SPEC, MSG_MAX, ProgressError, check_timing)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import printable

display = Display()

MODULE_ARGS = ('log', 'format', 'label', 'results_file')


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGUMENT_SPEC)

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        try:    # before any poll: a NaN timeout or delay would poll forever
            check_timing(args)
        except ProgressError as exc:
            result.update(failed=True, msg='dankfleet.llm.job_progress: %s' % exc)
            return result
        module_args = dict((k, args[k]) for k in MODULE_ARGS if args[k] is not None)
        if args['delay'] is None or not args['results_file']:
            # one read (the module alone)
            module_args['wait'] = args['wait']
            result.update(self._execute_module(module_name='dankfleet.llm.job_progress', module_args=module_args,
                                               task_vars=task_vars))
            return result
        host = task_vars.get('inventory_hostname', '?') if task_vars else '?'
        module_args['wait'] = args['delay']
        started = time.monotonic()
        polls = 0
        while True:
            polls += 1
            out = self._execute_module(module_name='dankfleet.llm.job_progress', module_args=module_args,
                                       task_vars=task_vars)
            if out.get('failed'):
                result.update(out)
                result['msg'] = printable(out.get('msg', 'dankfleet.llm.job_progress: the module failed without a message'),
                                          limit=MSG_MAX)
                return result
            elapsed = int(time.monotonic() - started)
            finished = out.get('finished') is True
            # the line is the host's text: escaped here too, whatever the module sent
            display.display(printable('[%s] %s (poll %d, %s)' % (host, out.get('msg', ''), polls,
                                                                 'finished' if finished else '%ds' % elapsed),
                                      limit=MSG_MAX + 200))
            if finished:
                break
            if elapsed > args['timeout']:
                result.update(out, failed=True, polls=polls,
                              msg='dankfleet.llm.job_progress: the job did not finish within %ds; last: %s'
                                  % (args['timeout'], printable(out.get('msg', ''), limit=MSG_MAX)))
                return result
        result.update(out, polls=polls, changed=False)
        return result
