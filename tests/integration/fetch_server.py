"""A real HTTP server (tests/lab/range_http_server.py) serving a payload for gguf_fetch, and the calls the
gguf_fetch tests share (test_gguf_fetch.py, test_gguf_fetch_hostile.py)."""
import hashlib
import json
import os
import random

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import PART_SUFFIX, STAMP_SUFFIX, fetch
import range_http_server

SIZE = 1_500_001  # not a multiple of any chunk size, larger than several chunks
CHUNK = 64 * 1024
TOKEN = "hf_test_token_not_a_secret"


def payload(seed, size):
    return random.Random(seed).randbytes(size)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    data = payload(1234, SIZE)
    (root / "models").mkdir()
    (root / "models" / "payload.gguf").write_bytes(data)
    server, port = range_http_server.serve(str(root))
    yield {
        "server": server,
        "base": "http://127.0.0.1:%d" % port,
        "data": data,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    server.close()


@pytest.fixture(scope="module")
def served_token(served):
    server, port = range_http_server.serve(served["server"].root, token=TOKEN)
    yield {"server": server, "base": "http://127.0.0.1:%d" % port}
    server.close()


def url(served, fault=None, path="models/payload.gguf"):
    if fault:
        return "%s/_fault/%s/%s" % (served["base"], fault, path)
    return "%s/%s" % (served["base"], path)


def requests_since(served, mark):
    return served["server"].requests[mark:]


def run(served, dest, u=None, **kw):
    args = dict(retries=3, retry_delay=0.05, timeout=5, disk_margin_bytes=0,
                chunk_size=CHUNK, progress_interval=0)
    args.update(kw)
    size = args.pop("size", SIZE)
    sha = args.pop("sha256", served["sha256"])
    return fetch(u or url(served), str(dest), size, sha, **args)


def listing(d):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def assert_verified_on_disk(served, dest):
    assert dest.read_bytes() == served["data"]
    assert not os.path.exists(str(dest) + PART_SUFFIX)
    stamp = json.loads(open(str(dest) + STAMP_SUFFIX).read())
    st = os.stat(dest)
    assert stamp["size"] == SIZE == st.st_size
    assert stamp["inode"] == st.st_ino
    assert stamp["mtime_ns"] == st.st_mtime_ns
    assert stamp["sha256"] == served["sha256"]
