#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: settle
short_description: Check every inventory value of an endpoint host at once and return the serve role's inputs
version_added: 0.1.0
description:
  - The first step of every play that plans or serves (deploy, rollback, the benchmarks, C(playbooks/plan.yml)) -
    the host's variables are read once, on the controller (an action, no connection), and every problem is
    reported in ONE failure, each naming the variable the operator edits and the fix. Nothing on the host is read
    or changed.
  - Types by Ansible's rules against the roles' C(meta/argument_specs.yml), with no silent coercion (C("two") is not
    a number, a tensor split given as a string is not a list, a boolean only by Ansible's C(boolean()) words).
  - Of the collection it reads the roles' C(meta/argument_specs.yml) alone - each option and its documented default
    (a templated one as its template, written C(!unsafe) there so that role argument validation leaves it alone, and
    templated by this step in the play's scope where the host does not set the option) - never a role's defaults file
    or a task file; the results the roles publish are the logic's C(PUBLISHED) list.
  - Every value is typed element by element - a list's elements, a list of entries' fields (C(options), the
    C(required) ones, no key the spec does not name), C(choices) - and each refusal names the element or field
    (C(gguf_fetch_manifest[1].sha256)). Numbers are finite and, where the domain is known (context, batches,
    split shares, sampling, ports, sizes), bounded (the table C(BOUNDS) in the logic, one reason each). Strings hold
    no control character; names (service, alias, units, logins, manifest files) are matched in full.
  - Names under C(llama_server_), C(llm_plan_), C(gguf_fetch_), C(runtime_retire_) and C(dankfleet_) that no role
    takes (options of the roles' argument specs, the documented C(dankfleet_*) names, the results the roles publish)
    are refused with the closest known name. Private names (C(_x), C(__x)) never count.
  - Every C(FILL-) placeholder (and a manifest size of 0) of every variable, in one list (C(checklist)).
  - The serve preflight's cross-checks (slots against the context, batches, the split against the devices, extra
    arguments or environment that shadow a planned flag, HIP's bare environment names, the speculative chain,
    vision without a projector, a host with no target model), so a plan that fits is a shape the serve preflight
    passes.
  - The logic lives in C(plugins/module_utils/plan/settle.py).
author:
  - dankfleet engineers (@dankfleet)
options:
  placeholders:
    description:
      - V(refuse) - a C(FILL-) placeholder is a problem (a run that changes the host).
      - V(list) - placeholders are only listed in C(checklist) (a plan-only run, C(playbooks/plan.yml)); when the step
        fails for another problem, its message lists them too, so a plan and a run that changes the host list the same.
    type: str
    choices: [refuse, list]
    default: refuse
  strict:
    description: Refuse an unknown name (V(false) - warn about it; a role imported alone settles its own inputs so).
    type: bool
    default: true
  plan:
    description:
      - The serve role's reading of a plan - the result the C(dankfleet.llm.llm_plan) role publishes (C(llm_plan);
        V({}) when no plan ran). Given, the step also refuses a plan with errors, one that does not fit, and one made
        for another split, context or cache-ram than the host's C(llama_server_*) values, and returns RV(shape).
      - The logic lives in C(plugins/module_utils/plan/plan_result.py).
    type: dict
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
    details: Reads only; the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
'''

EXAMPLES = r'''
- name: Settle the inventory - every problem at once, before anything else
  dankfleet.llm.settle:
    placeholders: "{{ 'list' if ansible_run_tags | list == ['plan'] else 'refuse' }}"
  register: dankfleet_settled
'''

RETURN = r'''
install_prefix:
  description: Where the build installs llama.cpp (C(llama_cpp_build_prefix)); the serve role runs C(<prefix>/current).
  returned: always
  type: str
  sample: /home/ops/llama.cpp
payload_paths:
  description: The payload on the host, C(target) / C(drafter) / C(mmproj) -> path (the fetch role's layout).
  returned: always
  type: dict
  sample: {target: /srv/models/Qwen3.8-27B-Uncensored-GGUF/Qwen3.8-27B-Uncensored-Q8_0.gguf}
payload:
  description:
    - The payload as the fetch role declares it, settled - C(manifest) (the entries of C(gguf_fetch_manifest) as this step
      typed them; V([]) where it refused the value, a refusal that fails the step) and C(models_dir) (C(gguf_fetch_models_dir),
      an absolute path). The plan (C(llm_plan_manifest), C(llm_plan_models_dir)) finds the payload here.
    - Never the fetch's token (C(gguf_fetch_token)) - this result is printed; the plan takes its own, C(llm_plan_url_token).
  returned: always
  type: dict
  sample: {models_dir: /var/lib/dankfleet/models,
           manifest: [{name: m, role: target, repo: org/m, revision: main, file: m-Q8_0.gguf,
                       url: "https://huggingface.co/org/m/resolve/main/m-Q8_0.gguf", size: 31457990112,
                       sha256: "<64 hex digits>"}]}
serve:
  description: The serve settings the plan is made for (C(llm_plan_serve)), settled to their types.
  returned: always
  type: dict
origin:
  description: C(pinned) (the inventory set it) or C(planned) (left to the planner) for C(tensor_split), C(ctx_size), C(cache_ram), C(n_cpu_moe).
  returned: always
  type: dict
port_handover_units:
  description: The units of C(runtime_retire_runtimes) that may hold the serve port until the retire stage stops them.
  returned: always
  type: list
  elements: str
service:
  description:
    - Where the endpoint's service lives on the host, as the inventory names it - C(name) (C(llama_server_service_name), the
      unit is C(<name>.service)), C(env_file) (C(llama_server_env_file), the served shape the launcher reads) and C(user)
      (C(llama_server_user)); an empty string for a value that is not one. The benchmarks find what is served here.
  returned: always
  type: dict
  sample: {name: llama-server, env_file: /etc/llama-server/llama-server.env, user: llama}
checklist:
  description: One line per variable still holding a placeholder, what in it is to fill.
  returned: always
  type: list
  elements: str
placeholders:
  description:
    - Every placeholder, one entry each (C(variable), C(where), C(value)).
    - C(url) too for one inside a payload entry (a manifest-shaped value with C(url), C(size), C(sha256)) - the entry's
      url, by which the checklist matches it to a proposal of C(dankfleet.llm.payload_adopt_info).
  returned: always
  type: list
  elements: dict
shape:
  description:
    - With O(plan) - what the env file carries - C(tensor_split), C(ctx_size), C(cache_ram), C(n_cpu_moe) (the
      plan's where the inventory left them open, the pinned ones where it set them, the configured ones when no plan
      ran; an n_cpu_moe of C(auto) is then V(0)) and C(origin) (C(pinned) or C(planned)) of each.
  returned: when O(plan) is given
  type: dict
  sample: {tensor_split: [35, 30], ctx_size: 393216, cache_ram: 16384, n_cpu_moe: 0,
           origin: {tensor_split: pinned, ctx_size: pinned, cache_ram: planned, n_cpu_moe: pinned}}
problems:
  description: Every problem (C(variable), C(msg)); the task fails when there is one.
  returned: always
  type: list
  elements: dict
'''
