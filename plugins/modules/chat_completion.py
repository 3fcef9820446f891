#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

DOCUMENTATION = r'''
---
module: chat_completion
short_description: Ask a llama-server endpoint for one chat completion
version_added: 0.1.0
description:
  - POSTs one C(/v1/chat/completions) request (O(model), one user message O(prompt), O(max_tokens), temperature 0)
    and returns the answer; fails naming the HTTP status and the body when the endpoint does not answer 200.
  - The deploy's report asks it for the completion it shows. It uses the collection's own endpoint client
    (C(module_utils/base/http_client.py), no proxy from the environment) instead of C(ansible.builtin.uri), whose TLS stack costs
    ~0.5 s per call on a plain-http endpoint on the host itself.
  - In check mode it sends nothing and reports what it would ask.
extends_documentation_fragment:
  - dankfleet.llm.endpoint
  - dankfleet.llm.attributes
  - dankfleet.llm.attributes.platform
author:
  - dankfleet engineers (@dankfleet)
options:
  model:
    description: The model alias the request names.
    type: str
    required: true
  prompt:
    description: The user message.
    type: str
    default: Say hello.
  max_tokens:
    description: Tokens to generate at the most.
    type: int
    default: 16
  timeout:
    description:
      - Seconds the whole request may take - connecting, sending, the headers and the body together (not per socket
        read, so a peer sending a byte at a time cannot hold it longer).
    type: float
    default: 120
attributes:
  check_mode:
    support: full
    details:
      - Sends nothing; says what it would POST.
  diff_mode:
    support: N/A
    details:
      - This action does not modify state.
  platform:
    platforms: posix
seealso:
  - module: dankfleet.llm.llama_server_gate
'''

EXAMPLES = r'''
- name: Ask the endpoint for one real completion
  dankfleet.llm.chat_completion:
    url: http://127.0.0.1:7770
    model: llm
  register: answer
'''

RETURN = r'''
status:
  description: The HTTP status the endpoint answered other than 200 (0 when nothing answered); the task fails.
  returned: when the request failed
  type: int
  sample: 503
json:
  description: The endpoint's answer as it sent it (C(choices), C(usage) ...).
  returned: success, not in check mode
  type: dict
content:
  description: The first choice's message text.
  returned: success, not in check mode
  type: str
completion_tokens:
  description: C(usage.completion_tokens) of the answer.
  returned: success, not in check mode
  type: int
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import (
    ENDPOINT_ARGUMENT_SPEC, Endpoint, endpoint_problem)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.http_client import redact, url_credentials


def main():
    spec = dict(ENDPOINT_ARGUMENT_SPEC,
                model=dict(type='str', required=True),
                prompt=dict(type='str', default='Say hello.'),
                max_tokens=dict(type='int', default=16, no_log=False),
                timeout=dict(type='float', default=120))
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    p = module.params
    for secret in url_credentials(p['url']):    # never in the invocation or the message
        module.no_log_values.add(secret)
    problem = endpoint_problem(p['url'], p['api_key'])
    if problem:
        module.fail_json(msg='chat_completion: %s. Nothing was sent' % problem)
    if p['timeout'] <= 0:
        module.fail_json(msg='chat_completion: timeout=%s: seconds, above 0. Nothing was sent' % p['timeout'])
    url = p['url'].rstrip('/')
    shown = redact(url)
    if module.check_mode:
        module.exit_json(changed=False, msg='would POST %s/v1/chat/completions (model %s, %d tokens at the most)'
                         % (shown, p['model'], p['max_tokens']))
    payload = {'model': p['model'], 'messages': [{'role': 'user', 'content': p['prompt']}],
               'max_tokens': p['max_tokens'], 'temperature': 0}
    status, body = Endpoint(url, p['api_key'], p['timeout']).call('/v1/chat/completions', payload)
    if status != 200:
        module.fail_json(msg='POST %s/v1/chat/completions (model %s) answered %s: %s'
                         % (shown, p['model'], 'HTTP %d' % status if status > 0 else 'nothing', body[:500]),
                         status=status)
    try:
        answer = module.from_json(body)
        content = answer['choices'][0]['message']['content'] or ''
        tokens = int(answer.get('usage', {}).get('completion_tokens', 0))
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        module.fail_json(msg='POST %s/v1/chat/completions answered 200 with no completion (%s): %s'
                         % (shown, exc, body[:500]))
    module.exit_json(changed=False, json=answer, content=content, completion_tokens=tokens)


if __name__ == '__main__':
    main()
