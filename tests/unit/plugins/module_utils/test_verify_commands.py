# -*- coding: utf-8 -*-
"""The operator's battery (issue 35): real commands on this machine - a pass, an exit 1, a flake that passes
within its retries, a command that outlives its timeout (its process group killed), the endpoint in the
environment and never the key in the result, and the example command against an OpenAI-speaking stand-in."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import verify_commands as vc

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
SMOKE = os.path.join(REPO, 'tests', 'scripts', 'openai_chat_smoke.py')
PY = sys.executable


def battery(*entries, **kw):
    return vc.run_battery(vc.normalize(list(entries)), kw.get('url', 'http://127.0.0.1:7770/v1'), 'frank-lab',
                          kw.get('key', 'sekrit-key'), sleep=lambda s: None)


def test_a_passing_command_sees_the_endpoint_and_the_key_never_reaches_the_result():
    show = "import os; print(os.environ['LLM_ENDPOINT_URL'], os.environ['OPENAI_MODEL'], os.environ['OPENAI_API_KEY'])"
    res = battery({'name': 'env', 'command': [PY, '-c', show]})
    assert res['passed'] and res['findings'] == [] and res['results'][0]['rc'] == 0, res
    assert res['results'][0]['output_tail'] == 'http://127.0.0.1:7770/v1 frank-lab ********\n'
    assert 'sekrit-key' not in json.dumps(res)


def test_an_exit_1_fails_naming_the_command_and_its_output_escaped():
    res = battery({'name': 'e2e', 'command': [PY, '-c', "print('1 failed / 31 passed\\x1b[2J'); raise SystemExit(1)"],
                   'retries': 0})
    assert not res['passed'] and res['results'][0] == dict(res['results'][0], rc=1, attempts=1)
    assert res['findings'][0].startswith('verify command e2e: exit 1 after 1 attempt(s)')
    assert '1 failed / 31 passed\\x1b[2J' in res['findings'][0] and '\x1b' not in json.dumps(res)


def test_a_command_that_fails_once_passes_within_its_retries_with_a_warning(tmp_path):
    mark = tmp_path / 'ran-once'
    flaky = ("import os, sys; p = %r\nif os.path.exists(p): sys.exit(0)\nopen(p, 'w').close(); print('flake'); "
             "sys.exit(1)" % str(mark))
    res = battery({'name': 'crawl', 'command': [PY, '-c', flaky], 'retries': 1})
    assert res['passed'] and res['results'][0]['attempts'] == 2 and res['results'][0]['rc'] == 0, res
    assert res['warnings'] == ['verify command crawl passed on attempt 2 of 2 (a flake: the earlier attempts failed)']
    mark.unlink()
    res = battery({'name': 'crawl', 'command': [PY, '-c', flaky], 'retries': 0})
    assert not res['passed'] and res['results'][0]['attempts'] == 1


def test_a_command_past_its_timeout_is_killed_with_its_children():
    start = time.time()
    sleeper = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
              "import time; time.sleep(60)"
    res = battery({'name': 'slow', 'command': [PY, '-c', sleeper], 'timeout': 1})
    assert time.time() - start < 20
    assert not res['passed'] and res['results'][0]['rc'] is None and 'no exit within 1 s' in res['findings'][0]
    assert '[killed after 1 s]' in res['results'][0]['output_tail']


def test_a_program_that_does_not_exist_is_a_finding_not_an_exception():
    res = battery('/nonexistent/e2e-suite --all')
    assert not res['passed'] and 'cannot start /nonexistent/e2e-suite' in res['results'][0]['output_tail']


@pytest.mark.parametrize('commands, needle', [
    ('run-e2e', 'a list of'),
    ([{'command': []}], 'llama_server_verify_commands[0].command'),
    ([{'command': 'x', 'timout': 5}], 'has timout: the keys are command, timeout, retries, name'),
    ([{'command': 'x', 'timeout': 0}], '[0].timeout is 0'),
    ([{'command': 'x', 'retries': -1}], '[0].retries is -1'),
    ([{'command': 'x', 'retries': True}], '[0].retries is True'),
    ([{'command': 'unterminated "quote'}], 'does not split into words'),
    ([5], 'a dict with command'),
])
def test_a_bad_entry_is_named_before_anything_runs(commands, needle):
    with pytest.raises(vc.CommandsError) as err:
        vc.normalize(commands)
    assert needle in str(err.value)


def test_entries_take_strings_lists_and_defaults():
    got = vc.normalize(['tests/e2e.sh --fast', [PY, '-V', 3], {'command': 'x', 'timeout': '30', 'name': 'n'}])
    assert got == [{'name': 'e2e.sh', 'argv': ['tests/e2e.sh', '--fast'], 'timeout': 600, 'retries': 0},
                   {'name': os.path.basename(PY), 'argv': [PY, '-V', '3'], 'timeout': 600, 'retries': 0},
                   {'name': 'n', 'argv': ['x'], 'timeout': 30, 'retries': 0}]
    assert vc.would_run(got[:1], 'http://h:1/v1') == [
        'e2e.sh: tests/e2e.sh --fast on the controller against http://h:1/v1 (timeout 600 s, 0 retries)']


class OpenAI(BaseHTTPRequestHandler):
    """/v1/models and /v1/chat/completions as llama-server answers them; 401 without the key."""
    tokens = 3

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.headers.get('Authorization') != 'Bearer sekrit-key':
            return self._send(401, {'error': {'message': 'Invalid API Key'}})
        self._send(200, {'data': [{'id': 'frank-lab'}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
        self._send(200, {'choices': [{'message': {'content': 'ready'}}], 'model': body['model'],
                         'usage': {'completion_tokens': self.tokens, 'prompt_tokens': 9}})

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = HTTPServer(('127.0.0.1', 0), OpenAI)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield 'http://127.0.0.1:%d/v1' % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_the_example_command_speaks_the_openai_api(endpoint):
    res = battery({'name': 'smoke', 'command': [PY, SMOKE], 'timeout': 30}, url=endpoint)
    assert res['passed'], res['message']
    assert res['results'][0]['output_tail'] == 'frank-lab answered 3 token(s): ready\n'
    res = battery({'name': 'smoke', 'command': [PY, SMOKE], 'timeout': 30}, url=endpoint, key='wrong')
    assert not res['passed'] and 'HTTP Error 401' in res['findings'][0]


def test_the_example_command_refuses_without_its_environment():
    proc = subprocess.run([PY, SMOKE], env={'PATH': os.environ.get('PATH', '')}, capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 1 and 'OPENAI_BASE_URL' in proc.stdout
