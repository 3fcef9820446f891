"""FAULT INJECTION for molecule case (k): the llama-server of the ``-leaky`` release.

A real b11434 CPU build keeps no state between requests on a slot, and no server option makes it answer a greedy
prompt differently after another conversation (the seed is per request, temperature 0 is argmax, the prompt cache
and cache reuse restore the same tokens' state). The bug the isolation check is for (a recurrent state that leaks,
llama.cpp #29092 on HIP) cannot run here, so this stands in for it: the real llama-server (bin/llama-server.real,
every flag the launcher gave it, on LISTEN_PORT + 1000) behind a small proxy on the launcher's port that passes
every request and answer through unchanged, except one: a greedy chat answer (temperature 0, pinned with id_slot)
that follows a multi-turn conversation on the same slot gets that conversation's last words in front of its
content - the previous conversation's state leaking into the next answer. The process's argv is the launcher's
(the settings check reads it), the real server's log goes to the unit's journal, and the unit stops both.
"""

import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading

CHAT = '/v1/chat/completions'
HOP = ('connection', 'keep-alive', 'transfer-encoding', 'content-length', 'proxy-connection', 'upgrade', 'te')


def _flag(args, name, default):
    return args[args.index(name) + 1] if name in args[:-1] else default


class Leak:
    """Per slot: the messages of the last chat request pinned to it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.last = {}

    def inject(self, request, answer):
        """The answer to send: ``answer`` with the previous conversation's last words in front of its content when
        this is a greedy request on a slot whose previous request was another multi-turn conversation."""
        try:
            req = json.loads(request.decode('utf-8'))
            slot, messages = req.get('id_slot'), req.get('messages')
        except (ValueError, AttributeError):
            return answer
        if not isinstance(slot, int) or not isinstance(messages, list) or req.get('stream') or req.get('tools'):
            return answer
        with self.lock:
            prev, self.last[slot] = self.last.get(slot), messages
        if req.get('temperature') != 0 or not prev or len(prev) < 2 or prev == messages:
            return answer
        words = str(prev[-1].get('content') if isinstance(prev[-1], dict) else prev[-1]).split()[-3:]
        try:
            body = json.loads(answer.decode('utf-8'))
            msg = body['choices'][0]['message']
            if isinstance(msg.get('content'), str) and msg['content']:
                msg['content'] = '%s %s' % (' '.join(words), msg['content'])
                return json.dumps(body).encode('utf-8')
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            pass
        return answer


def handler(upstream_host, upstream_port, leak):
    class Proxy(http.server.BaseHTTPRequestHandler):
        protocol_version = 'HTTP/1.0'

        def log_message(self, *args):
            pass

        def _any(self):
            body = self.rfile.read(int(self.headers.get('Content-Length') or 0))
            headers = dict((k, v) for k, v in self.headers.items() if k.lower() not in HOP + ('host',))
            conn = http.client.HTTPConnection(upstream_host, upstream_port, timeout=900)
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
            except OSError as exc:
                conn.close()
                msg = json.dumps({'error': {'code': 503, 'message': 'upstream not ready: %s' % exc}}).encode()
                self.send_response(503)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(msg)))
                self.end_headers()
                self.wfile.write(msg)
                return
            try:
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP:
                        self.send_header(k, v)
                if self.command == 'POST' and self.path.split('?')[0] == CHAT and resp.status == 200 \
                        and 'text/event-stream' not in (resp.getheader('Content-Type') or ''):
                    data = leak.inject(body, resp.read())
                    self.send_header('Content-Length', str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.end_headers()          # HTTP/1.0: the body ends where the connection closes (SSE streams through)
                while True:
                    chunk = resp.read1(65536) if hasattr(resp, 'read1') else resp.read(65536)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
            finally:
                conn.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_OPTIONS = do_HEAD = _any

    return Proxy


def main(argv):
    real = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'llama-server.real')
    args = list(argv)
    host, port = _flag(args, '--host', '127.0.0.1'), int(_flag(args, '--port', '8080'))
    upstream = port + 1000
    if '--port' in args[:-1]:
        args[args.index('--port') + 1] = str(upstream)
    else:
        args += ['--port', str(upstream)]
    child = subprocess.Popen([real] + args)

    def stop(signum, frame):
        # the main thread's child.wait() returns once the real server is gone (no wait here: its lock is held)
        try:
            os.kill(child.pid, signal.SIGTERM)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server = http.server.ThreadingHTTPServer((host, port), handler('127.0.0.1', upstream, Leak()))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    rc = child.wait()
    server.shutdown()
    return rc


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
