"""The HTTP server: plain or TLS, sleeping until a client connects, stopped at once, bounded in threads.

One thread accepts connections and watches them; a connection gets one of ``MAX_WORKERS`` worker
threads only once it has sent something. Idle connections cost a file descriptor, not a thread (a
flood of 3,000 idle connections once made 2,000 threads and 95 MiB), so a scrape still gets a worker
at once; at most ``MAX_WAITING`` of them are kept (the oldest are closed) for ``IDLE_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import logging
import selectors
import socket
import ssl
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.types import WSGIApplication

from se_exporter.web.auth import protect
from se_exporter.web.config import WebConfig
from se_exporter.web.tls import HANDSHAKE_TIMEOUT_SECONDS, TLSAcceptor

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_SECONDS = 10.0  # a worker's client may pause this long while sending its request or reading
IDLE_TIMEOUT_SECONDS = 30.0  # a connection that has sent nothing is closed after this
MAX_WORKERS = 16  # scrapes take milliseconds: a few workers serve any sane number of scrapers
# Connections that have sent nothing yet, kept at most (the oldest closed first): far below the usual
# limit of 1,024 open files, which the state file, the spool and IMDS connections need too.
MAX_WAITING = 256


class _ThreadingServer(WSGIServer):
    allow_reuse_address = True
    request_queue_size = 128
    tls: TLSAcceptor | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is not None:
            try:
                return self.tls.wrap(sock), address  # no I/O here: the accept loop never waits on a client
            except (OSError, ValueError):
                sock.close()
                raise OSError("cannot wrap the connection for TLS") from None
        return sock, address

    def serve_connection(self, request: Any, client_address: Any) -> None:
        """On a worker thread: the whole life of one connection."""
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # Runs on a worker thread, so a slow handshake only holds that worker.
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
        tls = TLSAcceptor(config.tls, handshake_timeout) if config.tls else None
        self._server = _bind(protect(app, config), host, port)
        self._server.tls = tls
        self.port: int = self._server.server_address[1]
        self.scheme: str = config.scheme
        self._wake, self._woken = socket.socketpair()
        self._thread = threading.Thread(target=self._accept_loop, name="web", daemon=True)
        self._workers = ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="web-worker")
        self._waiting: OrderedDict[Any, tuple[Any, float]] = OrderedDict()  # socket -> (address, since)
        # A TLS client must start its handshake as promptly as it must finish it.
        self._idle_timeout = min(IDLE_TIMEOUT_SECONDS, tls.handshake_timeout) if tls else IDLE_TIMEOUT_SECONDS

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._wake.send(b"\0")
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self._workers.shutdown(wait=False, cancel_futures=True)
        for sock in list(self._waiting):
            self._server.shutdown_request(sock)
        self._waiting.clear()
        self._server.server_close()
        self._wake.close()
        self._woken.close()

    def _accept_loop(self) -> None:
        # Unlike serve_forever(), which wakes every 0.5 s to look for a shutdown request, this sleeps
        # until a client connects or sends, stop() writes to the wake-up socket, or an idle connection
        # is due to be closed: an idle exporter stays asleep.
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._woken, selectors.EVENT_READ)
            while True:
                for key, _ in selector.select(self._next_expiry()):
                    if key.fileobj is self._woken:
                        return
                    if key.fileobj is self._server:
                        self._accept(selector)
                    else:  # a waiting connection sent something: it gets a worker now
                        selector.unregister(key.fileobj)
                        address, _since = self._waiting.pop(key.fileobj)
                        self._workers.submit(self._server.serve_connection, key.fileobj, address)
                self._close_idle(selector)

    def _accept(self, selector: selectors.BaseSelector) -> None:
        try:
            sock, address = self._server.get_request()
        except OSError:  # out of file descriptors, say: free one, or the next select() wakes at once again
            if self._waiting:
                self._drop(selector, next(iter(self._waiting)))
            return
        self._waiting[sock] = (address, time.monotonic())
        selector.register(sock, selectors.EVENT_READ)
        while len(self._waiting) > MAX_WAITING:
            self._drop(selector, next(iter(self._waiting)))

    def _next_expiry(self) -> float | None:
        if not self._waiting:
            return None
        _address, oldest = next(iter(self._waiting.values()))
        return max(0.0, oldest + self._idle_timeout - time.monotonic())

    def _close_idle(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._waiting and next(iter(self._waiting.values()))[1] + self._idle_timeout <= now:
            self._drop(selector, next(iter(self._waiting)))

    def _drop(self, selector: selectors.BaseSelector, sock: Any) -> None:
        selector.unregister(sock)
        del self._waiting[sock]
        self._server.shutdown_request(sock)


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
