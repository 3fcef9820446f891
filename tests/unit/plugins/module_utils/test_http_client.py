"""module_utils/base/http_client.py, the collection's one HTTP client, against real servers on 127.0.0.1
(tests/lab/range_http_server.py with its faults), and the fetch and the endpoint client through it.

Properties, over hypothesis-drawn fault schedules (drips, resets, endless bodies, lying lengths, redirect
chains to link-local, private and ftp targets): every request ends within its deadline plus a small slack,
raises only HttpError (never a stray exception), holds a bounded amount of memory, never names a secret; the
fetch never promotes wrong bytes, and a server that resets every 60 KB still delivers the file.
"""
import hashlib
import os
import random
import threading
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.base import http_client as hc
from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import Endpoint
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import FetchError, fetch
import range_http_server

SLACK = 0.6            # seconds a request may run past its deadline (scheduling on a loaded 2-core box)
SECRET = "hf_Zq8secretTOKENvalue41"
SIZE = 400_003
DATA = random.Random(23).randbytes(SIZE)
SHA = hashlib.sha256(DATA).hexdigest()
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    (root / "health").write_text('{"status":"ok"}')
    (root / "m.gguf").write_bytes(DATA)
    server, port = range_http_server.serve(str(root))
    yield {"server": server, "base": "http://127.0.0.1:%d" % port, "root": str(root)}
    server.close()


def at(www, faults, path="health"):
    return "%s/_fault/%s/%s" % (www["base"], faults, path) if faults else "%s/%s" % (www["base"], path)


def timed(fn, *args, **kw):
    """(result, HttpError or None, seconds) of fn; a call still running 10 s past its timeout fails the test
    (on a daemon thread, so a regression to per-read timeouts fails here instead of hanging the suite)."""
    box = {}

    def work():
        t0 = time.monotonic()
        try:
            box["out"] = (fn(*args, **kw), None)
        except hc.HttpError as exc:
            box["out"] = (None, exc)
        except BaseException as exc:  # noqa: B902 - reported below, as the failure it is
            box["out"] = (None, exc)
        box["took"] = time.monotonic() - t0
    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(float(kw.get("timeout") or 30) + 3)
    if worker.is_alive():
        pytest.fail("%s%r still running %ss past its timeout: the deadline does not hold"
                    % (getattr(fn, "__name__", fn), args, 3))
    result, exc = box["out"]
    if exc is not None and not isinstance(exc, hc.HttpError):
        raise exc
    return result, exc, box["took"]


# --- the deadline ------------------------------------------------------------------------------------

@pytest.mark.parametrize("faults", ["drip-2000", "drip-150", "length-100000", "stall-30"])
def test_a_slow_or_lying_peer_ends_with_the_deadline_not_per_read(www, faults):
    client = hc.Client(SECRET)
    _, exc, took = timed(client.request, "GET", at(www, faults, "m.gguf" if faults.startswith("stall") else "health"),
                         timeout=1.5)
    assert isinstance(exc, hc.DeadlineExceeded), exc
    assert 1.4 <= took <= 1.5 + SLACK
    assert "no complete answer within 1.5 s" in str(exc)


def test_the_idle_timeout_still_bounds_one_read(www):
    _, exc, took = timed(hc.Client().request, "GET", at(www, "stall-30", "m.gguf"), timeout=30, idle_timeout=0.5)
    assert exc is not None and took < 0.5 + SLACK


def test_a_refused_port_and_an_unresolvable_host_are_named(www):
    _, exc, took = timed(hc.Client().request, "GET", "http://127.0.0.1:1/health", timeout=2)
    assert isinstance(exc, hc.HttpError) and "cannot connect" in str(exc) and took < 2
    _, exc, _ = timed(hc.Client().request, "GET", "http://no-such-host.invalid/health", timeout=2)
    assert "cannot resolve the host" in str(exc)


# --- the size cap ------------------------------------------------------------------------------------

@pytest.mark.parametrize("faults", ["endless", "endless-chunked"])
def test_an_endless_body_is_refused_at_the_cap_in_bounded_memory(www, faults):
    tracemalloc.start()
    try:
        _, exc, took = timed(hc.Client().request, "GET", at(www, faults), timeout=10, max_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(exc, hc.AnswerTooLarge) and "longer than the 1048576 bytes" in str(exc)
    assert peak < 8 << 20 and took < 5


def test_a_declared_length_over_the_cap_is_refused_unread(www):
    _, exc, _ = timed(hc.Client().request, "GET", at(www, None, "m.gguf"), timeout=5, max_bytes=1000)
    assert isinstance(exc, hc.AnswerTooLarge) and "declares 400003 bytes" in str(exc)


def test_a_body_cut_short_of_its_length_is_an_error_not_a_short_answer(www):
    _, exc, _ = timed(hc.Client().request, "GET", at(www, "drop-after-5"), timeout=5)
    assert "broke off after 5 of the 15 bytes" in str(exc)


# --- the redirect policy -----------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["169.254.169.254", "169.254.0.1", "[fe80::1]", "[::ffff:169.254.169.254]",
                                  "[febf::ffff]", "224.0.0.1"])
def test_a_redirect_to_a_link_local_or_multicast_address_is_refused_unfollowed(www, host):
    mark = len(www["server"].requests)
    _, exc, _ = timed(hc.Client(SECRET).request, "GET", at(www, "redirect-host-%s" % host), timeout=5)
    assert isinstance(exc, hc.PolicyRefused) and "redirects to http://%s" % host in str(exc)
    assert "link-local" in str(exc) or "multicast" in str(exc)
    assert len(www["server"].requests) - mark == 1


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://[fe80::1%25lo]:80/x"])
def test_a_link_local_url_is_refused_before_any_connection(url):
    _, exc, _ = timed(hc.Client().request, "GET", url, timeout=5)
    assert isinstance(exc, hc.PolicyRefused) and "link-local" in str(exc)


@pytest.mark.parametrize("scheme", ["ftp", "file", "gopher"])
def test_a_redirect_to_another_scheme_is_refused(www, scheme):
    _, exc, _ = timed(hc.Client().request, "GET", at(www, "redirect-to-%s" % scheme), timeout=5)
    assert isinstance(exc, hc.PolicyRefused) and "only http:// and https://" in str(exc)


def test_a_private_mirror_reached_directly_and_its_own_redirects_are_followed(www):
    status, _, body = hc.Client().request("GET", at(www, "redirect-chain-3"), timeout=5)
    assert (status, body) == (200, b'{"status":"ok"}')
    status, _, _ = hc.Client().request("GET", at(www, "redirect-host-127.0.0.1"), timeout=5)
    assert status == 200


def test_more_than_ten_redirects_are_refused(www):
    _, exc, _ = timed(hc.Client().request, "GET", at(www, "redirect-chain-11"), timeout=5)
    assert isinstance(exc, hc.PolicyRefused) and "more than 10 redirects" in str(exc)


def _public(names):
    """A classifier that calls the hosts in ``names`` public (the test's stand-in for a host on the internet)."""
    def classify(host, addresses):
        return "public" if host in names else hc.host_class([hc.address_class(a[1][0]) for a in addresses])
    return classify


def _resolver(mapping):
    def resolve(host, port):
        return hc.resolve(mapping.get(host, host), port)
    return resolve


@pytest.mark.parametrize("target", ["127.0.0.1", "10.1.2.3", "192.168.0.1", "[::1]", "[fd00::1]", "0.0.0.0"])
def test_a_public_host_may_not_redirect_into_loopback_or_private_space(www, target):
    port = www["server"].server_address[1]
    url = "http://mirror.example.org:%d/_fault/redirect-host-%s/health" % (port, target)
    client = hc.Client(resolver=_resolver({"mirror.example.org": "127.0.0.1"}), classify=_public({"mirror.example.org"}))
    _, exc, _ = timed(client.request, "GET", url, timeout=5)
    assert isinstance(exc, hc.PolicyRefused), exc
    assert "moves from the public host" in str(exc) and "name a private mirror in the url directly" in str(exc)


def test_the_connection_goes_to_the_address_that_was_checked(www):
    """A name resolved once: the classifier and the connect see the same addresses (no DNS rebinding window)."""
    seen = []

    def resolve(host, port):
        seen.append(host)
        return hc.resolve("127.0.0.1", port)
    port = www["server"].server_address[1]
    status, _, _ = hc.Client(resolver=resolve).request("GET", "http://models.lan:%d/health" % port, timeout=5)
    assert status == 200 and seen == ["models.lan"]


# --- credentials and secrets -------------------------------------------------------------------------

@given(user=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12),
       password=st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!$&()*+,;=", min_size=6, max_size=24))
@settings(max_examples=40, **SETTINGS)
def test_credentials_in_a_url_are_refused_by_name_never_echoed(user, password):
    url = "http://%s:%s@127.0.0.1:1/health" % (user, password)
    problem = hc.url_problem(url)
    assert "carries credentials" in problem and password not in problem
    assert password in hc.url_credentials(url)
    with pytest.raises(hc.PolicyRefused) as e:
        hc.Client().request("GET", url, timeout=1)
    assert password not in str(e.value)


@given(secret=st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789_-.", min_size=8, max_size=40),
       before=st.sampled_from(["", " ", "\t", "\n"]), after=st.sampled_from(["\n", " ", "\r\n", "\t", " \n"]),
       name=st.sampled_from(["token", "api_key"]))
@settings(max_examples=60, **SETTINGS)
def test_a_secret_with_whitespace_around_it_is_refused_unshown(secret, before, after, name):
    with pytest.raises(hc.SecretRefused) as e:
        hc.check_secret(before + secret + after, name)
    text = str(e.value)
    assert text.startswith(name) and "whitespace around it" in text and secret not in text
    with pytest.raises(hc.SecretRefused):
        hc.Client(before + secret + after)
    assert hc.check_secret(secret, name) == secret


@pytest.mark.parametrize("bad", ["a\x00b-secret", "tok\x7fen-secret", "tok\nen-secret", "tok\u20acen-secret"])
def test_a_secret_with_a_control_character_is_refused_unshown(bad):
    with pytest.raises(hc.SecretRefused) as e:
        hc.check_secret(bad, "token")
    assert "control character" in str(e.value) and bad not in str(e.value) and "secret" not in str(e.value)


def test_the_secret_is_scrubbed_from_what_a_peer_echoes(tmp_path):
    """A peer that answers with the Authorization header in its status line: the message never carries it."""
    import socket
    import threading
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def echo():
        conn, _ = listener.accept()
        head = conn.recv(65536).decode("latin-1")
        auth = [line for line in head.split("\r\n") if line.startswith("Authorization")][0]
        conn.sendall(("XTTP/9 %s\r\n\r\n" % auth).encode("latin-1"))
        conn.close()
    threading.Thread(target=echo, daemon=True).start()
    with pytest.raises(hc.HttpError) as e:
        hc.Client(SECRET).request("GET", "http://127.0.0.1:%d/" % listener.getsockname()[1], timeout=3)
    listener.close()
    assert SECRET not in str(e.value) and hc.SCRUBBED in str(e.value)


# --- fault schedules, drawn ----------------------------------------------------------------------------

FAULTS = st.sampled_from([
    "drip-100", "drip-400", "reset-every-3", "reset-every-9", "endless", "endless-chunked", "length-1",
    "length-100000", "drop-after-4", "stall-5", "rate-20", "500", "503", "404", "bad-length",
    "redirect-host-169.254.169.254", "redirect-host-[fe80::1]", "redirect-host-127.0.0.1",
    "redirect-to-ftp", "redirect-to-file", "redirect-chain-2", "redirect-chain-12", "",
])


@given(faults=st.lists(FAULTS, min_size=1, max_size=3, unique=True), timeout=st.floats(0.3, 1.2),
       endpoint=st.booleans())
@settings(max_examples=45, **SETTINGS)
def test_every_request_ends_in_time_in_bounded_memory_naming_no_secret(www, faults, timeout, endpoint):
    url = at(www, ",".join(f for f in faults if f))

    def one(timeout):
        if endpoint:
            return Endpoint(url.rsplit("/", 1)[0], api_key=SECRET, timeout=timeout, max_bytes=1 << 20).call("/health")
        status, _, body = hc.Client(SECRET).request("GET", url, timeout=timeout, max_bytes=1 << 20)
        return status, body.decode("latin-1")
    tracemalloc.start()
    try:
        answer, exc, took = timed(one, timeout=timeout)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    status, outcome = answer if exc is None else (-1, str(exc))
    assert took <= timeout + SLACK, (faults, took)
    assert peak < 8 << 20, (faults, peak)
    assert SECRET not in outcome
    if status == 200:
        assert outcome == '{"status":"ok"}' or any(f.startswith("length-1") or f.startswith("drop") for f in faults)
    # the server answers with the first of these in the list (the rest never fire)
    first = next((f for f in faults if f.startswith(("redirect", "endless")) or f[:3].isdigit()), "")
    if first.startswith(("redirect-host-169", "redirect-host-[fe80", "redirect-to-", "redirect-chain-12")):
        assert status != 200, (faults, outcome)     # refused, or cut off by the deadline (a drip first)


# --- the fetch through the client --------------------------------------------------------------------

def _fetch(tmp_path, url, **kw):
    args = dict(retries=2, retry_delay=0.0, timeout=2, disk_margin_bytes=0, progress_interval=0)
    args.update(kw)
    return fetch(url, str(tmp_path / "m.gguf"), SIZE, SHA, **args)


def test_a_fetch_from_a_server_resetting_every_60_kb_progresses_and_finishes(www, tmp_path):
    r = _fetch(tmp_path, at(www, "reset-every-60000", "m.gguf"), retries=1)
    assert r["status"] == "downloaded" and (tmp_path / "m.gguf").read_bytes() == DATA
    assert r["attempts"] == -(-SIZE // 60000) and r["resumes"] == r["attempts"] - 1


@given(n=st.integers(16 * 1024 + 1, 150_000), wrong=st.booleans())
@settings(max_examples=8, **SETTINGS)
def test_resets_past_the_progress_floor_finish_and_wrong_bytes_never_promote(www, tmp_path_factory, n, wrong):
    tmp = tmp_path_factory.mktemp("f")
    faults = "reset-every-%d%s" % (n, ",wrong-bytes-%d" % (SIZE // 3) if wrong else "")
    try:
        r = _fetch(tmp, at(www, faults, "m.gguf"), retries=1)
    except FetchError as e:
        assert wrong and "sha256 mismatch after download" in e.msg
        assert not (tmp / "m.gguf").exists()
    else:
        assert not wrong and r["status"] == "downloaded" and (tmp / "m.gguf").read_bytes() == DATA


def test_a_fetch_whose_headers_drip_gives_up_in_bounded_time(www, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(FetchError) as e:
        _fetch(tmp_path, at(www, "drip-300", "m.gguf"), retries=1, timeout=1)
    took = time.monotonic() - t0
    assert "no answer from" in e.value.msg and "within 1.0s" in e.value.msg and "without progress" in e.value.msg
    assert e.value.result["attempts"] == 2 and took < 2 * (1 + SLACK)
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.parametrize("host", ["169.254.169.254", "[fe80::1]"])
def test_a_fetch_never_follows_a_redirect_to_link_local(www, tmp_path, host):
    with pytest.raises(FetchError) as e:
        _fetch(tmp_path, at(www, "redirect-host-%s" % host, "m.gguf"))
    assert "link-local" in e.value.msg and "Nothing was downloaded from there" in e.value.msg
    assert os.listdir(str(tmp_path)) == []


def test_a_fetch_refuses_credentials_and_a_token_with_a_newline_unshown(www, tmp_path):
    with pytest.raises(FetchError) as e:
        _fetch(tmp_path, "http://hf:pa55word-xyz@127.0.0.1:1/m.gguf")
    assert "carries credentials" in e.value.msg and "pa55word-xyz" not in e.value.msg
    with pytest.raises(FetchError) as e:
        _fetch(tmp_path, at(www, None, "m.gguf"), token=SECRET + "\n")
    assert "token has whitespace around it" in e.value.msg and SECRET not in e.value.msg
    assert os.listdir(str(tmp_path)) == []
