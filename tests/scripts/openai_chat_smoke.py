# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small operator's battery command (llama_server_verify_commands): one chat completion through the OpenAI
API of the endpoint the verify stage hands it (OPENAI_BASE_URL / OPENAI_API_KEY / OPENAI_MODEL, as an OpenAI SDK
reads them), and the model is listed by /models. Exit 0 when both hold, 1 with the reason otherwise.

    llama_server_verify_commands:
      - name: openai smoke
        command: [python3, tests/scripts/openai_chat_smoke.py, --prompt, "Reply with one word: ready."]
        timeout: 120
        retries: 1
"""
import argparse
import json
import os
import sys
import urllib.request


def call(url, key, payload=None, timeout=60):
    data = None if payload is None else json.dumps(payload).encode('utf-8')
    req = urllib.request.Request(url, data=data, method='GET' if data is None else 'POST')
    req.add_header('Content-Type', 'application/json')
    if key and key != 'none':
        req.add_header('Authorization', 'Bearer ' + key)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # the endpoint, never a proxy
    with opener.open(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode('utf-8'))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--prompt', default='Reply with one word: ready.')
    parser.add_argument('--max-tokens', type=int, default=8)
    args = parser.parse_args(argv)
    base = os.environ.get('OPENAI_BASE_URL', '').rstrip('/')
    key, model = os.environ.get('OPENAI_API_KEY', ''), os.environ.get('OPENAI_MODEL', '')
    if not base or not model:
        print('OPENAI_BASE_URL and OPENAI_MODEL must be set (the verify stage sets them)')
        return 1
    try:
        models = call(base + '/models', key)
        ids = [m.get('id') for m in models.get('data', []) if isinstance(m, dict)]
        if model not in ids:
            print('GET %s/models lists %s, not %s' % (base, ids, model))
            return 1
        answer = call(base + '/chat/completions', key, {
            'model': model, 'max_tokens': args.max_tokens, 'temperature': 0,
            'messages': [{'role': 'user', 'content': args.prompt}]})
        tokens = answer['usage']['completion_tokens']
        message = answer['choices'][0]['message']
    except Exception as exc:   # a smoke test reports any failure as its exit status
        print('the endpoint did not answer as the OpenAI API does: %s: %s' % (exc.__class__.__name__, exc))
        return 1
    if not isinstance(tokens, int) or tokens < 1:
        print('the chat completion carried %r completion tokens' % (tokens,))
        return 1
    text = (message.get('content') or message.get('reasoning_content') or '').strip()
    print('%s answered %d token(s): %s' % (model, tokens, text[:80]))
    return 0


if __name__ == '__main__':
    sys.exit(main())
