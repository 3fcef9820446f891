"""Molecule case (k)'s fault injection (molecule/llama_server/leaky_llama_server.py) injects exactly one fault: in
front of an endpoint that keeps no state (issue 35's recorded b11434 answers, over a real socket), verify's slots and
drafter checks still pass and only the isolation check fails, naming each slot; everything else crosses unchanged."""
import json
import urllib.error
import urllib.request

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import endpoint_verify as ev
from ansible_collections.dankfleet.llm.molecule.llama_server import leaky_llama_server as proxy
from ansible_collections.dankfleet.llm.tests.unit import endpoint_stand_testlib as h
from ansible_collections.dankfleet.llm.tests.unit.http_testlib import Serving


def Proxied(upstream_port):
    """The leaking proxy on a free port in front of upstream_port."""
    return Serving(proxy.handler('127.0.0.1', upstream_port, proxy.Leak()))


def _verify(port, checks):
    expect = ev.features(dict(h.ENV, LISTEN_PORT=str(port)))
    return ev.run_verify(expect, '', {'request_timeout': 10, 'checks': list(checks)},
                         run_command=h.journal_reader(h.JOURNAL), service='frank-medium.service')


def _get(port, path, payload=None):
    data = json.dumps(payload).encode('utf-8') if payload is not None else None
    req = urllib.request.Request('http://127.0.0.1:%d%s' % (port, path), data=data,
                                 headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_behind_the_proxy_only_isolation_fails_and_names_each_slot():
    with h.Served(h.Drafting()) as srv, Proxied(srv.port) as px:
        direct = _verify(srv.port, ('slots', 'drafter', 'isolation'))
        leaky = _verify(px.port, ('slots', 'drafter', 'isolation'))
    assert direct['passed'], direct['message']                      # the endpoint itself leaks nothing
    checks = h.checks_by_name(leaky)
    assert checks['slots']['status'] == 'pass' and checks['drafter']['status'] == 'pass', leaky['message']
    c = checks['isolation']
    assert not leaky['passed'] and c['status'] == 'fail' and c['fatal'], c
    for slot in (0, 1):
        assert ('slot %d answered the same greedy prompt differently after another conversation: first difference '
                'at character 0 (token 0)' % slot) in c['reason'], c['reason']
    assert "vs 'came most often?" in c['reason'] and 'without the prompt cache' not in c['reason'], c['reason']
    assert [r['identical'] for r in c['figures']['slots']] == [False, False]


def test_every_other_request_crosses_unchanged():
    stand = h.Drafting()
    chat = {'model': 'frank-medium-lab', 'messages': [{'role': 'user', 'content': 'hi'}], 'max_tokens': 4,
            'temperature': 0, 'id_slot': 0}
    conversation = dict(chat, messages=[{'role': 'user', 'content': 'a'}, {'role': 'assistant', 'content': 'b'},
                                        {'role': 'user', 'content': 'c d e'}], temperature=0.8)
    with h.Served(stand) as srv, Proxied(srv.port) as px:
        for path, payload in (('/props', None), ('/health', None), ('/v1/chat/completions', dict(chat, stream=True)),
                              ('/v1/chat/completions', chat), ('/v1/chat/completions', conversation),
                              ('/v1/chat/completions', dict(chat, temperature=0.5))):
            assert _get(px.port, path, payload) == _get(srv.port, path, payload), path
        # the one fault: a greedy answer pinned to the slot right after a multi-turn conversation on it
        status, body = _get(px.port, '/v1/chat/completions', conversation)
        status, body = _get(px.port, '/v1/chat/completions', chat)
        assert status == 200 and json.loads(body)['choices'][0]['message']['content'].startswith('c d e ')
        status, body = _get(px.port, '/v1/chat/completions', chat)       # the same request again: clean
        assert body == _get(srv.port, '/v1/chat/completions', chat)[1]


def test_an_upstream_not_yet_listening_is_a_503_the_gate_waits_on():
    with h.Served(h.Drafting()) as srv:
        port = srv.port
    with Proxied(port) as px:
        status, body = _get(px.port, '/health')
    assert status == 503 and b'upstream not ready' in body


@pytest.mark.parametrize('argv, port', [(['--host', '127.0.0.1', '--port', '18310'], '19310'), (['-m', 'x'], '9080')])
def test_the_real_server_gets_every_flag_and_the_port_beside_the_launchers(monkeypatch, argv, port):
    seen = {}

    class Child(object):
        pid = 0

        def __init__(self, args):
            seen['args'] = args

        def wait(self):
            return 3

    monkeypatch.setattr(proxy.subprocess, 'Popen', Child)
    monkeypatch.setattr(proxy.signal, 'signal', lambda signum, handler: seen.setdefault('signals', []).append(signum))
    monkeypatch.setattr(proxy.http.server, 'ThreadingHTTPServer', lambda addr, handler: seen.setdefault('srv', Stub(addr)))
    assert proxy.main(argv) == 3                                    # the real server's exit is the unit's
    assert seen['args'][0].endswith('/llama-server.real') and seen['args'][seen['args'].index('--port') + 1] == port
    assert [a for a in seen['args'][1:] if a not in ('--port', port)] == [a for a in argv if a not in ('--port', '18310')]
    assert seen['srv'].addr[1] == int(port) - 1000
    assert sorted(seen['signals']) == sorted([proxy.signal.SIGTERM, proxy.signal.SIGINT])   # a stop reaches the child


class Stub(object):
    def __init__(self, addr):
        self.addr = addr

    def serve_forever(self):
        pass

    def shutdown(self):
        pass
