# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one HTTP client, stdlib only: every request a module makes to a peer goes through it.

Threat model: the peer (a llama-server, a model mirror, a CDN, whatever a redirect names) controls every
byte it sends and when it sends it; the request runs as root on the target. So:

* **One deadline per request**: connect, the request, the status line, the headers and (unless the caller
  releases it, as the fetch does for a multi-GB body it polices itself) the body all end within
  ``timeout`` seconds together - a peer dripping a byte every 2 s cannot hold a request open, however
  short each read. ``idle_timeout`` bounds each single read as well.
* **A size cap per answer** (:meth:`Response.read_capped`): an endless body is refused at ``max_bytes``.
* **A redirect policy**, applied to the url itself and to every hop: http or https only, a host, no
  credentials in the URL, no https -> http downgrade, never a link-local address (169.254.0.0/16,
  fe80::/10: cloud metadata services), and no move from a public host to a loopback or private one (a
  private mirror named directly is fine). A host name is resolved once and the connection goes to the
  address that was checked, so DNS cannot answer differently between the check and the connect.
* **Secrets** (bearer token, API key) are checked before they go into a header - surrounding whitespace
  or a control character is refused by name, never echoed - sent only while the request stays on the
  origin the caller named, and scrubbed from every message this module makes.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

import base64
import http.client
import io
import ipaddress
import socket
import time
import urllib.parse
import urllib.request

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
MAX_REDIRECTS = 10
ALLOWED_SCHEMES = ('http', 'https')
REDIRECT_CODES = (301, 302, 303, 307, 308)
SCRUBBED = '********'
# What the refusals call an address class (link-local and multicast are never connected to).
REFUSED_CLASSES = {
    'link-local': 'a link-local address (169.254.0.0/16 or fe80::/10, where cloud metadata services answer)',
    'multicast': 'a multicast address',
}
_PRIVATE = ('loopback', 'private')


class HttpError(Exception):
    """A request that did not get a usable answer; the message names the cause and never a secret."""


class PolicyRefused(HttpError):
    """The url or a redirect hop breaks the policy: nothing was sent there."""


class DeadlineExceeded(HttpError):
    """The peer did not finish its answer within the request's deadline."""


class AnswerTooLarge(HttpError):
    """The answer's body is larger than the cap."""


class SecretRefused(HttpError):
    """A secret that cannot go into a header as given (its value is never in the message)."""


def check_secret(value, name):
    """The secret unchanged, or None when empty; SecretRefused naming ``name`` (never the value)."""
    if value is None or value == '':
        return None
    if not isinstance(value, str):
        raise SecretRefused('%s must be a string (its value is not shown)' % name)
    if value != value.strip():
        raise SecretRefused("%s has whitespace around it (a trailing newline is what a YAML '|' block leaves): "
                            "give it without (a '>-' block or '| trim'); its value is not shown" % name)
    if any(ord(c) < 0x20 or ord(c) == 0x7f or ord(c) > 0xff for c in value):
        raise SecretRefused('%s holds a control character or one an HTTP header cannot carry: give the bare '
                            'token; its value is not shown' % name)
    return value


def redact(url):
    """scheme://host[:port]/path only: userinfo, signed query strings and fragments stay out of messages."""
    try:
        p = urllib.parse.urlsplit(url)
        host = p.hostname or ''
        if ':' in host:
            host = '[%s]' % host
        port = p.port
    except ValueError:
        return '(unparsable url)'
    if port:
        host = '%s:%d' % (host, port)
    return urllib.parse.urlunsplit((p.scheme, host, p.path, '', ''))


def url_credentials(url):
    """The userinfo parts of url (what a module must add to no_log_values), [] when it has none."""
    try:
        p = urllib.parse.urlsplit(url)
    except ValueError:
        return []
    if '@' not in p.netloc:
        return []
    userinfo = p.netloc.rpartition('@')[0]
    return [s for s in (userinfo, p.password, urllib.parse.unquote(p.password or '')) if s]


def url_problem(url, what='url'):
    """Why url may not be requested at all (None when it may): http(s), a host, a valid port, no credentials."""
    if not isinstance(url, str) or not url:
        return '%s is empty' % what
    try:
        p = urllib.parse.urlsplit(url)
        p.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return '%r is not a valid URL (%s)' % (redact(url), exc)
    scheme = p.scheme.lower()
    if '@' in p.netloc:
        return ('%r carries credentials (user:password@ before the host), which would be logged with the task: '
                'refused; drop them from the URL and pass the secret in the no_log token/api_key option'
                % redact(url))
    if scheme not in ALLOWED_SCHEMES:
        return "the scheme of %r is %r; only http:// and https:// are fetched" % (redact(url), scheme or '')
    if not p.hostname:
        return '%r names no host' % redact(url)
    if any(ord(c) < 0x21 or ord(c) == 0x7f for c in url):
        return '%r holds whitespace or a control character' % redact(url)
    return None


def address_class(address):
    """'link-local', 'multicast', 'loopback', 'private' or 'public' for one IP address (text or object)."""
    ip = address if not isinstance(address, str) else ipaddress.ip_address(address.split('%')[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_link_local:
        return 'link-local'
    if ip.is_multicast:
        return 'multicast'
    if ip.is_loopback or ip.is_unspecified:
        return 'loopback'
    if ip.is_global:
        return 'public'
    return 'private'


def host_class(classes):
    """The class of a host from the classes of its addresses: the most restricted one wins."""
    for name in ('link-local', 'multicast', 'loopback', 'private'):
        if name in classes:
            return name
    return 'public'


def resolve(host, port):
    """[(family, sockaddr)] of host (what the connection may use); OSError when it does not resolve."""
    try:
        ip = ipaddress.ip_address(host.split('%')[0])
    except ValueError:
        ip = None
    if ip is not None and '%' not in host:
        family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        return [(family, (host, port) if ip.version == 4 else (host, port, 0, 0))]
    out = []
    for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr) not in out:
            out.append((family, sockaddr))
    return out


def redirect_problem(previous_class, target_class, previous_url, target_url):
    """Why a hop from previous to target is refused (None when it may be followed)."""
    if target_class in REFUSED_CLASSES:
        return '%s is %s' % (redact(target_url), REFUSED_CLASSES[target_class])
    if previous_class == 'public' and target_class in _PRIVATE:
        return ('it moves from the public host of %s to the %s address of %s (a peer on the internet must not '
                'steer a request into this host or its network; name a private mirror in the url directly)'
                % (redact(previous_url), target_class, redact(target_url)))
    if urllib.parse.urlsplit(previous_url).scheme.lower() == 'https' and \
            urllib.parse.urlsplit(target_url).scheme.lower() == 'http':
        return '%r would downgrade https to plain http' % redact(target_url)
    return None


class Deadline(object):
    """Seconds left until a monotonic deadline; None: no overall deadline (only the idle timeout)."""

    def __init__(self, seconds, clock=time.monotonic):
        self.seconds = seconds
        self._clock = clock
        self.at = None if seconds is None else clock() + float(seconds)

    def left(self):
        return None if self.at is None else self.at - self._clock()

    def release(self):
        self.at = None


class _DeadlineRaw(io.RawIOBase):
    """The receiving side of a _DeadlineSocket, as http.client reads it (sock.makefile('rb'))."""

    def __init__(self, owner):
        io.RawIOBase.__init__(self)
        self._owner = owner

    def readable(self):
        return True

    def readinto(self, view):
        return self._owner.recv_into(view)

    def close(self):
        if not self.closed:
            io.RawIOBase.close(self)
            self._owner._unref()


class _DeadlineSocket(object):
    """A connected socket whose every send and recv ends by the request's deadline and the idle timeout."""

    def __init__(self, sock, deadline, idle_timeout, what):
        self.sock = sock
        self.deadline = deadline
        self.idle_timeout = idle_timeout
        self.what = what
        self._refs = 1

    def _arm(self):
        left = self.deadline.left()
        if left is not None and left <= 0:
            raise DeadlineExceeded('%s: no complete answer within %s s (the peer is too slow, or sends a byte at a '
                                   'time); nothing from it was used' % (self.what, _seconds(self.deadline.seconds)))
        timeout = self.idle_timeout if left is None else (left if self.idle_timeout is None
                                                          else min(left, self.idle_timeout))
        self.sock.settimeout(timeout)
        return left

    def _timed_out(self, left):
        if left is not None and self.deadline.left() is not None and self.deadline.left() <= 0:
            return DeadlineExceeded('%s: no complete answer within %s s (the peer is too slow, or sends a byte at '
                                    'a time); nothing from it was used' % (self.what, _seconds(self.deadline.seconds)))
        return socket.timeout('%s: no byte for %s s' % (self.what, _seconds(self.idle_timeout)))

    def recv_into(self, view):
        left = self._arm()
        try:
            return self.sock.recv_into(view)
        except socket.timeout:
            raise self._timed_out(left)

    def sendall(self, data):
        left = self._arm()
        try:
            return self.sock.sendall(data)
        except socket.timeout:
            raise self._timed_out(left)

    def makefile(self, mode='rb', buffering=-1, **_):
        if 'r' not in mode or 'w' in mode:
            raise ValueError('only reading is wrapped')
        self._refs += 1
        return io.BufferedReader(_DeadlineRaw(self), io.DEFAULT_BUFFER_SIZE if buffering in (-1, None, 0)
                                 else buffering)

    def _unref(self):
        self._refs -= 1
        if self._refs <= 0:
            self.sock.close()

    def close(self):
        self._unref()

    def settimeout(self, _value):
        pass  # the deadline decides; http.client never needs to change it

    def setsockopt(self, *args):
        return self.sock.setsockopt(*args)

    def fileno(self):
        return self.sock.fileno()


def _seconds(value):
    return '%g' % value if value is not None else 'unlimited'


class _Connection(http.client.HTTPConnection):
    """http.client's request writer and answer parser over a socket this module connected and polices."""

    def __init__(self, sock):
        http.client.HTTPConnection.__init__(self, 'placeholder')
        self.sock = sock

    def connect(self):
        raise http.client.NotConnected('the connection is made by http_client.Client')


class Response(object):
    """An answer: ``status``, ``reason``, ``headers``, ``url`` (after redirects); read it, then close()."""

    def __init__(self, conn, raw, url, deadline, what):
        self._conn = conn
        self.raw = raw          # the http.client.HTTPResponse: fp, length, chunked, read1 ...
        self.status = raw.status
        self.reason = raw.reason
        self.headers = raw.headers
        self.url = url
        self.deadline = deadline
        self.what = what

    def release_deadline(self):
        """From now on only the idle timeout bounds each read (the caller polices the body itself)."""
        self.deadline.release()

    def read_capped(self, max_bytes=DEFAULT_MAX_BYTES):
        """The whole body, or AnswerTooLarge past max_bytes (never more than max_bytes + 1 in memory)."""
        declared = self.raw.length
        if declared is not None and declared > max_bytes:
            raise AnswerTooLarge('%s: the answer declares %d bytes, more than the %d this request accepts; '
                                 'refused unread' % (self.what, declared, max_bytes))
        data = self.raw.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise AnswerTooLarge('%s: the answer is longer than the %d bytes this request accepts; refused'
                                 % (self.what, max_bytes))
        if self.raw.length:     # http.client's read(amt) returns a short body without a word
            raise HttpError('%s: the answer broke off after %d of the %d bytes its Content-Length declared; '
                            'nothing from it was used' % (self.what, len(data), declared))
        return data

    def close(self):
        try:
            self.raw.close()
        finally:
            self._conn.close()


class Client(object):
    """Requests under the policy above. ``secret`` goes out as ``Authorization: Bearer <secret>``.

    proxies: True reads http_proxy / https_proxy / no_proxy from the environment (the fetch); False
    (the endpoint client) always connects directly.
    """

    def __init__(self, secret=None, secret_name='api_key', proxies=False, verify_tls=True,
                 user_agent='dankfleet.llm', max_redirects=MAX_REDIRECTS, resolver=resolve, classify=None):
        self.secret = check_secret(secret, secret_name)
        self.proxies = urllib.request.getproxies() if proxies else {}
        self.verify_tls = verify_tls
        self.user_agent = user_agent
        self.max_redirects = max_redirects
        self.resolver = resolver
        self.classify = classify or (lambda _host, addresses: host_class([address_class(a[1][0]) for a in addresses]))
        self._tls = None

    # -- messages --------------------------------------------------------
    def scrub(self, text):
        text = str(text)
        if self.secret:
            text = text.replace(self.secret, SCRUBBED)
        return text

    def _error(self, cls, text):
        return cls(self.scrub(text))

    # -- one request -----------------------------------------------------
    def request(self, method, url, body=None, headers=None, timeout=30.0, idle_timeout=None,
                max_bytes=DEFAULT_MAX_BYTES):
        """(status, headers, body bytes) of one request, redirects followed; HttpError / OSError otherwise."""
        resp = self.open(method, url, body=body, headers=headers, timeout=timeout, idle_timeout=idle_timeout)
        try:
            return resp.status, resp.headers, self._guard(resp.what, resp.read_capped, max_bytes)
        finally:
            resp.close()

    def open(self, method, url, body=None, headers=None, timeout=30.0, idle_timeout=None):
        """The Response after redirects (any status, 4xx and 5xx included); its body not read yet.

        timeout: the request's overall deadline in seconds (connect to the last header, and the body until
        Response.release_deadline()); idle_timeout: at most this long for any single read or send.
        """
        try:
            return self._open(method, url, body, headers, timeout, idle_timeout)
        except HttpError as exc:
            # a redirect's path (the peer's choice) is in some messages: one pass scrubs them all
            raise exc.__class__(self.scrub(exc))

    def _open(self, method, url, body, headers, timeout, idle_timeout):
        deadline = Deadline(timeout)
        origin = _origin(url)
        problem = url_problem(url)
        if problem:
            raise self._error(PolicyRefused, problem)
        previous = previous_class = last_status = None
        all_same_origin = True
        current, body_now, method_now = url, body, method
        for hop in range(self.max_redirects + 1):
            what = '%s %s' % (method_now, redact(current))
            if previous is not None:
                problem = url_problem(current)
                if problem:
                    raise self._error(PolicyRefused, 'HTTP %d from %s redirects to %s: refused, %s' % (
                        last_status, redact(previous), redact(current), problem))
            target_class, addresses, proxy = self._target(current)
            if previous is None:
                if target_class in REFUSED_CLASSES:
                    raise self._error(PolicyRefused, '%s is %s: refused' % (redact(current),
                                                                            REFUSED_CLASSES[target_class]))
            else:
                problem = redirect_problem(previous_class, target_class, previous, current)
                if problem:
                    raise self._error(PolicyRefused, 'HTTP %d from %s redirects to %s: refused, %s' % (
                        last_status, redact(previous), redact(current), problem))
            send = dict(headers or {})
            send.setdefault('User-Agent', self.user_agent)
            if self.secret and all_same_origin:
                send['Authorization'] = 'Bearer %s' % self.secret
            resp = self._exchange(method_now, current, body_now, send, deadline, idle_timeout, addresses, proxy,
                                  what)
            location = resp.headers.get('Location') if resp.status in REDIRECT_CODES else None
            if not location:
                return resp
            last_status = resp.status
            resp.close()
            try:
                target = urllib.parse.urljoin(current, location.strip())
            except ValueError:
                raise self._error(PolicyRefused, 'HTTP %d from %s redirects to an unparsable Location: refused'
                                  % (last_status, redact(current)))
            all_same_origin = all_same_origin and _origin(target) == origin
            if last_status == 303 or (last_status in (301, 302) and method_now == 'POST'):
                method_now, body_now = 'GET', None
            previous, previous_class, current = current, target_class, target
        raise self._error(PolicyRefused, '%s: more than %d redirects; refused' % (redact(url), self.max_redirects))

    def _target(self, url):
        """(host class, [(family, sockaddr)] to connect to, proxy url or None) for url."""
        p = urllib.parse.urlsplit(url)
        scheme = p.scheme.lower()
        port = p.port or (443 if scheme == 'https' else 80)
        proxy = self._proxy_for(scheme, p.hostname)
        try:
            literal_class = address_class(urllib.parse.unquote(p.hostname))
        except ValueError:
            literal_class = None
        if literal_class in REFUSED_CLASSES:
            return literal_class, [], proxy     # refused by the caller before anything is resolved or sent
        try:
            addresses = self.resolver(p.hostname, port)
        except (OSError, UnicodeError) as exc:
            if proxy is None:
                raise self._error(HttpError, 'cannot resolve the host of %s: %s' % (redact(url), exc))
            addresses = []      # only the proxy can resolve it: the literal-address checks still hold
        if not addresses and proxy is None:
            raise self._error(HttpError, 'the host of %s resolves to no IP address' % redact(url))
        try:
            literal = [(0, (str(ipaddress.ip_address(p.hostname.split('%')[0])), port))]
        except ValueError:
            literal = []
        return self.classify(p.hostname, addresses or literal) if (addresses or literal) else 'public', \
            addresses, proxy

    def _proxy_for(self, scheme, host):
        proxy = self.proxies.get(scheme)
        if not proxy:
            return None
        try:
            if urllib.request.proxy_bypass(host):
                return None
        except Exception:  # pylint: disable=broad-except - a malformed no_proxy: go through the proxy
            pass
        if '://' not in proxy:
            proxy = 'http://' + proxy
        return proxy

    def _exchange(self, method, url, body, headers, deadline, idle_timeout, addresses, proxy, what):
        p = urllib.parse.urlsplit(url)
        scheme = p.scheme.lower()
        port = p.port or (443 if scheme == 'https' else 80)
        bracketed = p.hostname if ':' not in p.hostname else '[%s]' % p.hostname
        host_header = '%s:%d' % (bracketed, p.port) if p.port else bracketed
        path = urllib.parse.urlunsplit(('', '', p.path or '/', p.query, ''))
        proxy_auth = None
        if proxy is not None:
            pp = urllib.parse.urlsplit(proxy)
            if pp.username is not None:
                proxy_auth = 'Basic ' + base64.b64encode(('%s:%s' % (urllib.parse.unquote(pp.username),
                                                                     urllib.parse.unquote(pp.password or '')))
                                                         .encode('latin-1')).decode('ascii')
            connect_to = resolve(pp.hostname, pp.port or 80)
        else:
            connect_to = addresses
        raw = self._connect(connect_to, deadline, idle_timeout, what)
        try:
            sock = _DeadlineSocket(raw, deadline, idle_timeout, what)
            if proxy is not None and scheme == 'https':
                _tunnel(sock, '%s:%d' % (bracketed, port), proxy_auth, self.user_agent)
            elif proxy is not None:
                path = urllib.parse.urlunsplit((scheme, host_header, p.path or '/', p.query, ''))
                if proxy_auth:
                    headers['Proxy-Authorization'] = proxy_auth
            if scheme == 'https':
                raw = self._wrap_tls(raw, p.hostname, deadline, idle_timeout, what)
                sock = _DeadlineSocket(raw, deadline, idle_timeout, what)
            conn = _Connection(sock)
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader('Host', host_header)
            if 'Accept-Encoding' not in headers:
                conn.putheader('Accept-Encoding', 'identity')
            for name, value in headers.items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader('Content-Length', str(len(body)))
            conn.endheaders(body)
            answer = conn.getresponse()
        except HttpError:
            raw.close()
            raise
        except socket.timeout as exc:
            raw.close()
            raise self._error(DeadlineExceeded, '%s: %s' % (what, exc) if what not in str(exc) else exc)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raw.close()
            raise self._error(HttpError, '%s: %s' % (what, _describe(exc)))
        return Response(conn, answer, url, deadline, what)

    def _connect(self, addresses, deadline, idle_timeout, what):
        last = None
        for family, sockaddr in addresses:
            left = deadline.left()
            if left is not None and left <= 0:
                break
            timeout = left if idle_timeout is None else (idle_timeout if left is None else min(left, idle_timeout))
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(sockaddr)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError as exc:
                sock.close()
                last = exc
        if last is None:
            raise self._error(DeadlineExceeded, '%s: no connection within %s s' % (what, _seconds(deadline.seconds)))
        if isinstance(last, socket.timeout):
            raise self._error(DeadlineExceeded, '%s: connect timed out' % what)
        raise self._error(HttpError, '%s: cannot connect: %s' % (what, _describe(last)))

    def _wrap_tls(self, raw, hostname, deadline, idle_timeout, what):
        import ssl  # imported here: only https pays for the TLS stack and the CA store
        if self._tls is None:
            self._tls = ssl.create_default_context()
            if not self.verify_tls:
                self._tls.check_hostname = False
                self._tls.verify_mode = ssl.CERT_NONE
        left = deadline.left()
        raw.settimeout(left if idle_timeout is None else (idle_timeout if left is None else min(left, idle_timeout)))
        try:
            tls = self._tls.wrap_socket(raw, server_hostname=hostname)
        except ssl.SSLError as exc:
            raw.close()
            raise self._error(HttpError, '%s: TLS failed: %s' % (what, exc))
        return tls

    def _guard(self, what, read, *args):
        try:
            return read(*args)
        except HttpError as exc:
            raise exc.__class__(self.scrub(exc))
        except socket.timeout as exc:
            raise self._error(DeadlineExceeded, '%s: %s' % (what, exc))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise self._error(HttpError, '%s: the answer broke off: %s' % (what, _describe(exc)))


def _tunnel(sock, authority, proxy_auth, user_agent):
    """CONNECT authority through the proxy on sock; HttpError unless it answers 2xx."""
    lines = ['CONNECT %s HTTP/1.1' % authority, 'Host: %s' % authority, 'User-Agent: %s' % user_agent]
    if proxy_auth:
        lines.append('Proxy-Authorization: %s' % proxy_auth)
    sock.sendall(('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1'))
    head = b''
    one = bytearray(1)
    while not head.endswith(b'\r\n\r\n'):
        if not sock.recv_into(one):
            raise HttpError('the proxy closed the connection during CONNECT %s' % authority)
        head += bytes(one)
        if len(head) > 65536:
            raise HttpError('the proxy answered CONNECT %s with more than 64 KiB of headers' % authority)
    status = head.split(b'\r\n', 1)[0].decode('latin-1', 'replace')
    parts = status.split(None, 2)
    if len(parts) < 2 or not parts[1].startswith('2'):
        raise HttpError('the proxy refused CONNECT %s: %s' % (authority, status[:200]))


def _origin(url):
    try:
        p = urllib.parse.urlsplit(url)
        return (p.scheme.lower(), (p.hostname or '').lower(), p.port or (443 if p.scheme.lower() == 'https' else 80))
    except ValueError:
        return None


def _describe(exc):
    text = str(exc)
    if isinstance(exc, http.client.IncompleteRead):
        return 'the peer closed after %d bytes, %s more were expected' % (len(exc.partial), exc.expected)
    if len(text) > 300:
        text = text[:300] + '...'
    return text or exc.__class__.__name__
