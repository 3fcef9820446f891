# -*- coding: utf-8 -*-
"""issue 34: the verify stage's vision check reaches the peak the plan booked - after the 64x32 image it sends one
sized for IMAGE_MAX_TOKENS (the projector type's own limit when 0), read off the projector GGUF, and reports the
image tokens it sent. Against a real local HTTP server that decodes each image it is sent and counts its tokens the
way b11434's clip does for a Qwen-VL projector (16-pixel patches merged 2 x 2: one token per 32 x 32 pixels)."""
from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import base64
import json
import struct
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.tests.unit.hostile_testlib import hostile_text
from ansible_collections.dankfleet.llm.plugins.module_utils.serve import endpoint_verify as ev
from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import Endpoint

ALIAS = 'frank-lab'


def projector(path, ptype='qwen3vl_merger', patch=16, merge=2):
    kv = {'clip.projector_type': ptype, 'clip.has_vision_encoder': True, 'clip.vision.embedding_length': 64,
          'clip.vision.image_size': 768, 'clip.vision.patch_size': patch, 'clip.vision.projection_dim': 64}
    if merge:
        kv['clip.vision.spatial_merge_size'] = merge
    lib.write_gguf(path, 'clip', kv=kv, tensors={'v.patch_embd.weight': ([patch, patch, 3, 64], 'F16')})
    return str(path)


class Server(object):
    """A chat endpoint that reads each image_url's PNG header and counts prompt tokens: 12 for the text, one per
    32 x 32 pixels of an image, refusing (HTTP 500, as a projector that runs out of memory does) images of more
    than ``refuse_over`` tokens."""

    def __init__(self, refuse_over=None):
        seen = self.seen = []
        refuse = refuse_over

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
                content = body['messages'][-1]['content']
                tokens, status = 12, 200
                for part in content if isinstance(content, list) else []:
                    if part.get('type') != 'image_url':
                        continue
                    png = base64.b64decode(part['image_url']['url'].split(',', 1)[1])
                    width, height = struct.unpack('>II', png[16:24])
                    image = -(-width // 32) * -(-height // 32)
                    seen.append((width, height, image))
                    tokens += image + 2          # + the vision start/end markers
                    if refuse is not None and image > refuse:
                        status = 500
                if status != 200:
                    answer = {'error': {'code': 500, 'message': 'failed to process image', 'type': 'server_error'}}
                else:
                    answer = {'choices': [{'finish_reason': 'length', 'index': 0,
                                           'message': {'role': 'assistant', 'content': 'red bars, a blue disc'}}],
                              'created': 1764871234, 'model': ALIAS, 'object': 'chat.completion', 'id': 'chatcmpl-x',
                              'usage': {'completion_tokens': 6, 'prompt_tokens': tokens, 'total_tokens': tokens + 6}}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = HTTPServer(('127.0.0.1', 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.thread.join()
        self.httpd.server_close()


@pytest.fixture
def server():
    made = []

    def start(**kw):
        made.append(Server(**kw))
        return made[-1]
    yield start
    for s in made:
        s.close()


def env(mmproj, port=7770, **kw):
    e = {'ALIAS': ALIAS, 'MODEL_PATH': '/m.gguf', 'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': str(port),
         'PARALLEL': '2', 'CTX_SIZE': '32768', 'SPEC_TYPE': '', 'VISION': 'on', 'MMPROJ_PATH': mmproj}
    e.update(kw)
    return e


def vision(srv, e):
    expect = ev.features(e)
    ep = Endpoint('http://127.0.0.1:%d' % srv.port, timeout=30)
    return expect, ev.check_vision(ep, expect, dict(ev.DEFAULTS))


@pytest.mark.parametrize('limit, px, tokens', [('0', 2048, 4096), ('', 2048, 4096), ('1024', 1024, 1024),
                                               ('8192', 2880, 8100), ('1000', 992, 961)])
def test_the_check_sends_the_largest_image_the_limit_admits_and_reports_its_tokens(tmp_path, server, limit, px, tokens):
    srv = server()
    e = env(projector(tmp_path / 'p.gguf'), srv.port, IMAGE_MAX_TOKENS=limit)
    expect, (status, reason, figures) = vision(srv, e)
    assert status == 'pass', reason
    assert srv.seen == [(64, 32, 2), (px, px, tokens)]
    assert figures['image_px'] == px and figures['image_tokens_planned'] == tokens
    assert figures['image_tokens'] == tokens + 2 and figures['image_tokens_small'] == 4
    assert '%dx%d image: %d image tokens sent' % (px, px, tokens + 2) in reason
    assert '%dx%d PNG (%d image tokens' % (px, px, tokens) in ev.would_send(expect, dict(ev.DEFAULTS))[3]


def test_a_qwen2vl_projector_is_sized_by_its_own_patch(tmp_path, server):
    """14-pixel patches merged 2 x 2: 28 pixels a token side, 64 x 28 = 1792 pixels at 4096 tokens."""
    srv = server()
    e = env(projector(tmp_path / 'p.gguf', ptype='qwen2vl_merger', patch=14, merge=0), srv.port)
    _, (status, _, figures) = vision(srv, e)
    assert status == 'pass' and figures['image_px'] == 1792 and srv.seen[-1][:2] == (1792, 1792)


def test_the_image_is_capped_to_one_slot(tmp_path, server):
    srv = server()
    e = env(projector(tmp_path / 'p.gguf'), srv.port, CTX_SIZE='4096', IMAGE_MAX_TOKENS='8192')
    expect, (status, reason, figures) = vision(srv, e)
    # 2048 per slot, 256 kept for the text: floor(sqrt(1792))^2 = 42^2 tokens
    assert status == 'pass' and figures['image_tokens_planned'] == 42 * 42 and figures['image_px'] == 42 * 32
    assert 'capped to one slot' in reason and expect['image']['capped']


def test_an_image_the_projector_cannot_hold_fails_the_check(tmp_path, server):
    srv = server(refuse_over=2116)
    e = env(projector(tmp_path / 'p.gguf'), srv.port)
    _, (status, reason, figures) = vision(srv, e)
    assert status == 'fail' and figures['status_large'] == 500 and figures['image_px'] == 2048
    assert 'answered HTTP 500' in reason and 'llama_server_image_max_tokens' in reason


@pytest.mark.parametrize('path, why', [('/nonexistent/p.gguf', 'could not be read'), ('', 'MMPROJ_PATH empty')])
def test_an_unreadable_projector_sends_the_small_image_and_says_why(tmp_path, server, path, why):
    srv = server()
    _, (status, reason, figures) = vision(srv, env(path, srv.port))
    assert status == 'pass' and why in reason and srv.seen == [(64, 32, 2)] and figures['image_tokens'] == 4


def test_an_unmodelled_projector_type_sends_the_small_image_and_says_why(tmp_path, server):
    srv = server()
    _, (status, reason, _) = vision(srv, env(projector(tmp_path / 'p.gguf', ptype='gemma3'), srv.port))
    assert status == 'pass' and 'projector type gemma3' in reason and len(srv.seen) == 1


@pytest.mark.parametrize('value', ['-5', 'many'])
def test_a_bad_limit_in_the_env_file_is_named(tmp_path, value):
    with pytest.raises(ev.VerifyError, match='IMAGE_MAX_TOKENS'):
        ev.features(env(projector(tmp_path / 'p.gguf'), IMAGE_MAX_TOKENS=value))


def test_the_span_drawing_is_the_per_pixel_picture():
    """The image drawn a span at a time is the glyph's per-pixel definition, on shapes where the parts overlap."""
    def pixel(x, y, w, h):
        cx, cy, r = w * 5 // 8, h // 2, max(2, h // 4)
        if x < w * 3 // 8 and (y // max(1, h // 8)) % 2 == 1 and y < h * 7 // 8:
            return (200, 30, 30)
        if (x - cx) ** 2 + (y - cy) ** 2 <= r * r:
            return (30, 60, 200)
        if x >= w * 13 // 16 and (y - h // 4) >= 0 and (x - w * 13 // 16) <= (y - h // 4):
            return (30, 160, 60)
        return (255, 255, 255)
    import zlib
    for w, h in ((64, 32), (16, 8), (97, 61), (40, 120), (128, 128)):
        png = ev.test_image(w, h)
        idat = png[png.index(b'IDAT') + 4:png.index(b'IEND') - 8]
        raw = zlib.decompress(idat)
        stride = 1 + 3 * w
        got = [[tuple(bytearray(raw[y * stride + 1 + 3 * x:y * stride + 4 + 3 * x])) for x in range(w)] for y in range(h)]
        assert got == [[pixel(x, y, w, h) for x in range(w)] for y in range(h)], (w, h)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(['IMAGE_MAX_TOKENS', 'IMAGE_MIN_TOKENS', 'CTX_SIZE']), value=hostile_text())
def test_any_image_limit_in_the_env_file_is_sized_or_refused_by_name(tmp_path, name, value):
    path = projector(tmp_path / 'p.gguf')
    try:
        expect = ev.features(env(path, **{name: value}))
    except ev.VerifyError as exc:
        assert name in str(exc)
    else:
        image = expect['image']
        assert image['px'] is None or image['px'] >= 32
        # a context the model decides (0) caps nothing; a set one keeps room for the text
        assert image['px'] is None or expect['slot_ctx'] <= 0 or image['tokens'] <= expect['slot_ctx'] - 256
        assert image['px'] is not None or image['why']
