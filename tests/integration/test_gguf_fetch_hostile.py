"""gguf_fetch against a lying or hostile server (tests/lab/range_http_server.py faults), for real.

Every case must end -- fast -- with a verified file or a FetchError naming the cause, and
never with a promoted wrong file or a file written outside dest's directory.
"""

import os
import time

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import (
    ATTEMPTS_PER_TRY, PART_SUFFIX, FetchError, fetch)
from ansible_collections.dankfleet.llm.tests.integration.fetch_server import (  # noqa: F401 - served is a fixture
    SIZE, listing, run, served, url)


def _fails(served, dest, fault, **kw):
    t0 = time.monotonic()
    with pytest.raises(FetchError) as e:
        run(served, dest, url(served, fault), retry_delay=0.0, **kw)
    assert time.monotonic() - t0 < 10
    assert not dest.exists()
    return e.value


def test_server_restarting_every_range_at_zero_gives_up(served, tmp_path):
    dest = tmp_path / "m.gguf"
    e = _fails(served, dest, "range-from-0,drop-after-100000", retries=3)
    assert "giving up after" in e.msg and "without progress" in e.msg
    assert e.result["attempts"] <= 8


def test_restart_from_zero_creeping_forward_is_not_progress(served, tmp_path):
    """Each answer restarts at 0 and gets 1000 bytes further: before, every attempt reset the budget."""
    dest = tmp_path / "m.gguf"
    e = _fails(served, dest, "ignore-range,drop-grow-1000", retries=2)
    assert "without progress" in e.msg
    assert e.result["attempts"] == 3


def test_attempts_are_capped_even_with_progress(served, tmp_path):
    dest = tmp_path / "m.gguf"
    e = _fails(served, dest, "drop-after-%d" % (SIZE // 45), retries=1)
    assert "the cap of %d attempts" % (2 * ATTEMPTS_PER_TRY) in e.msg
    assert e.result["attempts"] == 2 * ATTEMPTS_PER_TRY
    assert os.path.getsize(str(dest) + PART_SUFFIX) < SIZE          # kept for a resume


def test_malformed_content_length_is_named(served, tmp_path):
    e = _fails(served, tmp_path / "m.gguf", "bad-length")
    assert "malformed Content-Length '12abc'" in e.msg


def test_lying_total_is_named(served, tmp_path):
    e = _fails(served, tmp_path / "m.gguf", "lie-total-99")
    assert "the server has 99 bytes" in e.msg


@pytest.mark.parametrize("scheme", ["ftp", "file", "gopher"])
def test_redirect_to_another_scheme_is_refused(served, tmp_path, scheme):
    mark = len(served["server"].requests)
    e = _fails(served, tmp_path / "m.gguf", "redirect-to-%s" % scheme)
    assert "redirects to %s:" % scheme in e.msg and "refused" in e.msg and "only http:// and https://" in e.msg
    time.sleep(0.2)    # the server logs a request after answering it
    mine = [q for q in served["server"].requests[mark:] if "redirect-to-%s" % scheme in q["path"]]
    assert [q["status"] for q in mine] == [302]                         # asked once, never followed
    assert listing(tmp_path) == []


def test_relative_dest_is_refused(served, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FetchError, match="dest must be an absolute path, got 'm.gguf'"):
        fetch(url(served), "m.gguf", SIZE, served["sha256"])
    assert listing(tmp_path) == []


@pytest.mark.parametrize("bad", ["ftp://example.org/x.gguf", "file:///etc/passwd", "http:///nohost.gguf",
                                 "http://[::1/x.gguf"])
def test_url_policy(tmp_path, bad):
    with pytest.raises(FetchError, match="url must be http:// or https:// with a host"):
        fetch(bad, str(tmp_path / "m.gguf"), 10, "0" * 64)


def test_dest_that_is_a_fifo_is_refused_without_blocking(served, tmp_path):
    dest = tmp_path / "m.gguf"
    os.mkfifo(str(dest))
    t0 = time.monotonic()
    with pytest.raises(FetchError, match="is a FIFO"):
        run(served, dest)
    assert time.monotonic() - t0 < 5
    assert listing(tmp_path) == ["m.gguf"]


def test_relative_trash_dir_is_refused(served, tmp_path):
    with pytest.raises(FetchError, match="trash_dir must be an absolute path"):
        run(served, tmp_path / "m.gguf", trash_dir="trash")


def test_a_dribbling_server_is_cut_off(served, tmp_path):
    """2 KB/s never trips the per-read timeout; the low-speed limit ends each attempt, progress never counts."""
    t0 = time.monotonic()
    with pytest.raises(FetchError) as e:
        run(served, tmp_path / "m.gguf", url(served, "rate-2000"), retries=1, retry_delay=0.0, timeout=1.5)
    assert "slower than 16384 bytes in 1.5s" in e.value.msg and "without progress" in e.value.msg
    assert e.value.result["attempts"] == 2
    assert time.monotonic() - t0 < 8
