# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama-server endpoint client, stdlib only: what the gate, the verify stage and every benchmark read.

An HTTP client with an optional API key, the Prometheus text of ``/metrics`` as a
dict, counter deltas, the build from ``/props`` and a bounded wait for ``/health``
(VRAM per card, what a benchmark records beside its figures, is bench/bench_vram.py).
Runs on the target, so no third-party import; the module wrappers and the tests call
it directly.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import json
import time

from ansible_collections.dankfleet.llm.plugins.module_utils.base.http_client import (
    DEFAULT_MAX_BYTES, Client, HttpError, check_secret, redact, url_problem)

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader
from ansible_collections.dankfleet.llm.plugins.module_utils.base.strict_values import is_finite_number
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import printable


# The options of every module that talks to an endpoint through Endpoint (documented once, in the doc
# fragment dankfleet.llm.endpoint).
ENDPOINT_ARGUMENT_SPEC = dict(
    url=dict(type='str', required=True),
    api_key=dict(type='str', no_log=True),
)

# The series the speculative-decoding figures come from (runbook "Observability").
METRIC_DRAFTS = 'llamacpp:spec_decode_num_drafts_total'
METRIC_DRAFT_TOKENS = 'llamacpp:spec_decode_num_draft_tokens_total'
METRIC_ACCEPTED = 'llamacpp:spec_decode_num_accepted_tokens_total'
METRIC_PROMPT_TOKENS = 'llamacpp:prompt_tokens_total'
METRIC_PROMPT_CACHED = 'llamacpp:prompt_tokens_cached_total'
METRIC_PREDICTED = 'llamacpp:tokens_predicted_total'

# what build() reads of /props: a name, no control character (it reaches the controller's terminal)
# What a benchmark reads of /props: the build it ran against and the slots it had.
BENCH_PROPS = typed_reader.Obj({'build_info': typed_reader.Str(max_len=256, name=True),
                                'total_slots': typed_reader.Int(0, 2 ** 31 - 1)})


class BenchError(Exception):
    """A harness failure whose message names the cause and what to do about it."""


def endpoint_problem(url, api_key):
    """Why (url, api_key) cannot be used (None when they can), naming neither the key nor URL credentials.

    The modules call it first and fail naming it; Endpoint itself answers every request with it."""
    problem = url_problem(url)
    if problem:
        return 'url: %s' % problem
    try:
        check_secret(api_key, 'api_key')
    except HttpError as exc:
        return str(exc)
    return None


class _Refused(HttpError):
    pass


class Endpoint(object):
    """A llama-server base URL (``http://127.0.0.1:7770``) with an optional API key.

    Every request goes through the collection's one HTTP client (module_utils/base/http_client.py): ``timeout``
    is the deadline of the whole request (connect, headers and body together, not per socket read), an
    answer longer than ``max_bytes`` is refused, redirects are held to the client's policy, and no proxy
    from the environment is used (the endpoint is the host's own).
    """

    def __init__(self, url, api_key=None, timeout=600.0, max_bytes=DEFAULT_MAX_BYTES):
        self.url = (url or '').rstrip('/')
        self.api_key = api_key or None
        self.timeout = float(timeout)
        self.max_bytes = int(max_bytes)
        self.problem = endpoint_problem(url, api_key)
        self._client = None if self.problem else Client(self.api_key, 'api_key', proxies=False,
                                                        user_agent='dankfleet.llm.endpoint')

    def _request(self, path, payload=None, timeout=None):
        """(status, body text) of any answer, 4xx and 5xx included; HttpError when none came (the message
        names the cause, never the key)."""
        if self.problem:
            raise _Refused(self.problem)
        data = None if payload is None else json.dumps(payload).encode('utf-8')
        headers = {'Content-Type': 'application/json'} if data is not None else {}
        method = 'GET' if data is None else 'POST'
        timeout = self.timeout if timeout is None else float(timeout)
        try:
            status, _, body = self._client.request(method, self.url + path, body=data, headers=headers,
                                                   timeout=timeout, max_bytes=self.max_bytes)
        except OSError as exc:  # the client names its own failures; a stray OSError still says what failed
            raise HttpError(self._client.scrub('%s %s%s: %s' % (method, redact(self.url), path, exc)))
        return status, body.decode('utf-8', 'replace')

    def call(self, path, payload=None, timeout=None):
        """(HTTP status, body text) of one request that never raises: an HTTP error is its status and
        body, a request that got no answer (refused, timed out, reset, too long) is (-1, the reason)."""
        try:
            return self._request(path, payload, timeout=timeout)
        except HttpError as exc:
            return -1, str(exc) or exc.__class__.__name__

    def get_text(self, path, timeout=None):
        try:
            code, body = self._request(path, timeout=timeout)
        except HttpError as exc:
            raise BenchError('GET %s%s failed: %s (is the endpoint up and is the URL right?)'
                             % (redact(self.url), path, exc))
        if code >= 400:
            raise BenchError('GET %s%s -> HTTP %s: %s' % (redact(self.url), path, code, printable(body, limit=500)))
        return body

    def get_json(self, path, timeout=None, shape=None):
        """The answer's JSON, bounded and read through shape (typed_reader) when given."""
        return _decode(self.get_text(path, timeout), 'GET ' + redact(self.url) + path, shape)

    def post_json(self, path, payload, timeout=None, shape=None):
        try:
            code, body = self._request(path, payload, timeout=timeout)
        except HttpError as exc:
            raise BenchError('POST %s%s failed: %s' % (redact(self.url), path, exc))
        if code >= 400:
            raise BenchError('POST %s%s -> HTTP %s: %s' % (redact(self.url), path, code, printable(body, limit=500)))
        return _decode(body, 'POST ' + redact(self.url) + path, shape)

    def metrics(self):
        """``/metrics`` as {series: value}; None when the server runs without ``--metrics``."""
        try:
            code, body = self._request('/metrics', timeout=30)
        except HttpError as exc:
            raise BenchError('GET %s/metrics failed: %s' % (redact(self.url), exc))
        if code in (404, 501):
            return None
        if code >= 400:
            raise BenchError('GET %s/metrics -> HTTP %s: %s' % (redact(self.url), code, printable(body, limit=500)))
        return parse_metrics(body, 'GET %s/metrics' % redact(self.url))

    def build(self):
        """The llama.cpp build the endpoint reports (``/props`` ``build_info``, e.g. ``b11434-unknown``)."""
        try:
            props = self.get_json('/props', timeout=30, shape=BENCH_PROPS)
        except BenchError:
            return None
        return props.get('build_info')

    def wait_healthy(self, timeout):
        """Wait until ``/health`` answers 200 (503 while loading is normal); raise after ``timeout`` s."""
        if self.problem:
            raise BenchError(self.problem)
        deadline = time.time() + float(timeout)
        last = 'no answer'
        while True:
            left = deadline - time.time()
            code, body = self.call('/health', timeout=max(0.5, min(5.0, left)))
            if code == 200:
                return
            last = 'HTTP %s' % code if code > 0 else body
            if time.time() > deadline:
                raise BenchError('%s/health did not answer 200 within %d s (last: %s); read the unit journal'
                                 % (redact(self.url), timeout, last))
            time.sleep(0.25)


def _decode(text, what, shape=None):
    """JSON text of an answer, bounded (depth, size, finite numbers) and read through shape when given; a
    wrong one is a BenchError naming the request and the path inside the answer."""
    try:
        return typed_reader.load_json(text, what, shape)
    except typed_reader.ShapeError as exc:
        raise BenchError('%s - not an answer llama-server gives; is the URL a llama-server?' % exc)


def parse_metrics(text, source='/metrics'):
    """Prometheus exposition text -> {series (labels kept in the key): float}, read by the format's grammar
    (typed_reader.metrics): a malformed line is a BenchError naming its number, never skipped or read as a
    number near it (``1_0`` is not ten)."""
    try:
        return typed_reader.metrics(text, source)
    except typed_reader.ShapeError as exc:
        raise BenchError('%s - not the Prometheus exposition format llama-server writes' % exc)


def metric_delta(before, after, series):
    """after - before for one counter; None when either side has no metrics or lacks the series."""
    if before is None or after is None or series not in after:
        return None
    for side, values in (('after', after), ('before', before)):
        if not is_finite_number(values.get(series, 0.0)):
            raise BenchError('/metrics %s: %s is %s, not a count (NaN and infinities are refused)'
                             % (side, series, values[series]))
    return after[series] - before.get(series, 0.0)
