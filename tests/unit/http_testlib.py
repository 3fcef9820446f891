"""A real socket for a test's stand-in: a request handler class served on 127.0.0.1 at a free port, or a bare
listener with what `ss` says of it."""
import contextlib
import socket
import subprocess
import threading
from http.server import ThreadingHTTPServer


class Serving(object):
    """``with Serving(Handler) as srv:`` serves Handler at http://127.0.0.1:<srv.port> in a daemon thread; the
    server stops and its port is closed on leaving the block. Subclasses build their Handler in __init__."""

    def __init__(self, handler, poll_interval=0.5):
        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': poll_interval},
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def listening_ss():
    """``with listening_ss() as (port, out):`` a socket of this process listens on 127.0.0.1:<port> while the block
    runs; ``out`` is what the real ``ss -Hltnp`` printed with it listening (the caller skips where ss is absent)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        yield port, subprocess.run(['ss', '-Hltnp'], capture_output=True, text=True, check=True).stdout
