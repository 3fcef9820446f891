"""gguf_remote against hostile Range answers: a stand-in server answers each request with a drawn lie (another
status, a Content-Range for other bytes or another size, a Content-Length or body of another length, an encoded
body, garbage headers). The law: the file's facts, or a GGUFError naming the url (never another exception),
printable, within the deadline; and honest answers give exactly the file's facts."""
import http.server
import threading
import time

import gen_models
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.plan import gguf_remote
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import facts_from_gguf, gguf_facts
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

LIES = {
    "status": st.sampled_from([200, 416, 500, 204, 302, 401]),
    "content_range": st.one_of(st.sampled_from(["missing", "star", "start+1", "end+1", "end-1", "total+1", "total-1",
                                                "total*", "reversed"]),
                               hostile.hostile_text().map(lambda t: "text:" + t)),
    "content_length": st.sampled_from(["missing", "+1", "-1", "junk"]),
    "body": st.sampled_from(["short", "long", "flip"]),
    "content_encoding": st.sampled_from(["gzip", "br", " identity "]),
}
# lies that change nothing the reader relies on (the body still ends at the close, identity is identity)
HARMLESS = [("content_length", "missing"), ("content_length", "junk"), ("content_encoding", " identity ")]
ONE_LIE = st.one_of([st.tuples(st.just(k), v) for k, v in LIES.items()])
# per request: honest (None) or one lie; requests past the list are honest
PLANS = st.lists(st.one_of(st.none(), ONE_LIE), max_size=6)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"      # one answer per connection: a short body ends at the close

    def log_message(self, *_):
        pass

    def do_GET(self):
        srv = self.server
        data = srv.data
        n = srv.count
        srv.count += 1
        lie = srv.plan[n] if n < len(srv.plan) else None
        kind, how = lie if lie else (None, None)
        first, last = [int(x) for x in self.headers["Range"].split("=")[1].split("-")]
        last = min(last, len(data) - 1)
        body = data[first:last + 1]
        status, total = 206, len(data)
        cr = "bytes %d-%d/%d" % (first, last, total)
        if kind == "status":
            status = how
        elif kind == "content_range":
            cr = {"missing": None, "star": "bytes */%d" % total, "start+1": "bytes %d-%d/%d" % (first + 1, last, total),
                  "end+1": "bytes %d-%d/%d" % (first, last + 1, total), "end-1": "bytes %d-%d/%d" % (first, last - 1, total),
                  "total+1": "bytes %d-%d/%d" % (first, last, total + 1),
                  "total-1": "bytes %d-%d/%d" % (first, last, total - 1), "total*": "bytes %d-%d/*" % (first, last),
                  "reversed": "bytes %d-%d/%d" % (last, first, total)}.get(how, how[5:] if how.startswith("text:") else how)
        elif kind == "body":
            body = {"short": body[:-1], "long": body + b"x", "flip": bytes([body[0] ^ 0xFF]) + body[1:]}[how]
        length = str(len(body))
        if kind == "content_length":
            length = {"missing": None, "+1": str(len(body) + 1), "-1": str(len(body) - 1), "junk": "12abc"}[how]
        self.send_response(status)
        if cr is not None:
            self.send_header("Content-Range", cr.replace("\r", "").replace("\n", ""))
        if length is not None:
            self.send_header("Content-Length", length)
        if kind == "content_encoding":
            self.send_header("Content-Encoding", how)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    path = gen_models.write_model("qwen35-hybrid", tmp_path_factory.mktemp("m") / "m.gguf")["path"]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    with open(path, "rb") as fh:
        server.data = fh.read()
    server.plan, server.count = [], 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, "http://127.0.0.1:%d/m.gguf" % server.server_address[1], gguf_facts(path)
    server.shutdown()
    server.server_close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=PLANS)
@example(plan=[None, ("content_range", "total+1")])
@example(plan=[("status", 200)])
def test_hostile_range_answers_give_the_facts_or_a_named_refusal(stand_in, plan):
    server, url, expected = stand_in
    server.plan, server.count = plan, 0
    saved = gguf_remote.FIRST_RANGE
    gguf_remote.FIRST_RANGE = 2048       # several ranges, so later answers can lie too
    t0 = time.monotonic()
    try:
        g, source = gguf_remote.read_gguf_url(url, timeout=5)
        facts = dict(facts_from_gguf(g), path=expected["path"])
        used = [p for p in plan[:server.count] if p is not None]
        # a lie the reader may not see: a flipped byte (a corrupt file is read as one), a text Content-Range
        # that happens to be the truth; every other lie that was served must have been refused
        assert all(p in HARMLESS or p == ("body", "flip") or p[1].startswith("text:") for p in used), used
        if all(p in HARMLESS for p in used):
            assert facts == expected
    except GGUFError as exc:
        msg = str(exc)
        assert msg.startswith(url + ": ")
        assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in msg), msg
        if not any(p is not None for p in plan):
            raise
    finally:
        gguf_remote.FIRST_RANGE = saved
    assert time.monotonic() - t0 < 10
