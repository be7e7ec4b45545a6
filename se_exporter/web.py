"""HTTP endpoints: /metrics, the landing page, /-/healthy and /-/ready."""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import html
import logging
import os
import secrets
import socket
import ssl
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

from prometheus_client import CollectorRegistry, make_wsgi_app

from se_exporter.errors import ConfigError
from se_exporter.web_config import TLSServerConfig, WebConfig

log = logging.getLogger(__name__)

REALM = "se-exporter"
HANDSHAKE_TIMEOUT_SECONDS = 10.0  # a client that has not finished the TLS handshake by then is dropped
REQUEST_TIMEOUT_SECONDS = 30.0  # idle time allowed on a connection while reading a request or sending
CERT_RELOAD_CHECK_SECONDS = 1.0  # how often (at most, on new connections) certificate files are checked
_AUTH_CACHE_SIZE = 256
_BCRYPT_MAX_PASSWORD = 72  # bcrypt uses the first 72 bytes, as htpasswd and Go's bcrypt do


def make_app(
    registry: CollectorRegistry, telemetry_path: str, ready: Callable[[], bool], version: str
) -> WSGIApplication:
    metrics_app = make_wsgi_app(registry)  # content negotiation, gzip and name[] filters included
    landing = _landing_page(telemetry_path, version).encode()

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == telemetry_path:
            body: Iterable[bytes] = metrics_app(environ, start_response)
            return body
        if path == "/-/healthy":
            return _text(start_response, "200 OK", "Healthy\n")
        if path == "/-/ready":
            if ready():
                return _text(start_response, "200 OK", "Ready\n")
            return _text(start_response, "503 Service Unavailable", "Not ready: no successful IMDS poll yet\n")
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [landing]
        return _text(start_response, "404 Not Found", "Not found\n")

    return app


def _text(start_response: StartResponse, status: str, body: str) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [body.encode()]


def _landing_page(telemetry_path: str, version: str) -> str:
    path = html.escape(telemetry_path)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Azure Scheduled Events Exporter</title></head>
<body>
<h1>Azure Scheduled Events Exporter</h1>
<p>se-exporter {html.escape(version)}: Azure maintenance events from IMDS as Prometheus metrics.</p>
<ul>
<li><a href="{path}">Metrics</a></li>
<li><a href="/-/healthy">Health</a></li>
<li><a href="/-/ready">Readiness</a> (ready after the first successful IMDS poll)</li>
</ul>
</body></html>
"""


class BasicAuthenticator:
    """Checks ``Authorization: Basic`` against bcrypt hashes, as exporter-toolkit does, with two hardenings.

    - Only successful checks are cached, keyed by an HMAC (per-process random key) of user, hash and
      password: no plaintext password is kept, and failed guesses cannot evict good entries, so a
      scraper with valid credentials pays bcrypt once, not on every scrape.
    - An unknown user is checked against a dummy hash of the highest configured cost, so the answer
      takes as long as for a known user with a wrong password (no user enumeration by timing).

    bcrypt runs one at a time (a lock), so a flood of wrong passwords uses at most one CPU core.
    """

    def __init__(self, users: Mapping[str, str], cache_size: int = _AUTH_CACHE_SIZE) -> None:
        if not users:
            raise ValueError("BasicAuthenticator needs at least one user")
        import bcrypt  # only needed, and only imported, when basic auth is configured

        self._bcrypt = bcrypt
        self._users = {user.encode(): hashed.encode() for user, hashed in users.items()}
        cost = max(int(hashed[4:6]) for hashed in users.values())
        self._dummy = bcrypt.hashpw(secrets.token_urlsafe(32).encode(), bcrypt.gensalt(rounds=cost))
        self._cache_key = secrets.token_bytes(32)
        self._cache: OrderedDict[bytes, None] = OrderedDict()
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()
        self._bcrypt_lock = threading.Lock()

    def authenticate(self, authorization: str | None) -> str | None:
        """The user name if the ``Authorization`` header value holds valid credentials, else None."""
        credentials = _parse_basic(authorization)
        if credentials is None:
            return None
        user, password = credentials
        return user.decode("utf-8", "replace") if self.check(user, password) else None

    def check(self, user: bytes, password: bytes) -> bool:
        hashed = self._users.get(user)
        known = hashed is not None
        if hashed is None:
            hashed = self._dummy
        key = self._key(user, hashed, password)
        if known:
            with self._cache_lock:
                if key in self._cache:
                    self._cache.move_to_end(key)
                    return True
        with self._bcrypt_lock:
            try:
                ok = self._bcrypt.checkpw(password[:_BCRYPT_MAX_PASSWORD], hashed)
            except ValueError:
                ok = False
        if not (ok and known):
            return False
        with self._cache_lock:
            self._cache[key] = None
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return True

    def _key(self, *parts: bytes) -> bytes:
        mac = hmac.new(self._cache_key, digestmod=hashlib.sha256)
        for part in parts:  # length-prefixed: no two (user, hash, password) triples share a message
            mac.update(len(part).to_bytes(8, "big"))
            mac.update(part)
        return mac.digest()


def _parse_basic(authorization: str | None) -> tuple[bytes, bytes] | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip().encode("latin-1"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    user, colon, password = decoded.partition(b":")
    return (user, password) if colon else None


def protect(app: WSGIApplication, config: WebConfig) -> WSGIApplication:
    """``app`` behind the web configuration's basic auth (every path) and extra response headers."""
    if not config.basic_auth_users and not config.headers:
        return app
    auth = BasicAuthenticator(config.basic_auth_users) if config.basic_auth_users else None
    extra = list(config.headers)
    excluded = config.auth_excluded_paths
    challenge = ("WWW-Authenticate", f'Basic realm="{REALM}"')

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], object]:
            present = {name.lower() for name, _ in headers}  # the application's own headers win, as in Go
            return start_response(status, headers + [h for h in extra if h[0].lower() not in present], exc_info)

        if auth is not None and environ.get("PATH_INFO") not in excluded:
            user = auth.authenticate(environ.get("HTTP_AUTHORIZATION"))
            if user is None:
                log.debug("unauthorized request", extra={"client": environ.get("REMOTE_ADDR", "")})
                start("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"), challenge])
                return [b"Unauthorized\n"]
            environ["REMOTE_USER"] = user
        return app(environ, start)

    return guarded


class _TLSAcceptor:
    """Wraps accepted sockets for TLS; the handshake runs later, in the connection's own thread.

    Certificate rotation: on a new connection, at most every ``CERT_RELOAD_CHECK_SECONDS``, the
    certificate, key and client CA files are stat()ed; if one changed the context is rebuilt. A broken
    new set is logged and the previous context kept, so a half-written renewal never takes the port down.
    """

    def __init__(self, config: TLSServerConfig, handshake_timeout: float) -> None:
        self.config = config
        self.handshake_timeout = handshake_timeout
        self._stamp = _stamp(config.files)
        self._context = config.ssl_context()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= CERT_RELOAD_CHECK_SECONDS:
                self._checked = now
                stamp = _stamp(self.config.files)
                if stamp != self._stamp:
                    self._stamp = stamp
                    try:
                        self._context = self.config.ssl_context()
                    except ConfigError as exc:
                        log.error("TLS files changed but cannot be used; keeping the previous certificate",
                                  extra={"err": str(exc)})
                    else:
                        log.info("TLS certificate reloaded", extra={"cert_file": str(self.config.cert_file)})
            return self._context

    def wrap(self, sock: socket.socket) -> ssl.SSLSocket:
        return self.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)

    def handshake(self, conn: ssl.SSLSocket, client: str) -> bool:
        """Complete the handshake (bounded by ``handshake_timeout``); False: drop the connection."""
        conn.settimeout(self.handshake_timeout)
        try:
            conn.do_handshake()
        except ssl.SSLError as exc:
            if exc.reason == "HTTP_REQUEST":
                _answer_plain_http(conn)
            log.debug("TLS handshake failed", extra={"client": client, "err": str(exc)})
            return False
        except OSError as exc:  # timeout, reset, EOF
            log.debug("TLS handshake failed", extra={"client": client, "err": str(exc) or type(exc).__name__})
            return False
        if not self.config.allows_peer(conn.getpeercert()):
            log.warning("client certificate has none of client_allowed_sans; connection closed",
                        extra={"client": client})
            return False
        return True


def _stamp(files: Iterable[Path]) -> tuple[tuple[int, ...] | None, ...]:
    stamps: list[tuple[int, ...] | None] = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            stamps.append(None)
        else:
            stamps.append((st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
    return tuple(stamps)


def _answer_plain_http(conn: ssl.SSLSocket) -> None:
    """Tell a plain-HTTP client what went wrong, in cleartext, as Go's net/http does."""
    body = b"Client sent an HTTP request to an HTTPS server.\n"
    head = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
    with contextlib.suppress(OSError):
        socket.socket.sendall(conn, head + b"Content-Length: %d\r\n\r\n" % len(body) + body)  # not via TLS


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    tls: _TLSAcceptor | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is not None:
            try:
                return self.tls.wrap(sock), address  # no I/O here: the accept loop never waits on a client
            except (OSError, ValueError):
                sock.close()
                raise OSError("cannot wrap the connection for TLS") from None
        return sock, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Runs in the connection's thread (ThreadingMixIn), so a slow handshake only holds that thread.
        tls, client = self.tls, _client(client_address)
        if tls is not None and isinstance(request, ssl.SSLSocket) and not tls.handshake(request, client):
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):  # timeouts, resets, TLS errors: the client's problem, not ours
            log.debug("connection ended", extra={"client": _client(client_address), "err": str(error)})
        else:
            log.error("error serving a request", extra={"client": _client(client_address)}, exc_info=True)


def _client(address: Any) -> str:
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


class _DualStackServer(_ThreadingServer):
    address_family = socket.AF_INET6

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # IPv4 too, like Go's ":port"
        super().server_bind()


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_SECONDS  # a client that stalls mid-request frees its thread

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


class WebServer:
    """Serves ``app`` on a background thread; ``port`` is the bound port (useful with port 0).

    ``web_config`` (from ``load_web_config``, ``--web.config.file``) adds TLS, basic auth on every path
    and extra response headers; None serves plain HTTP as before. ``scheme`` is "https" or "http".
    """

    def __init__(
        self,
        app: WSGIApplication,
        host: str,
        port: int,
        web_config: WebConfig | None = None,
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_SECONDS,
    ) -> None:
        config = web_config or WebConfig()
        tls = _TLSAcceptor(config.tls, handshake_timeout) if config.tls else None
        self._server = _bind(protect(app, config), host, port)
        self._server.tls = tls
        self.port: int = self._server.server_address[1]
        self.scheme: str = config.scheme
        self._thread = threading.Thread(target=self._server.serve_forever, name="web", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _bind(app: WSGIApplication, host: str, port: int) -> _ThreadingServer:
    if host in ("", "::") and socket.has_ipv6:
        try:
            return make_server("::", port, app, server_class=_DualStackServer, handler_class=_QuietHandler)
        except OSError:
            if host == "::":
                raise
    server_class: type[_ThreadingServer] = _ThreadingServer
    if ":" in host:
        server_class = type("_V6Server", (_ThreadingServer,), {"address_family": socket.AF_INET6})
    return make_server(host or "0.0.0.0", port, app, server_class=server_class, handler_class=_QuietHandler)
