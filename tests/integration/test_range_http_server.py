"""The lab's Range HTTP server (tests/lab/range_http_server.py) keeps its own promises.

Other tests lean on it (gguf_fetch, the lab's model mirror), so its protocol
and each injected fault are checked here with a plain http.client.
"""

import http.client
import os
import random
import subprocess
import sys
import time

import pytest

import range_http_server

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVER = os.path.join(REPO, "tests", "lab", "range_http_server.py")

DATA = random.Random(7).randbytes(300_000)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "d").mkdir()
    (root / "d" / "f.bin").write_bytes(DATA)
    (root / "secret.txt").write_text("outside")
    server, port = range_http_server.serve(str(root / "d"))
    yield server, port
    server.close()


def get(port, path, headers=None, method="GET", timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, headers=headers or {})
    r = c.getresponse()
    try:
        body = r.read()
    except http.client.IncompleteRead as e:
        body = e.partial
    c.close()
    return r.status, r.headers, body


def test_full_get_and_head(srv):
    _, port = srv
    code, h, body = get(port, "/f.bin")
    assert code == 200 and body == DATA and h["Content-Length"] == str(len(DATA))
    assert h["Accept-Ranges"] == "bytes"
    code, h, body = get(port, "/f.bin", method="HEAD")
    assert code == 200 and body == b"" and h["Content-Length"] == str(len(DATA))


@pytest.mark.parametrize("rng,start,end", [
    ("bytes=10-19", 10, 19),
    ("bytes=299990-", 299990, 299999),
    ("bytes=-5", 299995, 299999),
    ("bytes=5-999999", 5, 299999),
])
def test_ranges(srv, rng, start, end):
    _, port = srv
    code, h, body = get(port, "/f.bin", {"Range": rng})
    assert code == 206
    assert h["Content-Range"] == "bytes %d-%d/%d" % (start, end, len(DATA))
    assert body == DATA[start:end + 1] and h["Content-Length"] == str(end - start + 1)


def test_unsatisfiable_range_is_416(srv):
    _, port = srv
    code, h, body = get(port, "/f.bin", {"Range": "bytes=%d-" % len(DATA)})
    assert code == 416 and h["Content-Range"] == "bytes */%d" % len(DATA) and body == b""


def test_if_range_mismatch_serves_whole_file(srv):
    _, port = srv
    code, h, body = get(port, "/f.bin", {"Range": "bytes=10-", "If-Range": '"stale"'})
    assert code == 200 and body == DATA


def test_no_escape_from_root_and_404(srv):
    _, port = srv
    assert get(port, "/../secret.txt")[0] == 404
    assert get(port, "/%2e%2e/secret.txt")[0] == 404
    assert get(port, "/missing.bin")[0] == 404


def test_faults(srv):
    server, port = srv
    code, h, body = get(port, "/_fault/drop-after-1000/f.bin")
    assert code == 200 and h["Content-Length"] == str(len(DATA)) and body == DATA[:1000]
    code, h, body = get(port, "/_fault/ignore-range/f.bin", {"Range": "bytes=100-"})
    assert code == 200 and body == DATA
    code, h, body = get(port, "/_fault/wrong-bytes/f.bin")
    diff = [i for i in range(len(DATA)) if body[i] != DATA[i]]
    assert code == 200 and len(body) == len(DATA) and diff == [len(DATA) // 2]
    code, h, body = get(port, "/_fault/wrong-bytes/f.bin", {"Range": "bytes=%d-" % (len(DATA) // 2)})
    assert body[0] != DATA[len(DATA) // 2] and body[1:] == DATA[len(DATA) // 2 + 1:]  # same byte on resume
    assert get(port, "/_fault/404/f.bin")[0] == 404
    assert [get(port, "/_fault/500-once/f.bin")[0] for _ in range(3)] == [500, 200, 200]
    assert [get(port, "/_fault/500/f.bin")[0] for _ in range(2)] == [500, 500]
    assert get(port, "/_fault/503-once/f.bin?x=1")[0] == 503
    assert get(port, "/_fault/nonsense/f.bin")[0] == 400
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        get(port, "/_fault/stall-3/f.bin", timeout=0.5)
    assert time.monotonic() - t0 < 2
    t0 = time.monotonic()
    code, h, body = get(port, "/_fault/rate-200000/f.bin")
    assert body == DATA and time.monotonic() - t0 > 1.0  # 300 kB at 200 kB/s
    assert "404" in [q["fault"] for q in server.requests]  # the request log names the fault


def test_token(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"abc")
    server, port = range_http_server.serve(str(tmp_path), token="s3cret")
    try:
        code, h, _ = get(port, "/f.bin")
        assert code == 401 and "Bearer" in h["WWW-Authenticate"]
        assert get(port, "/f.bin", {"Authorization": "Bearer nope"})[0] == 401
        assert get(port, "/f.bin", {"Authorization": "Bearer s3cret"})[2] == b"abc"
    finally:
        server.close()


def test_cli_prints_listening_port(tmp_path):
    (tmp_path / "f.bin").write_bytes(b"xyz")
    p = subprocess.Popen([sys.executable, SERVER, "--root", str(tmp_path), "--port", "0", "--quiet"],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().split()
        assert line[0] == "LISTENING" and int(line[1]) > 0
        assert get(int(line[1]), "/f.bin")[2] == b"xyz"
    finally:
        p.terminate()
        p.wait(timeout=5)
