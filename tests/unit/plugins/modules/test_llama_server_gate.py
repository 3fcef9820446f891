# -*- coding: utf-8 -*-
"""llama_server_gate against a llama-server stand-in on a real socket.

The stand-in answers /health, /v1/models, /props, /slots, /metrics and /v1/chat/completions with the
shapes llama-server b11434 gives (recorded from the lab build; tools/server/server-context.cpp and
server-http.cpp): 503 {"error": {"message": "Loading model", "type": "unavailable_error"}} while loading,
401 {"error": {"message": "Invalid API Key", "type": "authentication_error"}} for a missing key (not on
/health), 501 not_supported_error on /metrics without --metrics, and the Prometheus text with
llamacpp:spec_decode_num_drafts_total. The unit is a small in-memory systemd (NRestarts, MainPID,
ActiveState, InvocationID, the journal): the real one is exercised in the molecule llama_server scenario.
"""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import os
import stat
import subprocess
import sys
from http.server import BaseHTTPRequestHandler

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import llama_server_gate as lg
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import ansible_doc, ansible_env
from ansible_collections.dankfleet.llm.tests.unit.http_testlib import Serving

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
MIB = 1048576


class FakeLlamaServer(Serving):
    """What the gate reads of llama-server b11434, on 127.0.0.1:<free port>."""

    def __init__(self, alias='frank-lab', slots=2, n_ctx=1024, vision=False, api_key='', metrics=True,
                 drafts_per_chat=0, loading_answers=0, chat_error=None, chat_tokens=None, models_alias=None,
                 on_chat=None):
        self.alias, self.slots, self.n_ctx, self.vision = alias, slots, n_ctx, vision
        self.api_key, self.metrics, self.drafts_per_chat = api_key, metrics, drafts_per_chat
        self.loading_answers, self.chat_error, self.chat_tokens = loading_answers, chat_error, chat_tokens
        self.models_alias, self.on_chat = models_alias or alias, on_chat
        self.drafts = 0
        self.drafts_text = None          # the metric's value as written (NaN, +Inf), when a test sets it
        self.usage_text = None           # usage.completion_tokens as written (NaN, 1e999), when a test sets it
        self.requests = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body, ctype='application/json; charset=utf-8'):
                data = (body if isinstance(body, str) else json.dumps(body, separators=(',', ':'))).encode()
                self.send_response(code)
                self.send_header('Server', 'llama.cpp')
                self.send_header('Content-Type', ctype)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _error(self, code, message, etype):
                self._send(code, {'error': {'message': message, 'type': etype, 'code': code}})

            def _gate(self):
                server.requests.append((self.command, self.path, self.headers.get('Authorization')))
                if server.loading_answers > 0:
                    server.loading_answers -= 1
                    self._error(503, 'Loading model', 'unavailable_error')
                    return False
                if server.api_key and self.path not in ('/health', '/v1/health') \
                        and self.headers.get('Authorization') != 'Bearer ' + server.api_key:
                    self._error(401, 'Invalid API Key', 'authentication_error')
                    return False
                return True

            def do_GET(self):
                if not self._gate():
                    return
                if self.path == '/health':
                    self._send(200, {'status': 'ok'})
                elif self.path == '/v1/models':
                    self._send(200, {'object': 'list', 'data': [{
                        'id': server.models_alias, 'aliases': [server.models_alias], 'tags': [], 'object': 'model',
                        'owned_by': 'llamacpp', 'meta': {'n_ctx': server.n_ctx, 'n_ctx_train': 4096}}]})
                elif self.path == '/props':
                    self._send(200, {'default_generation_settings': {'params': {'temperature': 0.8}, 'n_ctx': server.n_ctx},
                                     'total_slots': server.slots, 'model_alias': server.alias,
                                     'modalities': {'vision': server.vision, 'video': False, 'audio': False},
                                     'endpoint_slots': True, 'endpoint_metrics': server.metrics,
                                     'build_info': 'b11434-unknown', 'is_sleeping': False})
                elif self.path == '/slots':
                    self._send(200, [{'id': i, 'n_ctx': server.n_ctx, 'speculative': server.drafts_per_chat > 0,
                                      'is_processing': False} for i in range(server.slots)])
                elif self.path == '/metrics':
                    if not server.metrics:
                        self._error(501, 'This server does not support metrics endpoint. Start it with `--metrics`',
                                    'not_supported_error')
                        return
                    self._send(200, '# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed\n'
                                    '# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 114\n'
                                    '# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative '
                                    'decoding verification steps\n'
                                    '# TYPE llamacpp:spec_decode_num_drafts_total counter\n'
                                    'llamacpp:spec_decode_num_drafts_total %s\n'
                                    'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 0\n'
                               % (server.drafts_text or server.drafts), ctype='text/plain; version=0.0.4')
                else:
                    self._error(404, 'File Not Found', 'not_found_error')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get('Content-Length', 0))) or b'{}')
                if not self._gate():
                    return
                if self.path != '/v1/chat/completions':
                    self._error(404, 'File Not Found', 'not_found_error')
                    return
                if server.on_chat:
                    server.on_chat()
                if server.chat_error:
                    self._error(500, server.chat_error, 'server_error')
                    return
                server.drafts += server.drafts_per_chat
                tokens = body.get('max_tokens', 8) if server.chat_tokens is None else server.chat_tokens
                answer = {'choices': [{'finish_reason': 'length', 'index': 0,
                                       'message': {'role': 'assistant', 'content': 'ready ' * tokens}}],
                          'model': body.get('model'), 'system_fingerprint': 'b11434-unknown',
                          'object': 'chat.completion',
                          'usage': {'completion_tokens': tokens, 'prompt_tokens': 18, 'total_tokens': 18 + tokens}}
                if server.usage_text is not None:
                    answer['usage']['completion_tokens'] = '__T__'
                    answer = json.dumps(answer).replace('"__T__"', server.usage_text)
                self._send(200, answer)

        Serving.__init__(self, Handler, poll_interval=0.05)


class FakeUnit(object):
    """systemctl show / journalctl of one unit, as argv -> (rc, stdout, stderr)."""

    def __init__(self, main_pid='4711', n_restarts='0', active='active', journal=''):
        self.state = {'MainPID': main_pid, 'NRestarts': n_restarts, 'ActiveState': active, 'InvocationID': '7f3c2a9e5b1d4c8fa0e6b2d9c4f1a8e3'}
        self.journal = journal
        self.calls = []

    def crash(self):
        self.state.update(MainPID=str(int(self.state['MainPID']) + 1), NRestarts=str(int(self.state['NRestarts']) + 1))

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[0] == 'systemctl':
            props = argv[2].split('=', 1)[1].split(',')
            if '--value' in argv:
                return 0, '\n'.join(self.state[p] for p in props) + '\n', ''
            return 0, ''.join('%s=%s\n' % (p, self.state[p]) for p in props), ''
        if argv[0] == 'journalctl':
            return 0, self.journal, ''
        return 127, '', 'unknown command'


def env_text(port, **over):
    env = dict(LLAMA_BIN='/opt/llama.cpp/current/bin/llama-server', LLAMA_RELEASE='b11434-cpu-test',
               MODEL_PATH='/nonexistent/model.gguf', ALIAS='frank-lab', BIND_ADDR='0.0.0.0', LISTEN_PORT=str(port),
               CTX_SIZE='2048', PARALLEL='2', VISION='off', SPEC_TYPE='')
    env.update(over)
    return ''.join("%s='%s'\n" % (k, v) for k, v in env.items() if v is not None)


def gate(tmp_path, server, unit=None, timeout=5, **over):
    from ansible_collections.dankfleet.llm.plugins.module_utils.base.llama_env import parse
    env, problems = parse(env_text(server.port, **over))
    assert problems == []
    expect = lg.expectations(env, label='new shape')
    return lg.run_gate(expect, env.get('LLAMA_API_KEY', ''), 'llama-server.service', timeout, unit or FakeUnit(),
                       poll=0.05)


# ----------------------------------------------------------------------------------------- the rules


def test_health_timeout_is_the_override_or_base_plus_payload_at_the_load_rate():
    assert lg.health_timeout(0) == 60
    assert lg.health_timeout(200 * MIB) == 61
    assert lg.health_timeout(200 * MIB + 1) == 62            # rounded up
    assert lg.health_timeout(30 * 1024 * MIB, base=60, mib_per_s=200) == 60 + 154
    assert lg.health_timeout(30 * 1024 * MIB, override=45) == 45
    with pytest.raises(lg.GateError, match='load_mib_per_s must be above 0'):
        lg.health_timeout(1, mib_per_s=0)


def test_expectations_come_from_the_env_file():
    env = {'ALIAS': 'a', 'MODEL_PATH': '/m', 'DRAFT_MODEL_PATH': '/d', 'MMPROJ_PATH': '/p', 'BIND_ADDR': '::',
           'LISTEN_PORT': '7770', 'CTX_SIZE': '327680', 'PARALLEL': '2', 'SPEC_TYPE': 'draft-dflash,ngram-mod',
           'VISION': 'on', 'RPC': '10.0.0.2:50052,', 'LLAMA_API_KEY': 'k'}
    e = lg.expectations(env)
    assert e == {'label': 'new shape', 'base': 'http://127.0.0.1:7770', 'alias': 'a', 'slots': 2, 'slot_ctx': 163840,
                 'vision': True, 'spec': 'draft-dflash,ngram-mod', 'release': '', 'rpc': ['10.0.0.2:50052'],
                 'payload': ['/m', '/d', '/p']}
    # draft-mtp drafts with the target's own head: no drafter file is read; an IPv6 bind gets brackets
    e = lg.expectations(dict(env, SPEC_TYPE='draft-mtp', VISION='off', BIND_ADDR='fd00::5'))
    assert e['payload'] == ['/m'] and e['base'] == 'http://[fd00::5]:7770'
    assert lg.expectations(dict(env, PARALLEL=''), host='10.1.2.3')['base'] == 'http://10.1.2.3:7770'


@pytest.mark.parametrize('drop, change, expect', [
    ('ALIAS', {}, 'ALIAS in /e is missing or empty'),
    ('LISTEN_PORT', {}, 'LISTEN_PORT in /e is missing or empty'),
    ('BIND_ADDR', {}, 'BIND_ADDR in /e is missing: set the gate host'),
    (None, {'PARALLEL': 'two'}, "PARALLEL='two' in /e is not an integer"),
    (None, {'PARALLEL': '0'}, 'PARALLEL=0 in /e: at least one slot'),
])
def test_an_env_file_the_gate_cannot_work_from_is_named(drop, change, expect):
    env = {'ALIAS': 'a', 'MODEL_PATH': '/m', 'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': '7770'}
    env.update(change)
    env.pop(drop, None)
    with pytest.raises(lg.GateError, match=expect.replace('(', r'\(')):
        lg.expectations(env, env_file='/e')


# ----------------------------------------------------------------------------- against the stand-in


def test_a_healthy_shape_with_a_key_and_a_drafter_passes(tmp_path):
    with FakeLlamaServer(api_key='sekrit', drafts_per_chat=64, loading_answers=3) as srv:
        res = gate(tmp_path, srv, LLAMA_API_KEY='sekrit', SPEC_TYPE='draft-simple,ngram-mod',
                   DRAFT_MODEL_PATH='/nonexistent/d.gguf')
    assert res['passed'] and res['findings'] == [], res['findings']
    assert res['checked'] == ['before', '1', '2', '3', '4', '5']
    assert res['completion_tokens'] == 8 and res['drafts'] == 128 and res['build_info'] == 'b11434-unknown'
    assert res['message'] == ('gate (new shape) passed: http://127.0.0.1:%d alias frank-lab, release b11434-cpu-test, '
                              '2 slot(s) of 1024, 8 token(s) answered, drafts 128 (draft-simple,ngram-mod), '
                              'MainPID 4711, NRestarts 0.' % srv.port)
    # every request but /health carried the key; the spec prompt went out with its own max_tokens
    assert all(auth == 'Bearer sekrit' for _, path, auth in srv.requests if path != '/health')
    assert [p for _, p, _ in srv.requests].count('/health') == 4


@pytest.mark.parametrize('value', ['NaN', '+Inf', 'Inf', '-Inf', 'nan', '1_0', '0x10', '1e400'])
def test_a_non_finite_drafts_counter_fails_step_4(tmp_path, value):
    """NaN > 0 is false and +Inf > 0 true: both passed the gate; a count that is not a number is refused, and a
    line outside the exposition format's grammar ('nan', '1_0' that float() reads as ten) is named by its number."""
    with FakeLlamaServer(drafts_per_chat=64) as srv:
        srv.drafts_text = value
        res = gate(tmp_path, srv, SPEC_TYPE='draft-simple', DRAFT_MODEL_PATH='/d')
    assert not res['passed'] and res['checked'] == ['before', '1', '2', '3', '4', '5'], res
    if value in ('NaN', '+Inf', 'Inf', '-Inf', '1e400'):
        assert res['findings'][0].startswith('gate (new shape) step 4: llamacpp:spec_decode_num_drafts_total is ')
        assert 'NaN and infinities are refused' in res['findings'][0]
    else:
        assert res['findings'][0].startswith('gate (new shape) step 4: GET /metrics line 6: ')
        assert 'is not a sample of the exposition format' in res['findings'][0]


@pytest.mark.parametrize('tokens', ['NaN', 'Infinity', '1e999', '2.5'])
def test_a_non_integer_completion_token_count_is_step_2(tmp_path, tokens):
    with FakeLlamaServer() as srv:
        srv.usage_text = tokens
        res = gate(tmp_path, srv)
    assert not res['passed'] and res['completion_tokens'] == 0 and 'step 2:' in res['findings'][0]


def test_health_that_never_answers_200_is_step_1(tmp_path):
    with FakeLlamaServer(loading_answers=10 ** 6) as srv:
        res = gate(tmp_path, srv, timeout=1)
    assert not res['passed'] and res['checked'] == ['before', '1', '5']
    assert res['findings'] == ['gate (new shape) step 1: http://127.0.0.1:%d/health did not answer 200 within 1 s '
                               '(last: HTTP 503 Loading model) - llama-server never finished loading, or it '
                               'crash-loops.' % srv.port]


def test_nothing_listening_is_step_1_with_the_reason(tmp_path):
    srv = FakeLlamaServer()
    srv.httpd.server_close()             # the port is free again: connection refused
    res = gate(tmp_path, srv, timeout=1)
    assert not res['passed'] and 'step 1:' in res['message'] and 'last: HTTP -1' in res['message']
    assert 'refused' in res['message'].lower()


def test_a_request_the_server_cannot_answer_is_step_2_with_its_message(tmp_path):
    msg = 'this template cannot preserve thinking ' + 'x' * 700
    with FakeLlamaServer(chat_error=msg, drafts_per_chat=64) as srv:
        res = gate(tmp_path, srv, SPEC_TYPE='draft-simple', DRAFT_MODEL_PATH='/d')
    assert not res['passed'] and res['checked'] == ['before', '1', '2', '5'] and len(res['findings']) == 1
    finding = res['findings'][0]
    assert finding.startswith('gate (new shape) step 2: POST /v1/chat/completions (model frank-lab) answered HTTP 500 '
                              'with 0 completion token(s): this template cannot preserve thinking xx')
    assert finding.endswith('...') and len(finding.split(': ', 2)[2]) == 600


def test_zero_tokens_with_200_is_step_2(tmp_path):
    with FakeLlamaServer(chat_tokens=0) as srv:
        res = gate(tmp_path, srv)
    assert res['findings'][0].startswith('gate (new shape) step 2: POST /v1/chat/completions (model frank-lab) '
                                         'answered HTTP 200 with 0 completion token(s)')


def test_a_service_that_dies_on_the_request_is_step_2_and_step_5(tmp_path):
    unit = FakeUnit()
    with FakeLlamaServer(chat_error='connection lost', on_chat=unit.crash) as srv:
        res = gate(tmp_path, srv, unit=unit)
    assert [f.split(':')[0] for f in res['findings']] == ['gate (new shape) step 2', 'gate (new shape) step 5']
    assert res['findings'][1] == ('gate (new shape) step 5: the service did not stay up across the gate - NRestarts '
                                  '0 -> 1, MainPID 4711 -> 4712, ActiveState active: healthy, then dying on a request '
                                  'is the pattern this catches.')
    assert res['message'] == '\n'.join(res['findings'])


def test_a_restart_during_a_passing_gate_is_step_5(tmp_path):
    unit = FakeUnit()
    with FakeLlamaServer(on_chat=unit.crash) as srv:
        res = gate(tmp_path, srv, unit=unit)
    assert not res['passed'] and res['findings'][0].startswith('gate (new shape) step 5: ')
    assert res['main_pid'] == '4712' and res['n_restarts'] == '1'


def test_an_inactive_unit_is_step_5(tmp_path):
    with FakeLlamaServer() as srv:
        res = gate(tmp_path, srv, unit=FakeUnit(active='deactivating'))
    assert not res['passed'] and 'ActiveState deactivating' in res['findings'][0]


def test_every_step_3_mismatch_is_named_at_once(tmp_path):
    with FakeLlamaServer(slots=1, n_ctx=2048, vision=True, models_alias='other') as srv:
        res = gate(tmp_path, srv)
    assert res['findings'] == ['gate (new shape) step 3: /v1/models lists ["other"], not the alias frank-lab; '
                               '/props total_slots 1 != PARALLEL 2; /props n_ctx per slot 2048 != CTX_SIZE / PARALLEL '
                               '= 1024; /props modalities.vision True but VISION is off']


def test_a_context_not_set_is_not_compared_and_vision_on_is_checked(tmp_path):
    with FakeLlamaServer(n_ctx=4096, vision=False) as srv:
        res = gate(tmp_path, srv, CTX_SIZE=None, VISION='on', MMPROJ_PATH='/p')
    assert res['findings'] == ['gate (new shape) step 3: /props modalities.vision False but VISION is on']


def test_a_wrong_key_fails_step_2_with_the_servers_reason(tmp_path):
    with FakeLlamaServer(api_key='right') as srv:
        res = gate(tmp_path, srv, LLAMA_API_KEY='wrong')
    assert res['findings'][0].endswith('answered HTTP 401 with 0 completion token(s): Invalid API Key')


def test_a_drafter_that_never_drafts_is_step_4(tmp_path):
    with FakeLlamaServer(drafts_per_chat=0) as srv:
        res = gate(tmp_path, srv, SPEC_TYPE='ngram-mod')
    assert res['findings'] == ['gate (new shape) step 4: SPEC_TYPE=ngram-mod is configured but '
                               'llamacpp:spec_decode_num_drafts_total is 0 after a generation (/metrics HTTP 200): the '
                               'flags can all be right while the drafter does not run - read the journal for the '
                               'speculative init lines.']


def test_metrics_off_with_a_drafter_is_step_4(tmp_path):
    with FakeLlamaServer(metrics=False, drafts_per_chat=5) as srv:
        res = gate(tmp_path, srv, SPEC_TYPE='ngram-mod')
    assert '(/metrics HTTP 501)' in res['findings'][0] and 'is 0 after a generation' in res['findings'][0]


def test_no_spec_type_never_reads_metrics(tmp_path):
    with FakeLlamaServer(metrics=False) as srv:
        res = gate(tmp_path, srv)
    assert res['passed'] and '/metrics' not in [p for _, p, _ in srv.requests]


RPC_LOG = ('load_tensors: using device RPC0 (10.0.0.2:50052) (unknown id) - 23552 MiB free\n'
           'load_tensors: using device RPC1 (10.0.0.3:50052) (unknown id) - 0 MiB free\n')


def test_rpc_workers_are_read_from_this_starts_journal(tmp_path):
    unit = FakeUnit(journal='srv  main: other line\n' + RPC_LOG)
    with FakeLlamaServer() as srv:
        res = gate(tmp_path, srv, unit=unit, RPC='10.0.0.2:50052')
        assert res['passed'], res['findings']
        assert ['journalctl', '--no-pager', '-o', 'cat', '_SYSTEMD_INVOCATION_ID=7f3c2a9e5b1d4c8fa0e6b2d9c4f1a8e3'] in unit.calls
        res = gate(tmp_path, srv, unit=unit, RPC='10.0.0.2:50052,10.0.0.3:50052,10.0.0.4:50052')
    assert res['checked'] == ['before', '1', '1b', '5']
    assert res['findings'] == ['gate (new shape) step 1b: llama-server was started with --rpc '
                               '10.0.0.2:50052,10.0.0.3:50052,10.0.0.4:50052 but RPC1 (10.0.0.3:50052) reports no '
                               'free memory; RPC2 (10.0.0.4:50052) is not among the devices llama-server uses - a '
                               'worker is down, unreachable through its firewall, or reports no memory.']


def test_a_unit_that_cannot_be_read_stops_before_any_request(tmp_path):
    with FakeLlamaServer() as srv:
        res = gate(tmp_path, srv, unit=lambda argv: (1, '', 'Unit llama-server.service could not be found.'))
    assert res['checked'] == ['before'] and srv.requests == []
    assert 'cannot read the unit before the checks' in res['findings'][0] and 'could not be found' in res['message']


# ------------------------------------------------------------------------------ the module, through Ansible

FAKE_SYSTEMD = r'''#!/usr/bin/env python3
import json, os, sys
state = json.load(open(os.environ['FAKE_UNIT_STATE']))
if os.path.basename(sys.argv[0]) == 'journalctl':
    sys.stdout.write(state.get('journal', ''))
    sys.exit(0)
props = sys.argv[2].split('=', 1)[1].split(',')
sys.stdout.write(''.join((state[p] + '\n') if '--value' in sys.argv else '%s=%s\n' % (p, state[p]) for p in props))
'''


def run_playbook(tmp_path, tasks, check=False):
    """One ansible-playbook run of ``tasks`` on localhost with a stand-in systemctl/journalctl on PATH."""
    bindir = tmp_path / 'bin'
    bindir.mkdir(exist_ok=True)
    for name in ('systemctl', 'journalctl'):
        path = bindir / name
        path.write_text(FAKE_SYSTEMD)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    state = tmp_path / 'unit.json'
    state.write_text(json.dumps({'MainPID': '4711', 'NRestarts': '0', 'ActiveState': 'active', 'InvocationID': '7f3c2a9e5b1d4c8fa0e6b2d9c4f1a8e3'}))
    play = tmp_path / 'play.yml'
    play.write_text(json.dumps([{'hosts': 'localhost', 'gather_facts': False, 'tasks': tasks}]))
    venv_bin = os.path.dirname(sys.executable)
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_LOAD_CALLBACK_PLUGINS='1',
                      ANSIBLE_STDOUT_CALLBACK='ansible.posix.json', ANSIBLE_LOCALHOST_WARNING='false',
                      ANSIBLE_INVENTORY_UNPARSED_WARNING='false', FAKE_UNIT_STATE=str(state),
                      PATH='%s:%s:%s' % (bindir, venv_bin, os.environ.get('PATH', '/usr/bin:/bin')))
    cmd = [os.path.join(venv_bin, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local',
           '-e', 'ansible_python_interpreter=%s' % sys.executable, str(play)] + (['--check'] if check else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = json.loads(proc.stdout)
    return [t['hosts']['localhost'] for t in out['plays'][0]['tasks']]


def test_the_module_gates_refuses_bad_input_and_keeps_the_key_out(tmp_path):
    good = tmp_path / 'good.env'
    bad = tmp_path / 'bad.env'
    model = tmp_path / 'model.gguf'
    model.write_bytes(b'\0' * (3 * MIB))
    quiet_env = tmp_path / 'quiet.env'
    with FakeLlamaServer(api_key='s3cret-key', drafts_per_chat=3) as srv, \
            FakeLlamaServer(chat_error='Jinja Exception: this template cannot preserve thinking') as broken, \
            FakeLlamaServer() as quiet:
        good.write_text(env_text(srv.port, LLAMA_API_KEY='s3cret-key', SPEC_TYPE='ngram-mod', MODEL_PATH=str(model)))
        bad.write_text(env_text(broken.port))
        quiet_env.write_text(env_text(quiet.port, SPEC_TYPE='ngram-mod', MODEL_PATH=str(model)))
        gate_args = {'service': 'llama-server.service', 'health_timeout_base': 5, 'load_mib_per_s': 1}
        tasks = [
            {'dankfleet.llm.llama_server_gate': dict(gate_args, env_file=str(good))},
            {'dankfleet.llm.llama_server_gate': dict(gate_args, env_file=str(bad), label='previous shape')},
            {'dankfleet.llm.llama_server_gate': dict(gate_args, env_file=str(quiet_env)), 'check_mode': True},
            {'dankfleet.llm.llama_server_gate': dict(gate_args, env_file=str(tmp_path / 'absent.env')),
             'check_mode': True},
            {'dankfleet.llm.llama_server_gate': dict(gate_args, env_file=str(tmp_path / 'absent.env')),
             'ignore_errors': True},
            {'dankfleet.llm.llama_server_gate': dict(gate_args, env_file=str(good), load_mib_per_s=0, max_tokens=0),
             'ignore_errors': True},
        ]
        results = run_playbook(tmp_path, tasks)
    ok, failing, check, check_absent, absent, bad_opts = results
    assert not ok.get('failed') and ok['passed'] is True and ok['changed'] is False, ok.get('msg')
    assert ok['health_timeout'] == 5 + 3 and ok['payload_bytes'] == 3 * MIB
    assert ok['expected']['alias'] == 'frank-lab' and ok['drafts'] == 6 and ok['checked'][-1] == '5'
    assert ok['message'].startswith('gate (new shape) passed: http://127.0.0.1:%d alias frank-lab' % srv.port)
    assert 's3cret-key' not in json.dumps(results)
    assert not failing.get('failed') and failing['passed'] is False
    assert failing['findings'] == ['gate (previous shape) step 2: POST /v1/chat/completions (model frank-lab) '
                                   'answered HTTP 500 with 0 completion token(s): Jinja Exception: this template '
                                   'cannot preserve thinking']
    # check mode: what would be checked, and not one request
    assert check['passed'] is None and check['checked'] == [] and check['health_timeout'] == 8
    assert any(c.startswith('step 4: llamacpp:spec_decode_num_drafts_total > 0') for c in check['checks'])
    assert check['message'].startswith('check mode: would gate (new shape) http://127.0.0.1:%d' % quiet.port)
    assert quiet.requests == [] and check['changed'] is False
    assert check_absent['passed'] is None and 'does not exist yet' in check_absent['message']
    assert absent['failed'] and 'absent.env is not readable' in absent['msg'] and 'Nothing was checked' in absent['msg']
    assert bad_opts['failed'] and 'load_mib_per_s=0.0: the load rate in MiB/s must be above 0' in bad_opts['msg']
    assert 'max_tokens=0: must be 1 or more' in bad_opts['msg']


def test_ansible_doc_renders():
    text = ansible_doc('dankfleet.llm.llama_server_gate')
    assert 'health_timeout_base' in text and 'findings' in text
