#!/usr/bin/env python
"""A small HTTP file server with Range support and per-request fault injection.

The lab's model mirror and the gguf_fetch tests' server. Python stdlib only
(python3 >= 3.11), binds 127.0.0.1 unless told otherwise.

One server answers clean and faulty URLs at once; the fault is chosen by a
path prefix, so a test can aim a download at a fault without a second server:

    /models/a.gguf                            the file, clean
    /_fault/drop-after-4096/models/a.gguf     the same file, fault applied
    /_fault/stall-3-once,rate-1000000/a.gguf  several faults, comma-separated

Faults (N, S are integers; any fault may end in "-once", which makes it fire
only on the first request for that fault+file(+query) and serve clean afterwards):

    drop-after-N    send N body bytes of this response, then close the socket
    ignore-range    answer 200 with the whole file even when Range was asked
    wrong-bytes     flip one byte (file offset size // 2) in whatever is sent
    wrong-bytes-K   flip the byte at file offset K instead
    stall-S         after half of this response's body, send nothing for S s
    rate-N          throttle the body to about N bytes per second
    redirect-P      302 to the same file path on port P of this host (another origin)
    redirect-to-S   302 to scheme S (ftp, file, https, ...) for the same host and path;
                    redirect-to-file goes to file:///etc/passwd
    range-from-0    answer a Range request 206 "bytes 0-(size-1)/size" from byte 0:
                    a server that restarts every range at the start
    drop-grow-N     drop after N*k body bytes on the k-th request for this fault+file
                    (with ignore-range: restarts from 0, each time a little further)
    bad-length      send a malformed Content-Length ("12abc")
    lie-total-N     claim the file has N bytes (Content-Range total, 200 Content-Length)
    drip-MS         send every byte of the answer (status line, headers, body) MS milliseconds
                    apart: a peer no per-read timeout ever catches
    reset-every-N   send N body bytes of this response, then reset the connection (RST, not FIN)
    endless         answer 200 with no Content-Length and a body that never ends
    endless-chunked the same, chunked
    length-N        send "Content-Length: N" whatever the body is (the connection stays open)
    redirect-host-H 302 to http://H:<this port>/<same path> (H: 169.254.169.254, [fe80::1], 10.0.0.1 ...)
    redirect-chain-N  302 to the same path with redirect-chain-(N-1); redirect-chain-0 serves
    404             answer 404
    500             answer 500 (every time; "500-once": only the first time)
    <3-digit code>  answer that status with an empty body (e.g. 503-once)

A server started with faults="..." applies them to every path without a /_fault/ prefix (a whole
llama-server stand-in that drips: the root holds files named health, props, v1/models ...);
faults={path: "..."} to those paths only.

Protocol: GET, HEAD and POST (the request body is read and ignored; the answer is the file); Accept-Ranges: bytes; a single "bytes=" range
(a-b, a-, -n) answers 206 with Content-Range; an unsatisfiable range answers
416 with "Content-Range: bytes */size"; several ranges are ignored (200,
which RFC 9110 allows). If-Range with a non-matching ETag serves the whole
file. With a token, requests without "Authorization: Bearer <token>" get 401.

CLI:    python3 range_http_server.py --root DIR [--port 0] [--bind 127.0.0.1]
                                     [--token T | --token-file F] [--quiet]
        prints "LISTENING <port>" on stdout once it accepts connections.
        The token may also come from $RANGE_HTTP_TOKEN (keeps it off ps).
Python: server, port = serve(root, port=0, token=None)   # runs in a thread
        ...; server.close()
        server.requests holds one dict per answered request (method, path,
        fault, range, status, sent, auth) so a test can prove what was asked.
"""

import argparse
import email.utils
import http.server
import io
import os
import re
import socket
import struct
import sys
import threading
import time
import urllib.parse

FAULT_PREFIX = "/_fault/"
_CHUNK = 256 * 1024
_RANGE_RE = re.compile(r"^\s*(\d*)\s*-\s*(\d*)\s*$")
_FAULT_RE = re.compile(
    r"^(?:(?P<drop>drop-after-(?P<drop_n>\d+))"
    r"|(?P<ignore>ignore-range)"
    r"|(?P<wrong>wrong-bytes(?:-(?P<wrong_k>\d+))?)"
    r"|(?P<stall>stall-(?P<stall_s>\d+(?:\.\d+)?))"
    r"|(?P<rate>rate-(?P<rate_n>\d+))"
    r"|(?P<redirect>redirect-(?P<redirect_port>\d+))"
    r"|(?P<redirect_to>redirect-to-(?P<redirect_scheme>[a-z][a-z0-9+.-]*))"
    r"|(?P<from0>range-from-0)"
    r"|(?P<grow>drop-grow-(?P<grow_n>\d+))"
    r"|(?P<badlen>bad-length)"
    r"|(?P<lie>lie-total-(?P<lie_n>\d+))"
    r"|(?P<drip>drip-(?P<drip_ms>\d+))"
    r"|(?P<reset>reset-every-(?P<reset_n>\d+))"
    r"|(?P<endless>endless(?P<endless_chunked>-chunked)?)"
    r"|(?P<length>length-(?P<length_n>\d+))"
    r"|(?P<rhost>redirect-host-(?P<rhost_h>[A-Za-z0-9.:\[\]-]+?))"
    r"|(?P<chain>redirect-chain-(?P<chain_n>\d+))"
    r"|(?P<status>[1-5]\d\d))"
    r"(?P<once>-once)?$"
)


class FaultSpecError(ValueError):
    pass


def parse_faults(spec):
    """Parse "drop-after-10,stall-2-once" into a list of (name, dict) tuples."""
    faults = []
    for item in filter(None, spec.split(",")):
        m = _FAULT_RE.match(item)
        if not m:
            raise FaultSpecError("unknown fault %r" % item)
        f = {"spec": item, "once": bool(m.group("once"))}
        if m.group("drop"):
            f.update(kind="drop", n=int(m.group("drop_n")))
        elif m.group("ignore"):
            f.update(kind="ignore-range")
        elif m.group("wrong"):
            k = m.group("wrong_k")
            f.update(kind="wrong-bytes", offset=None if k is None else int(k))
        elif m.group("stall"):
            f.update(kind="stall", seconds=float(m.group("stall_s")))
        elif m.group("rate"):
            f.update(kind="rate", n=max(1, int(m.group("rate_n"))))
        elif m.group("redirect"):
            f.update(kind="redirect", port=int(m.group("redirect_port")))
        elif m.group("redirect_to"):
            f.update(kind="redirect-to", scheme=m.group("redirect_scheme"))
        elif m.group("from0"):
            f.update(kind="range-from-0")
        elif m.group("grow"):
            f.update(kind="drop-grow", n=int(m.group("grow_n")))
        elif m.group("badlen"):
            f.update(kind="bad-length")
        elif m.group("lie"):
            f.update(kind="lie-total", n=int(m.group("lie_n")))
        elif m.group("drip"):
            f.update(kind="drip", seconds=int(m.group("drip_ms")) / 1000.0)
        elif m.group("reset"):
            f.update(kind="reset", n=int(m.group("reset_n")))
        elif m.group("endless"):
            f.update(kind="endless", chunked=bool(m.group("endless_chunked")))
        elif m.group("length"):
            f.update(kind="length", n=int(m.group("length_n")))
        elif m.group("rhost"):
            f.update(kind="redirect-host", host=m.group("rhost_h"))
        elif m.group("chain"):
            f.update(kind="redirect-chain", n=int(m.group("chain_n")))
        else:
            f.update(kind="status", code=int(m.group("status")))
        faults.append(f)
    return faults


def parse_range(header, size):
    """Return (start, end_inclusive), None (ignore: serve 200) or "unsatisfiable"."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None  # unknown unit or several ranges: RFC 9110 lets us ignore it
    m = _RANGE_RE.match(spec)
    if not m or (m.group(1) == "" and m.group(2) == ""):
        return None
    first, last = m.group(1), m.group(2)
    if first == "":  # suffix range: the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            return "unsatisfiable"
        return (max(0, size - n), size - 1)
    start = int(first)
    end = size - 1 if last == "" else min(int(last), size - 1)
    if last != "" and int(last) < start:
        return None  # syntactically invalid: ignore
    if start >= size:
        return "unsatisfiable"
    return (start, end)


class RangeHTTPServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, root, token=None, quiet=True, faults=""):
        for spec in (faults.values() if isinstance(faults, dict) else [faults]):
            parse_faults(spec)
        self.default_faults = faults
        self.root = os.path.realpath(root)
        self.token = token
        self.quiet = quiet
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.fired = set()
        self.counts = {}
        self.requests = []
        super().__init__(addr, RangeRequestHandler)

    def close(self):
        """Stop serving, wake stalled responses, release the port."""
        self.stop_event.set()
        self.shutdown()
        self.server_close()

    def handle_error(self, request, client_address):
        # a client that hung up (or reset) between requests is not the server's error
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, socket.timeout)):
            return
        super().handle_error(request, client_address)

    def claim_once(self, key):
        """True the first time key is claimed (a -once fault fires), False after."""
        with self.lock:
            if key in self.fired:
                return False
            self.fired.add(key)
            return True

    def count(self, key):
        """How many times key was counted, this time included."""
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            return self.counts[key]

    def record(self, entry):
        with self.lock:
            self.requests.append(entry)


class _Dropped(Exception):
    pass


class _DripWriter:
    """wfile that sends one byte at a time, `seconds` apart (the drip fault)."""

    def __init__(self, raw, seconds, stop):
        self.raw, self.seconds, self.stop = raw, seconds, stop
        self.closed = False

    def write(self, data):
        for i in range(len(data)):
            self.raw.write(bytes(data[i:i + 1]))
            if self.stop.wait(self.seconds):
                raise _Dropped()
        return len(data)

    def flush(self):
        pass

    def close(self):
        self.closed = True


class RangeRequestHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dankfleet-range-http/1"

    def log_message(self, fmt, *args):
        if not self.server.quiet:
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    _entry = None
    _was_reset = False

    def send_response(self, code, message=None):
        # The status is logged as it goes out, so it is in the log before the
        # client can read the answer (None: the request got no status line).
        if self._entry is not None:
            self._entry["status"] = code
        super().send_response(code, message)

    def do_HEAD(self):
        self._serve(head=True)

    def do_GET(self):
        self._serve(head=False)

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        if length:
            self.rfile.read(min(length, 1 << 20))
        self._serve(head=False)

    def _reset(self):
        """Close with an RST (SO_LINGER 0) instead of a FIN: the client sees ECONNRESET."""
        try:
            self.wfile.flush()
        except OSError:
            pass
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for f in (self.wfile, self.rfile):
            try:
                f.close()
            except OSError:
                pass
        self.connection.close()
        self._was_reset = True
        raise _Dropped()

    # -- helpers ---------------------------------------------------------
    def _plain(self, code, text, extra=None):
        body = (text + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return code

    def _resolve(self, rel):
        path = os.path.realpath(os.path.join(self.server.root, rel.lstrip("/")))
        if path != self.server.root and not path.startswith(self.server.root + os.sep):
            return None
        return path

    def _serve(self, head):
        entry = {"method": self.command, "path": self.path, "fault": "",
                 "range": self.headers.get("Range"), "status": None, "sent": 0,
                 "auth": "Authorization" in self.headers}
        # Logged on arrival, before any byte of the answer goes out: a client
        # that has seen the answer is sure to find its request in the log
        # (recording it when the handler ends raced a client that hung up).
        self._entry = entry
        self.server.record(entry)
        wfile = self.wfile
        try:
            self._answer(head, entry)
        except (_Dropped, BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True
        finally:
            # after a reset the streams are closed: the handler's own flush and close then touch stand-ins
            self.wfile = io.BytesIO() if self._was_reset else wfile
            if self._was_reset:
                self.rfile = io.BytesIO()

    def _answer(self, head, entry):
        split = urllib.parse.urlsplit(self.path)
        raw = urllib.parse.unquote(split.path)
        faults = []
        spec = None
        if raw.startswith(FAULT_PREFIX):
            spec, _, rest = raw[len(FAULT_PREFIX):].partition("/")
            raw = "/" + rest
        elif isinstance(self.server.default_faults, dict):
            spec = self.server.default_faults.get(raw)
        elif self.server.default_faults:
            spec = self.server.default_faults
        if spec:
            entry["fault"] = spec
            try:
                faults = parse_faults(spec)
            except FaultSpecError as e:
                return self._plain(400, str(e))
        for f in faults:
            if f["kind"] == "drip":
                self.wfile = _DripWriter(self.wfile, f["seconds"], self.server.stop_event)
        # A "-once" fault fires only on the first request for that fault+file
        # (+query: a test can add ?anything to get a fresh "once").
        once_key = raw + ("?" + split.query if split.query else "")
        faults = [f for f in faults
                  if not f["once"] or self.server.claim_once((f["spec"], once_key))]

        if self.server.token is not None:
            want = "Bearer " + self.server.token
            if self.headers.get("Authorization", "") != want:
                return self._plain(401, "bearer token required",
                                   {"WWW-Authenticate": 'Bearer realm="models"'})

        for f in faults:
            if f["kind"] == "redirect":
                host = self.server.server_address[0]
                loc = "http://%s:%d%s" % (host, f["port"], urllib.parse.quote(raw))
                return self._plain(302, "moved", {"Location": loc})
            if f["kind"] == "redirect-to":
                host = "%s:%d" % self.server.server_address[:2]
                loc = ("file:///etc/passwd" if f["scheme"] == "file"
                       else "%s://%s%s" % (f["scheme"], host, urllib.parse.quote(raw)))
                return self._plain(302, "moved", {"Location": loc})
            if f["kind"] == "redirect-host":
                loc = "http://%s:%d%s" % (f["host"], self.server.server_address[1], urllib.parse.quote(raw))
                return self._plain(302, "moved", {"Location": loc})
            if f["kind"] == "redirect-chain" and f["n"] > 0:
                rest = [g["spec"] for g in faults if g is not f]
                nxt = ",".join(["redirect-chain-%d" % (f["n"] - 1)] + rest)
                return self._plain(302, "moved", {"Location": "%s%s%s" % (FAULT_PREFIX, nxt, urllib.parse.quote(raw))})
            if f["kind"] == "endless":
                return self._endless(f["chunked"], entry)
            if f["kind"] == "status":
                self.close_connection = True
                return self._plain(f["code"], "injected fault %s" % f["spec"],
                                   {"Connection": "close"})

        path = self._resolve(raw)
        if path is None or not os.path.isfile(path):
            return self._plain(404, "not found: %s" % raw)

        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            etag = '"%x-%x"' % (size, st.st_mtime_ns)
            kinds = {f["kind"]: f for f in faults}
            rng = parse_range(self.headers.get("Range"), size)
            if_range = self.headers.get("If-Range")
            if if_range is not None and if_range.strip() != etag:
                rng = None
            if "ignore-range" in kinds:
                rng = None
            if "range-from-0" in kinds and rng not in (None, "unsatisfiable"):
                rng = (0, size - 1)
            if "drop-grow" in kinds:
                k = self.server.count((kinds["drop-grow"]["spec"], once_key))
                kinds["drop"] = {"n": kinds["drop-grow"]["n"] * k}
            claimed = kinds["lie-total"]["n"] if "lie-total" in kinds else size
            if rng == "unsatisfiable":
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return 416
            if rng is None:
                code, start, end = 200, 0, size - 1
            else:
                code, (start, end) = 206, rng
            length = end - start + 1 if size else 0
            self.send_response(code)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", etag)
            self.send_header("Last-Modified",
                             email.utils.formatdate(st.st_mtime, usegmt=True))
            if "bad-length" in kinds:
                self.send_header("Content-Length", "12abc")
            elif "length" in kinds:
                self.send_header("Content-Length", str(kinds["length"]["n"]))
            elif "lie-total" in kinds and code == 200:
                self.send_header("Content-Length", str(claimed))
            else:
                self.send_header("Content-Length", str(length))
            if code == 206:
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, claimed))
            self.end_headers()
            if head or length == 0:
                return code
            if not faults:
                sent = self.connection.sendfile(fh, start, length)
                entry["sent"] = sent
                return code
            self._send_faulty(fh, start, length, size, kinds, entry)
            return code

    def _endless(self, chunked, entry):
        """200 and a body that never ends, until the client hangs up or the server stops."""
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        block = b"{" + b" " * 65534 + b"\n"
        while not self.server.stop_event.is_set():
            self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
            entry["sent"] += len(block)
        raise _Dropped()

    def _send_faulty(self, fh, start, length, size, kinds, entry):
        drop = kinds.get("drop")
        if kinds.get("reset") is not None:
            drop = {"n": kinds["reset"]["n"], "reset": True}
        stall = kinds.get("stall")
        rate = kinds.get("rate")
        wrong = kinds.get("wrong-bytes")
        limit = length if drop is None else min(length, drop["n"])
        stall_at = length // 2 if stall else None
        flip = None
        if wrong:
            flip = size // 2 if wrong["offset"] is None else wrong["offset"]
        fh.seek(start)
        sent = 0
        t0 = time.monotonic()
        while sent < limit:
            n = min(_CHUNK, limit - sent)
            if stall_at is not None and sent < stall_at:
                n = min(n, stall_at - sent)
            if rate:
                n = min(n, max(1, rate["n"] // 20))
            buf = fh.read(n)
            if not buf:
                break
            if flip is not None and start + sent <= flip < start + sent + len(buf):
                b = bytearray(buf)
                b[flip - start - sent] ^= 0xFF
                buf = bytes(b)
            self.wfile.write(buf)
            sent += len(buf)
            entry["sent"] = sent
            if stall_at is not None and sent == stall_at:
                stall_at = None
                if self.server.stop_event.wait(stall["seconds"]):
                    raise _Dropped()
            if rate:
                ahead = sent / rate["n"] - (time.monotonic() - t0)
                if ahead > 0 and self.server.stop_event.wait(ahead):
                    raise _Dropped()
        if sent < length and drop is not None and drop.get("reset"):
            self._reset()
        if sent < length:
            # drop-after: the client was promised Content-Length bytes; cut it off.
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            raise _Dropped()


def serve(root, port=0, token=None, host="127.0.0.1", quiet=True, faults=""):
    """Start a server in a daemon thread; return (server, port). Stop: server.close().

    faults: applied to every path without a /_fault/ prefix (a whole misbehaving server), or
    {path: faults} for some paths only ({"/v1/chat/completions": "drip-500"})."""
    server = RangeHTTPServer((host, port), root, token=token, quiet=quiet, faults=faults)
    t = threading.Thread(target=server.serve_forever, name="range-http", daemon=True)
    t.start()
    return server, server.server_address[1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="directory to serve")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    p.add_argument("--bind", default="127.0.0.1", help="address (default 127.0.0.1)")
    p.add_argument("--token", help="require this bearer token")
    p.add_argument("--token-file", help="read the bearer token from this file")
    p.add_argument("--quiet", action="store_true", help="no per-request log on stderr")
    a = p.parse_args(argv)
    if not os.path.isdir(a.root):
        p.error("--root %s is not a directory" % a.root)
    token = a.token or os.environ.get("RANGE_HTTP_TOKEN") or None
    if a.token_file:
        with open(a.token_file) as f:
            token = f.read().strip()
    server = RangeHTTPServer((a.bind, a.port), a.root, token=token, quiet=a.quiet)
    print("LISTENING %d" % server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop_event.set()
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
