# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
name: preload
type: aggregate
short_description: Load the Jinja filter and test plugins once, before the first task, so each task's worker inherits them
version_added: 0.1.0
description:
  - ansible-core runs every task of every host in a fresh worker process forked from the controller's main process.
    A plugin the main process never loaded is imported again by every worker that uses it; the first filter a
    worker resolves loads every builtin filter file, and a C(dankfleet.llm) filter its collection's. On a deploy
    of ~160 tasks, most of them a C(when) that uses a filter, that is ~5 ms per task of importing, done again and
    again.
  - This callback loads the C(ansible.builtin) filter and test plugins and every C(dankfleet.llm) filter once, in
    the main process, when the playbook starts; the workers fork with them loaded. It changes no result, prints
    nothing, and a plugin that fails to load is left to the task that uses it (which reports it as it would have).
  - Enabled by the project's C(ansible.cfg) (C(callbacks_enabled)); a playbook runs the same without it, only slower.
    C(benchmarks/collection_perf.py) measures what it saves.
requirements:
  - enable it in C(callbacks_enabled)
author:
  - dankfleet engineers (@dankfleet)
'''

import glob
import os

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader

FILTER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'filter')
COLLECTION = 'dankfleet.llm'


def collection_filter_names(directory=FILTER_DIR):
    """One filter name per file of the collection's plugins/filter (the file's own name, by convention)."""
    return sorted(os.path.basename(path)[:-3] for path in glob.glob(os.path.join(directory, '*.py'))
                  if not os.path.basename(path).startswith('_'))


def preload():
    """Load the builtin filters and tests and the collection's filters; return how many loaded, which failed."""
    loaded, failed = 0, []
    for loader in (filter_loader, test_loader):
        try:
            loaded += sum(1 for _plugin in loader.all())
        except Exception as exc:  # a warm-up never fails a run; the task that needs the plugin will say why
            failed.append('%s: %s' % (loader.package, exc))
    for name in collection_filter_names():
        try:
            loaded += filter_loader.get('%s.%s' % (COLLECTION, name)) is not None
        except Exception as exc:
            failed.append('%s.%s: %s' % (COLLECTION, name, exc))
    return loaded, failed


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'dankfleet.llm.preload'
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        loaded, failed = preload()
        self._display.vvv('dankfleet.llm.preload: %d filter/test plugins loaded before the first task' % loaded)
        for line in failed:
            self._display.vvv('dankfleet.llm.preload: not preloaded (the task using it will report it): %s' % line)
