#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: served_shape_info
short_description: Read the shape a host serves from the llama_server role's live env file
version_added: 0.1.0
description:
  - Read-only. Reads the env file the launcher turns into llama-server's command line (the llama_server role's
    C(llama_server_env_file)) with the collection's one env-file reader and returns the served shape, typed - the
    model, drafter and projector paths, devices, RPC servers, split, batches, cache types, context, slots and the
    speculative chain - so a benchmark runs exactly what is served, planned values included.
  - A value of the wrong shape (C(CTX_SIZE=big), a newline in a path) fails the task naming the variable, the file
    and the fix. No env file is no failure - RV(exists) is false and RV(shape) empty (nothing is deployed).
  - The API key (C(LLAMA_API_KEY)) is never read into the result; RV(api_key_set) says whether the endpoint requires one.
  - Never changes anything; runs the same in check mode.
author:
  - dankfleet engineers (@dankfleet)
extends_documentation_fragment:
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
  - dankfleet.llm.attributes.info_module
options:
  env_file:
    description: The live env file of the service (the llama_server role's C(llama_server_env_file)).
    type: path
    required: true
attributes:
  platform:
    platforms: posix
'''

EXAMPLES = r'''
- name: Read what the endpoint serves
  dankfleet.llm.served_shape_info:
    env_file: /etc/llama-server/llama-server.env
  become: true
  register: __served

- name: Bench the served model on the served split
  ansible.builtin.debug:
    msg: "{{ __served.shape.model_path }} on {{ __served.shape.devices }} at {{ __served.shape.tensor_split }}"
  when: __served.exists
'''

RETURN = r'''
exists:
  description: Whether the env file exists (false - nothing is deployed at that path).
  returned: always
  type: bool
env_file:
  description: The env file read.
  returned: always
  type: str
api_key_set:
  description: Whether the served endpoint requires an API key (C(LLAMA_API_KEY) is not empty); the key is never returned.
  returned: always
  type: bool
shape:
  description:
    - The served shape (empty when RV(exists) is false). An empty variable is C(null) (the launcher passes no
      flag, llama.cpp's default applies), an empty list C([]).
    - Keys, each the serve role's C(llama_server_<key>) as the env file holds it - C(binary), C(model_path), C(drafter_path),
      C(mmproj_path), C(release), C(alias), C(bind_address), C(port), C(rpc), C(devices), C(split_mode),
      C(tensor_split) (integers), C(gpu_layers), C(flash_attn), C(ctx_size), C(parallel), C(batch_size),
      C(ubatch_size), C(threads), C(cache_type_k), C(cache_type_v), C(cache_ram), C(spec_type), C(spec_draft_n_max),
      C(spec_draft_device), C(vision) (bool) - and C(url), the endpoint as the host itself reaches it, and
      C(llama_bench), the C(llama-bench) beside the served C(llama-server).
  returned: always
  type: dict
  sample:
    model_path: /var/lib/dankfleet/models/Qwen3.8-27B-GGUF/Qwen3.8-27B-Q8_0.gguf
    devices: [ROCm0, ROCm1]
    tensor_split: [32, 33]
    ctx_size: 327680
    parallel: 2
    spec_type: [draft-dflash, ngram-mod]
    url: http://127.0.0.1:7770
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.bench.served_shape import ServedShapeError, read_served


def main():
    module = AnsibleModule(argument_spec=dict(env_file=dict(type='path', required=True)), supports_check_mode=True)
    env_file = module.params['env_file']
    try:
        exists, shape, api_key_set = read_served(env_file)
    except ServedShapeError as exc:
        module.fail_json(msg='dankfleet.llm.served_shape_info: %s' % exc, exists=True, env_file=env_file, shape={},
                         api_key_set=False)
    module.exit_json(changed=False, exists=exists, env_file=env_file, shape=shape, api_key_set=api_key_set)


if __name__ == '__main__':
    main()
