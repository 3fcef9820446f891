#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r"""
module: job_progress
short_description: How far a long async job on the host has got, read from its log, for a progress line
version_added: 0.1.0
description:
  - One poll of a job started with C(async) and C(poll=0) (the llama.cpp build, a payload download). It
    waits up to O(wait) seconds, returning as soon as the job's O(results_file) holds its result, then reads
    the last 256 KiB of O(log) and says how far the job has got, as a line for the controller (RV(msg)).
  - V(build) reads C(llama_cpp_release)'s build log - only the lines after its last C($ command) line
    (the log is appended to across attempts) - and counts ninja's C([N/M]) (objects built of total) or
    make's C([ P%]).
  - V(fetch) reads C(gguf_fetch)'s O(dankfleet.llm.gguf_fetch#module:progress_log) - one file's lines (O(label),
    its base name) after its last C(start) or C(resume) line - and returns bytes done of total, the rate
    and the ETA of its last C(progress) line.
  - The log is opened as a regular file only (a link or a FIFO is refused). Never changes anything.
  - Both files are the host's and read as such - the results file as a regular file of at most 64 MiB (a FIFO, a
    device or a link to one is refused) holding async_wrapper's JSON record, whose C(finished) must be a boolean
    or 0/1 (anything else is refused, never read as finished); a log line whose numbers cannot be real is
    skipped; control characters of the log are escaped in RV(msg).
  - The caller collects the job's result with M(ansible.builtin.async_status) once RV(finished) is true.
  - With O(delay) and O(results_file), the action polls by itself until the job has finished, and prints
    each poll's line on the controller as it comes (C([host] built 112 of 234 objects (48%) (poll 4, 120s))),
    one task for the whole wait, however long.
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
options:
  log:
    description: The job's log on the host. A log that does not exist yet is no progress yet, not an error.
    type: path
  format:
    description: Which log it is.
    type: str
    required: true
    choices: [build, fetch]
  label:
    description: With V(fetch), the file's base name, as the progress log names it.
    type: str
  results_file:
    description:
      - The async job's results file (the C(results_file) its C(poll=0) task returned). With it, O(wait)
        ends early when the job has finished.
    type: path
  wait:
    description: Seconds to wait before reading (the poll's delay); 0 reads at once. At most 3600.
    type: float
    default: 0
  delay:
    description:
      - With O(results_file), poll until the job has finished, O(delay) seconds apart at most (each poll
        waits on the host, and ends early when the job finishes), printing a line on the controller at each.
      - Without it, one read.
      - Above 0 and at most 3600 (NaN and the infinities are refused).
    type: float
  timeout:
    description:
      - With O(delay), fail when the job has not finished after this many seconds of polling.
      - From 0 to 604800 (a week; NaN and the infinities are refused).
    type: float
    default: 86400
attributes:
  check_mode:
    description: Only reads; runs the same in check mode.
    support: full
  diff_mode:
    description: Nothing is changed, so there is nothing to diff.
    support: none
  platform:
    platforms: posix
author:
  - dankfleet engineers (@dankfleet)
"""

EXAMPLES = r"""
- name: Build | started
  dankfleet.llm.llama_cpp_release:
    action: build
    spec: "{{ _llama_cpp_build_spec }}"
  async: 14400
  poll: 0
  register: __job

- name: Build | a progress line every 30 s until it has finished
  dankfleet.llm.job_progress:
    log: /var/tmp/llama-cpp-build/build-b11434-cpu.log
    format: build
    results_file: "{{ __job.results_file }}"
    delay: 30

- name: Build | the result
  ansible.builtin.async_status:
    jid: "{{ __job.ansible_job_id }}"
  register: __built
  until: __built is finished
  retries: 5
  delay: 1
"""

RETURN = r"""
msg:
  description: The progress line (V(build) C(built 112 of 234 objects (48%)); V(fetch) C(m.gguf 12.00 GiB of 29.30 GiB
    (41.0%), 85.20 MiB/s, ETA 3m28s)).
  returned: always
  type: str
polls:
  description: With O(delay), how many polls it took.
  returned: with O(delay)
  type: int
finished:
  description: The results file says the job has finished (collect it with M(ansible.builtin.async_status)).
  returned: always
  type: bool
done:
  description: Objects built (V(build), ninja) or bytes downloaded (V(fetch)); null when the log says nothing yet.
  returned: always
  type: int
total:
  description: Objects to build or bytes to download; null when not known yet.
  returned: always
  type: int
percent:
  description: done of total in percent (make's own percentage with make); null when not known yet.
  returned: always
  type: float
rate:
  description: With V(fetch), the download rate of the last progress line (C(85.20 MiB/s)).
  returned: when O(format=fetch)
  type: str
eta_s:
  description: With V(fetch), the seconds left at that rate; null when unknown.
  returned: when O(format=fetch)
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dankfleet.llm.plugins.module_utils.host.job_progress import (
    ARGUMENT_SPEC, ProgressError, check_timing, progress)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("format", "fetch", ("label",))],
        supports_check_mode=True,
    )
    p = module.params
    try:
        check_timing(p)
        out = progress(p["log"], p["format"], p["label"], p["results_file"], p["wait"])
    except ProgressError as exc:
        module.fail_json(msg='dankfleet.llm.job_progress: %s' % exc)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
