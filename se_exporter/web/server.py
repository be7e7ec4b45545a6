"""The HTTP server: one thread whose selectors loop (``web/loop.py``) drives every connection, so a connection
costs a generator and a file descriptor, never a thread, and no client can stop or starve it.

Every connection is bounded in time (``web/exchange.py``: a request in full within 10 s of its first
byte, a TLS handshake within ``handshake_timeout``, an answer taken within 10 s, 30 s idle between
kept-alive requests) and in number: at most ``MAX_CONNECTIONS`` are open, and when one more comes the
oldest of those waiting for a request is closed, so a flood of idle or dripping connections cannot keep
a scrape out. Work only starts for a complete request (one render thread, one bcrypt thread). Whatever
happens to one connection, or to an accept, the accept loop goes on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from wsgiref.types import WSGIApplication

from se_exporter.web.config import WebConfig
from se_exporter.web.exchange import Exchange
from se_exporter.web.loop import Loop, Step, Timeout, Wait
from se_exporter.web.wire import HEAD_TIMEOUT_SECONDS, PlainStream, Stream

if TYPE_CHECKING:
    from se_exporter.web.tls import TLSAcceptor

log = logging.getLogger(__name__)
# Open connections at most (the process's 1,024 file descriptors also hold the state file, the spool and
# IMDS connections; Windows' select() takes 512).
MAX_CONNECTIONS = 256
ACCEPTS_PER_WAKE = 64  # a burst of connections is taken in one go, without holding up the open ones
HANDSHAKE_TIMEOUT_SECONDS = 10.0  # a client that has not finished the TLS handshake by then is dropped
_LIMITS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


@dataclass(eq=False, slots=True)
class _Open:
    """One open connection: its task, and whether it waits for a request (the first to close for room)."""

    task: Step | None = None
    waiting: bool = True


class WebServer:
    """Serves ``app`` on a background thread; ``port`` is the bound port (useful with port 0).

    ``web_config`` (from ``load_web_config``, ``--web.config.file``) adds TLS, basic auth on every path
    but the excluded ones, and extra response headers; None serves plain HTTP. ``scheme`` is "https" or
    "http".
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
        self._tls: TLSAcceptor | None = None
        if config.tls:
            from se_exporter.web.tls import TLSAcceptor  # ssl loads OpenSSL: only when TLS is asked for

            self._tls = TLSAcceptor(config.tls, handshake_timeout)
        self._listener = _bind(host, port)
        self.port: int = self._listener.getsockname()[1]
        self.scheme: str = config.scheme
        self._loop = Loop()
        self._exchange = Exchange(app, config, self.port, self.scheme, self._loop.post)
        self._thread = threading.Thread(target=self._run, name="web", daemon=True)
        self._open: OrderedDict[_Open, None] = OrderedDict()  # oldest first

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.stop()
            self._thread.join(timeout=5.0)
        elif self._thread.ident is None:  # never started: the loop's sockets are still open
            self._loop.close()
        self._exchange.close()
        self._listener.close()

    def _run(self) -> None:
        self._listener.setblocking(False)
        self._loop.listen(self._listener, self._accept)
        self._loop.run()

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:  # out of file descriptors, say: make room, or the loop would spin
                if error.errno in _LIMITS and self._close_oldest_waiting():
                    continue
                log.warning("cannot accept a connection: %s", error)
                self._loop.unlisten(self._listener)
                self._loop.call_at(time.monotonic() + 0.1, lambda: self._loop.listen(self._listener, self._accept))
                return
            try:
                self._admit(sock, _client(address))
            except Exception:  # one connection's trouble must never end the accept loop
                log.exception("could not take a connection")
                sock.close()

    def _admit(self, sock: socket.socket, client: str) -> None:
        if len(self._open) >= MAX_CONNECTIONS and not self._close_oldest_waiting():
            sock.close()  # every open connection is busy answering (each for seconds at most)
            return
        sock.setblocking(False)
        opened = _Open()
        self._open[opened] = None
        opened.task = self._loop.spawn(self._connection(sock, client, opened))

    def _close_oldest_waiting(self) -> bool:
        oldest = next((opened for opened in self._open if opened.waiting), None)
        if oldest is None:
            return False
        del self._open[oldest]
        if oldest.task is not None:
            self._loop.cancel(oldest.task)
        return True

    def _connection(self, sock: socket.socket, client: str, opened: _Open) -> Generator[Wait, Any, None]:
        def idle(waiting: bool) -> None:  # the oldest idle connections are the first to go
            opened.waiting = waiting
            if waiting and opened in self._open:
                self._open.move_to_end(opened)

        deadline = time.monotonic() + HEAD_TIMEOUT_SECONDS
        stream: Stream | None = None
        try:
            stream = PlainStream(sock) if self._tls is None else (yield from self._tls.open(sock, client, deadline))
            if stream is not None:
                yield from self._exchange.serve(stream, client, idle, deadline)
        except (Timeout, OSError) as error:
            log.debug("connection ended", extra={"client": client, "err": str(error) or type(error).__name__})
        finally:
            self._open.pop(opened, None)
            sock.close()  # a no-op once TLS took the descriptor over
            if stream is not None:
                stream.sock.close()


def _client(address: object) -> str:
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket: ``""`` and ``"::"`` take every address, IPv4 too (like Go's ":port")."""
    if host in ("", "::") and socket.has_ipv6:
        with contextlib.suppress(OSError, ValueError):  # ValueError: no dual-stack sockets here
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=128)
        if host == "::":
            raise OSError(errno.EAFNOSUPPORT, "IPv6 is not available", host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host or "0.0.0.0", port), family=family, backlog=128)
