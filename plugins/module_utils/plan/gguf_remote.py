# -*- coding: utf-8 -*-
# Copyright: dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GGUF header read from an HTTP(S) url with Range requests: plan a model before it is downloaded.

The bytes come through the collection's one HTTP client (module_utils/base/http_client.py: its deadline per
request, its size cap, its redirect and credential rules, the token only on the url's origin) and go to the
one GGUF parser (gguf_reader.read_gguf_from), so a url gives the same facts, and the same refusals, as the
file would.

Bounded: ranges start at 1 MiB and double (at most 32 MiB each) only while the parser asks for more, and
never reach past the parser's own header limit (MAX_HEADER_BYTES, 256 MiB) or MAX_REQUESTS requests -
the header and the tensor table, never the tensor data; then one byte, the last the server declared, so a
size it lies about cannot hide tensor data past the end of the file. The server is a peer that may lie: an answer that
is not a 206 for exactly the bytes asked (a 200 with the whole body, a Content-Range for other bytes, a
body of another length, a total that changes between answers, an encoded body) is refused by name.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import http.client

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import facts_from_gguf
from ansible_collections.dankfleet.llm.plugins.module_utils.host.gguf_fetch import _parse_content_range
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import (
    MAX_HEADER_BYTES, GGUFError, read_gguf_from)
from ansible_collections.dankfleet.llm.plugins.module_utils.base.http_client import Client, HttpError, redact
from ansible_collections.dankfleet.llm.plugins.module_utils.base.typed_reader import printable

FIRST_RANGE = 1 << 20
MAX_RANGE = 32 << 20
# Full ranges reach MAX_HEADER_BYTES in 13 requests; a server answering short ranges is stopped here.
MAX_REQUESTS = 64
RANGE_HINT = ("gguf_info reads a url's header with Range requests and needs a server that answers them "
              "(HTTP 206, as Hugging Face, nginx and S3 do); fetch the file (gguf_fetch) and read it with path")


class RangeSource(object):
    """The bytes of one url, read front to back as read_gguf_from asks (``read(n)``), one Range at a time.

    size: the file's bytes, from the first answer's Content-Range; fetched, requests: what it cost.
    """

    def __init__(self, url, client, timeout=30.0, limit=MAX_HEADER_BYTES):
        self.url = url
        self.name = redact(url)
        self.client = client
        self.timeout = timeout
        self.limit = limit
        self.size = None
        self.pos = 0
        self.fetched = 0
        self.requests = 0
        self._buf = b""
        self._buf_at = 0
        self._next = FIRST_RANGE

    def _refuse(self, problem):
        return GGUFError(self.name, problem, "remote")

    def open(self):
        """The first range: the file's size, and its first MiB."""
        self._fetch(0)
        return self

    def read(self, n):
        end = min(self.pos + n, self.size, self.limit)
        out = []
        while self.pos < end:
            if not self._buf_at <= self.pos < self._buf_at + len(self._buf):
                self._fetch(self.pos)
            start = self.pos - self._buf_at
            piece = self._buf[start:start + end - self.pos]
            out.append(piece)
            self.pos += len(piece)
        return b"".join(out)

    def confirm_size(self):
        """Ask for the last byte the server declared, unless it came already: a server that claims a larger file
        than it holds (which would hide tensor data past the end) is refused as a file cut short would be."""
        if self.size and not self._buf_at + len(self._buf) >= self.size:
            self._next = 1
            self._fetch(self.size - 1)

    def _fetch(self, start):
        if self.requests >= MAX_REQUESTS:
            raise self._refuse("the server answered %d ranges and the header is still not read (%d bytes so far): "
                               "its answers are too short; %s" % (self.requests, self.fetched, RANGE_HINT))
        end = min(start + self._next, self.limit) - 1
        if self.size is not None:
            end = min(end, self.size - 1)
        self._next = min(self._next * 2, MAX_RANGE)
        self.requests += 1
        asked = "bytes=%d-%d" % (start, end)
        try:
            resp = self.client.open("GET", self.url, headers={"Range": asked}, timeout=self.timeout,
                                    idle_timeout=self.timeout)
        except (HttpError, OSError, http.client.HTTPException, ValueError) as exc:
            raise self._refuse("cannot read the header: %s" % printable(self.client.scrub(exc), limit=600))
        try:
            body = self._answer(resp, asked, start, end)
        finally:
            resp.close()
        self._buf, self._buf_at = body, start
        self.fetched += len(body)

    def _answer(self, resp, asked, start, end):
        status = resp.status
        if status == 200:
            raise self._refuse("the server ignored the Range request (%s): it answered 200 with the whole body, "
                               "which was not read; %s" % (asked, RANGE_HINT))
        content_range = resp.headers.get("Content-Range")
        cr = _parse_content_range(content_range)
        if status == 416:
            # only an empty file may have no byte 0: the parser then refuses it as it refuses an empty file
            if cr and cr[0] is None and cr[2] == 0 and start == 0:
                self.size = 0
                return b""
            raise self._refuse("the server answered %s with 416 (Content-Range %r) for a range inside the file it "
                               "declared: a lying or changed file; nothing was used"
                               % (asked, _short(content_range)))
        if status != 206:
            # the module's option, and the inventory's where the plan reads the url (gguf_fetch_token is the fetch's)
            hint = (" (a gated file: give token - the plan's is llm_plan_url_token, vaulted in the inventory)"
                    if status in (401, 403) else "")
            raise self._refuse("HTTP %d %s for %s%s; nothing was used"
                               % (status, _short(resp.reason), asked, hint))
        encoding = (resp.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise self._refuse("the server sent the range Content-Encoding %r: offsets into an encoded body are not "
                               "the file's; nothing was used" % _short(encoding))
        if not cr or cr[0] is None or cr[2] is None:
            raise self._refuse("the server answered %s with 206 but Content-Range %r (expected 'bytes a-b/size'): "
                               "nothing was used" % (asked, _short(content_range)))
        first, last, total = cr
        if first != start or last < first or last > end or last >= total:
            raise self._refuse("the server answered %s with Content-Range %r, which are not the bytes asked (or lie "
                               "past its own size): a lying server; nothing was used" % (asked, _short(content_range)))
        if self.size is not None and total != self.size:
            raise self._refuse("the server's Content-Range %r declares a size of %d bytes, its first answer %d: the "
                               "file changed or the server lies; nothing was used"
                               % (_short(content_range), total, self.size))
        try:
            body = resp.read_capped(last - first + 1)
        except (HttpError, OSError, http.client.HTTPException, ValueError) as exc:
            raise self._refuse("the range %s broke off or was longer than declared: %s; nothing was used"
                               % (asked, _short(self.client.scrub(exc))))
        if len(body) != last - first + 1:
            raise self._refuse("the server sent %d bytes for Content-Range %r (%d bytes): nothing was used"
                               % (len(body), _short(content_range), last - first + 1))
        self.size = total
        return body


def _short(value):
    """A peer's header or reason as a message may show it: printable, at most 120 characters."""
    return printable("%s" % (value,), limit=120)


def read_gguf_url(url, token=None, timeout=30.0, validate_certs=True, limit=MAX_HEADER_BYTES):
    """(GGUFFile, RangeSource) of the GGUF at url: its header and tensor table, read with Range requests.

    Raises GGUFError (cause ``remote`` for what the server or the url policy refused, the parser's causes for
    the file itself), naming the url without its credentials or query and never the token.
    """
    try:
        client = Client(token, "token", proxies=True, verify_tls=validate_certs, user_agent="dankfleet.llm.gguf_info")
    except HttpError as exc:
        raise GGUFError(redact(url), str(exc), "remote")
    source = RangeSource(url, client, timeout=timeout, limit=limit).open()
    g = read_gguf_from(source, source.name, source.size)
    source.confirm_size()
    return g, source


def gguf_url_facts(url, token=None, tensors=False, timeout=30.0, validate_certs=True):
    """The facts gguf_facts gives for a file, of the GGUF at url, plus ``url`` (redacted), ``bytes_fetched`` and
    ``requests`` (what reading the header cost)."""
    g, source = read_gguf_url(url, token=token, timeout=timeout, validate_certs=validate_certs)
    facts = facts_from_gguf(g)
    if tensors:
        facts["tensors"] = [t.as_dict() for t in g.tensors]
    facts.update(url=source.name, bytes_fetched=source.fetched, requests=source.requests)
    return facts


def gguf_url_files(urls, token=None, tensors=False, timeout=30.0, validate_certs=True):
    """name -> url of each GGUF -> name -> its facts (gguf_url_facts) or ``{url, error}``: what gguf_files is for paths.

    Nothing raises for one url: the caller (a plan before the fetch) decides what an unreadable header means.
    """
    files = {}
    for name, url in urls.items():
        url = str(url)
        try:
            files[name] = gguf_url_facts(url, token=token, tensors=tensors, timeout=timeout,
                                         validate_certs=validate_certs)
        except GGUFError as exc:
            files[name] = {"url": redact(url), "error": str(exc)}
    return files
