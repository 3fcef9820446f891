# -*- coding: utf-8 -*-
"""llama-server b11434 in-process, for the tests of the gate and the verify stage: its recorded answers (tools/server,
the lab build's shapes), a stand that serves them below the real Endpoint's code (``Stand``), one with a drafter and
slots that can keep state (``Drafting``), this start's journal as systemctl and journalctl give it, and the stand
over a real socket (``Served``). Tests import helpers, never each other (one import path: tests/conftest.py)."""
import copy
import json
import threading
from http.server import BaseHTTPRequestHandler

from ansible_collections.dankfleet.llm.plugins.module_utils.base import endpoint_client as be
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import endpoint_verify as ev
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile
from ansible_collections.dankfleet.llm.tests.unit.http_testlib import Serving

ALIAS = 'frank-lab'
ENV = {'ALIAS': ALIAS, 'MODEL_PATH': '/nonexistent/m.gguf', 'MMPROJ_PATH': '/nonexistent/p.gguf',
       'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': '7770', 'PARALLEL': '2', 'CTX_SIZE': '2048',
       'SPEC_TYPE': 'draft-mtp,ngram-mod', 'VISION': 'on', 'LLAMA_RELEASE': 'b11434-cpu-test', 'LOG_VERBOSITY': '4',
       'TEMPERATURE': '0.8', 'TOP_P': '0.95', 'TOP_K': '40', 'MIN_P': '0.05', 'PRESENCE_PENALTY': '0.0',
       'FLASH_ATTN': 'on', 'REASONING_BUDGET': '-1'}
# this start's journal at -lv 4: b11434 logs each implementation's init line at trace (common/speculative.cpp)
JOURNAL = ("0.04.062.876 I llama_context: flash_attn            = enabled\n"
           "spec common_specu: adding speculative implementation 'ngram-mod'\n"
           "spec common_specu: adding speculative implementation 'draft-mtp'\n"
           "srv    load_model: speculative decoding context initialized\n")

# --- the recorded answers (b11434, tools/server: the lab build's shapes, as the gate test's stand-in serves them)

# the sampler's values as b11434 serves them: float32, widened
PARAMS = {'temperature': 0.800000011920929, 'top_p': 0.949999988079071, 'top_k': 40, 'min_p': 0.05000000074505806,
          'presence_penalty': 0.0, 'n_predict': -1, 'seed': 4294967295}
PROPS = {'default_generation_settings': {'params': PARAMS, 'n_ctx': 1024},
         'total_slots': 2, 'model_alias': ALIAS, 'model_path': '/nonexistent/m.gguf',
         'modalities': {'vision': True, 'video': False, 'audio': False}, 'endpoint_slots': True,
         'endpoint_metrics': True, 'build_info': 'b11434-unknown', 'is_sleeping': False}
MODELS = {'object': 'list', 'data': [{'id': ALIAS, 'aliases': [ALIAS], 'tags': [], 'object': 'model',
                                      'owned_by': 'llamacpp', 'meta': {'n_ctx': 1024, 'n_ctx_train': 4096}}]}
CHAT = {'choices': [{'finish_reason': 'length', 'index': 0,
                     'message': {'role': 'assistant', 'content': 'ready ready', 'reasoning_content': 'think'}}],
        'created': 1764871234, 'model': ALIAS, 'system_fingerprint': 'b11434-unknown', 'object': 'chat.completion',
        'id': 'chatcmpl-x', 'usage': {'completion_tokens': 8, 'prompt_tokens': 18, 'total_tokens': 26},
        'timings': {'cache_n': 0, 'prompt_n': 18, 'prompt_ms': 12.5, 'prompt_per_token_ms': 0.7,
                    'prompt_per_second': 1440.0, 'predicted_n': 8, 'predicted_ms': 40.0, 'predicted_per_token_ms': 5.0,
                    'predicted_per_second': 200.0, 'draft_n': 12, 'draft_n_accepted': 9}}
TOOL_MESSAGE = {'role': 'assistant', 'content': None, 'tool_calls': [
    {'type': 'function', 'id': 'call_1', 'function': {'name': 'get_weather', 'arguments': '{"city": "Oslo"}'}}]}
CHUNK = {'choices': [{'finish_reason': None, 'index': 0, 'delta': {'content': 'one'}}], 'created': 1764871234,
         'id': 'chatcmpl-x', 'model': ALIAS, 'system_fingerprint': 'b11434-unknown', 'object': 'chat.completion.chunk'}
TOKENIZE = {'tokens': [101, 202, 303]}
DETOKENIZE = {'content': 'river stone lantern'}
ERROR = {'error': {'code': 500, 'message': 'Jinja Exception: this template cannot preserve thinking',
                   'type': 'server_error'}}
DRAFTS_LINE = 'llamacpp:spec_decode_num_drafts_total %s\n'
METRICS = ('# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed\n'
           '# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 114\n'
           '# TYPE llamacpp:spec_decode_num_drafts_total counter\n' + DRAFTS_LINE
           + 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 0\n')
RECORDED = {'props': PROPS, 'models': MODELS, 'chat': CHAT, 'chunk': CHUNK, 'tokenize': TOKENIZE,
            'detokenize': DETOKENIZE}


def _words(content):
    if isinstance(content, str):
        return len(content.split())
    return 100                               # an image part: the projector's tokens


class Stand(be.Endpoint):
    """llama-server b11434 in-process: the real Endpoint's code above _request, recorded answers below it.
    ``hostile`` = {kind: (path, value)} substitutes one position of that kind's answer (every one served);
    ``raw`` = {kind: text} serves text in its place; ``metrics`` the drafts counter as written."""

    def __init__(self, hostile=None, raw=None, drafts='64', chat_status=200):
        be.Endpoint.__init__(self, 'http://127.0.0.1:7770', timeout=5)
        self.hostile, self.raw, self.drafts, self.chat_status = hostile or {}, raw or {}, drafts, chat_status

    def _answer(self, kind, real):
        if kind in self.raw:
            return self.raw[kind]
        if kind in self.hostile:
            real = served_with(real, *self.hostile[kind])
        return hostile.dumps(real)

    def _request(self, path, payload=None, timeout=None):
        if path == '/health':
            return 200, '{"status":"ok"}'
        if path == '/props':
            return 200, self._answer('props', PROPS)
        if path == '/v1/models':
            return 200, self._answer('models', MODELS)
        if path == '/metrics':
            return 200, self.raw.get('metrics', METRICS % self.drafts)
        if path == '/tokenize':
            n = max(1, len(payload['content'].split()))
            return 200, self._answer('tokenize', {'tokens': list(range(100, 100 + n))})
        if path == '/detokenize':
            return 200, self._answer('detokenize', {'content': ev.filler(len(payload['tokens']))})
        if path != '/v1/chat/completions':
            return 404, json.dumps({'error': {'code': 404, 'message': 'File Not Found', 'type': 'not_found_error'}})
        if self.chat_status != 200:
            return self.chat_status, self.raw.get('error', json.dumps(ERROR))
        if payload.get('stream'):
            return 200, ''.join('data: %s\n\n' % self._answer('chunk', CHUNK) for _ in range(3)) + 'data: [DONE]\n\n'
        msgs = payload['messages']
        prompt = sum(_words(m['content']) if isinstance(m['content'], str)
                     else sum(_words(p.get('text', p)) for p in m['content']) for m in msgs) + 10 * len(msgs)
        tokens = payload.get('max_tokens', 8)
        answer = copy.deepcopy(CHAT)
        answer['usage'] = {'completion_tokens': tokens, 'prompt_tokens': prompt, 'total_tokens': prompt + tokens}
        answer['timings']['prompt_n'] = _words(msgs[-1]['content']) + 10 if len(msgs) > 1 else prompt
        if payload.get('tools'):
            answer['choices'][0]['message'] = copy.deepcopy(TOOL_MESSAGE)
        return 200, self._answer('chat', answer)


def served_with(real, path, value):
    """What the stand serves for real with value at path (the real answer where it lacks the path)."""
    try:
        return hostile.substitute(real, path, value)
    except (KeyError, IndexError, TypeError):
        return real


def journal_reader(journal, invocation='7f3c2a9e5b1d4c8fa0e6b2d9c4f1a8e3'):
    """systemctl show InvocationID / journalctl _SYSTEMD_INVOCATION_ID of the unit, and its MainPID's
    /proc/<pid>/cmdline (the settings check's reasoning budget), as argv -> (rc, out, err)."""
    def run(argv):
        if argv[:3] == ['systemctl', 'show', '--property=MainPID']:
            return 0, '4242\n', ''
        if argv[0] == 'cat':
            return 0, '/opt/llama-server\x00--flash-attn\x00on\x00--reasoning-budget\x00-1\x00', ''
        if argv[0] == 'systemctl':
            return 0, invocation + '\n', ''
        assert argv[-1] == '_SYSTEMD_INVOCATION_ID=' + invocation, argv
        return 0, journal, ''
    return run


class Drafting(Stand):
    """The stand with a drafter that drafts only where the text repeats (``model_drafts`` False: ngram-mod
    alone), a greedy answer per slot that changes after another conversation (``leaky_slot``), and every chat
    payload kept."""

    def __init__(self, model_drafts=True, leaky_slot=None, uncached_differs=False, tokenize=None, **kw):
        Stand.__init__(self, **kw)
        self.model_drafts, self.leaky_slot, self.uncached_differs = model_drafts, leaky_slot, uncached_differs
        self.tokenize, self.sent, self.dirty = tokenize, [], set()

    def _request(self, path, payload=None, timeout=None):
        if path == '/tokenize' and self.tokenize:
            return 200, json.dumps({'tokens': self.tokenize(payload['content'])})
        if path != '/v1/chat/completions' or payload.get('stream'):
            return Stand._request(self, path, payload, timeout)
        self.sent.append(payload)
        code, body = Stand._request(self, path, payload, timeout)
        answer = json.loads(body)
        content = payload['messages'][-1]['content']
        slot = payload.get('id_slot')
        if isinstance(content, str) and content.startswith('Continue this list') and not self.model_drafts:
            del answer['timings']['draft_n'], answer['timings']['draft_n_accepted']   # b11434: absent is 0
        if len(payload['messages']) == 3:
            self.dirty.add(slot)
        if content == ev.DEFAULTS['isolation_prompt']:
            text = 'The keeper counted nine ships.'
            if slot == self.leaky_slot and slot in self.dirty:
                text = 'The keeper counted ten ships.'
            if self.uncached_differs and payload.get('cache_prompt') is False:
                text = 'The keeper counted nine boats.'
            answer['choices'][0]['message'] = {'role': 'assistant', 'content': text}
        return 200, json.dumps(answer)


def checks_by_name(result):
    """run_verify's checks by name."""
    return dict((c['name'], c) for c in result['checks'])


class Served(Serving):
    """The recorded answers (a Drafting stand) served on 127.0.0.1 at a free port."""

    def __init__(self, stand):
        self.stand = stand
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get('Content-Length') or 0)
                payload = json.loads(self.rfile.read(length).decode('utf-8')) if length else None
                with lock:                                   # the stand's bookkeeping is not thread-safe
                    code, body = stand._request(self.path, payload)
                data = body.encode('utf-8')
                self.send_response(code)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        Serving.__init__(self, Handler)
