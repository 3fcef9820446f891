# -*- coding: utf-8 -*-
"""Issue 35's two cases no real llama-server can stage, proved over real HTTP: a model drafter that never drafts
while ngram-mod drafts on the echo prompt, and a slot whose greedy answer changes after another conversation ran
on it. b11434 runs one speculative config for every slot and its CPU build leaks no state between requests, so
the lab cannot make either happen; here a local HTTP server (http.server, a real socket) answers with the
recorded b11434 answers of test_endpoint_answers_hostile's stand, and run_verify reaches it through its own
Endpoint - the request bodies, the id_slot pinning and the answers' shapes cross the wire as they do in a deploy."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils import endpoint_verify as ev
from ansible_collections.dankfleet.llm.tests.unit.plugins.module_utils import test_endpoint_answers_hostile as rec


class Served(object):
    """The recorded answers (a rec.Drafting stand) served on 127.0.0.1 at a free port."""

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

        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def verify(stand, checks):
    with Served(stand) as srv:
        expect = ev.features(dict(rec.ENV, LISTEN_PORT=str(srv.port)))
        assert expect['base'] == 'http://127.0.0.1:%d' % srv.port
        return ev.run_verify(expect, '', {'request_timeout': 10, 'checks': list(checks)},
                             run_command=rec.journal_reader(rec.JOURNAL), service='frank-medium.service')


def by_name(result):
    return dict((c['name'], c) for c in result['checks'])


def test_over_http_the_lab_shape_passes_slots_drafter_and_isolation():
    res = verify(rec.Drafting(), ('slots', 'drafter', 'isolation'))
    assert res['passed'], res['message']
    assert [r['draft_n'] for r in by_name(res)['drafter']['figures']['slots']] == [12, 12]


def test_over_http_a_model_drafter_that_never_drafts_fails_while_ngram_mod_drafts_on_echo():
    stand = rec.Drafting(model_drafts=False)
    res = verify(stand, ('slots', 'drafter'))
    checks = by_name(res)
    assert checks['slots']['status'] == 'pass', checks['slots']          # the echo prompt: ngram-mod drafts
    assert not res['passed'] and checks['drafter']['status'] == 'fail' and checks['drafter']['fatal']
    assert 'the draft-mtp drafter does not draft' in checks['drafter']['reason']
    pinned = sorted(p['id_slot'] for p in stand.sent if p['messages'][-1]['content'].startswith('Continue this list'))
    assert pinned == [0, 1]


@pytest.mark.parametrize('slot', [0, 1])
def test_over_http_a_slot_whose_second_answer_differs_fails_naming_it(slot):
    res = verify(rec.Drafting(leaky_slot=slot), ('isolation',))
    c = by_name(res)['isolation']
    assert not res['passed'] and c['status'] == 'fail' and c['fatal'], c
    assert ('slot %d answered the same greedy prompt differently after another conversation' % slot) in c['reason']
    assert ('slot %d' % (1 - slot)) + ' answered' not in c['reason']
    assert [r['identical'] for r in c['figures']['slots']] == [slot != 0, slot != 1]
