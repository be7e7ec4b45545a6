"""The HTTP server: asyncio on one thread, so a connection costs a coroutine and a file descriptor, never a
thread, and no client can stop or starve it.

Every connection is bounded in time (``web/exchange.py``: a request in full within 10 s of its first
byte, a TLS handshake within ``handshake_timeout``, an answer taken within 10 s, 30 s idle between
kept-alive requests) and in number, by the bytes each may hold (``CONNECTION_BUDGET_BYTES``): when one
more comes the oldest of those waiting for a request is closed, so a flood of idle or dripping
connections cannot keep a scrape out. Work only starts for a complete request (one render thread, one
bcrypt thread). Whatever happens to one connection, or to an accept, the accept loop goes on, and what a
connection's error holds is let go with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import SupportsIndex
from wsgiref.types import WSGIApplication

from se_exporter.errors import forget_traceback
from se_exporter.web.config import WebConfig
from se_exporter.web.exchange import Exchange, close_quietly
from se_exporter.web.live_config import LiveWebConfig
from se_exporter.web.renders import ClientGone, Renders
from se_exporter.web.sockets import bind, client_name, readable
from se_exporter.web.tls import HANDSHAKE_TIMEOUT_SECONDS, TLSAcceptor, answer_plain_http, handshake, is_tls_hello
from se_exporter.web.wire import HEAD_TIMEOUT_SECONDS, Timeout

log = logging.getLogger(__name__)
# Open connections at most, by the bytes each may hold within a budget, and never more than 256 (the process's
# 1,024 file descriptors also hold the state file, the spool and IMDS connections; Windows' select() takes
# 512). A connection holds up to 64 KiB of request head (its reader's limit) and, while it is written to,
# a 64 KiB chunk of the shared answer plus the transport's 64 KiB high-water mark; over TLS, also
# asyncio's 256 KiB read buffer (sslproto's, allocated per connection) and OpenSSL's state: 250 TLS
# connections measured 63 MiB. 24 MiB: 256 plain connections, 64 TLS ones.
CONNECTION_BUDGET_BYTES = 24 << 20
PLAIN_CONNECTION_BYTES = 96 << 10
TLS_CONNECTION_BYTES = PLAIN_CONNECTION_BYTES + (288 << 10)
MAX_CONNECTIONS = 256
# A TLS connection being closed waits this long for the client's close_notify (asyncio's default, 30 s, kept
# each closed connection's buffers that long: a flood of clients held four times the connections allowed).
TLS_SHUTDOWN_SECONDS = 2.0
_LIMITS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ROOM_CHECK_SECONDS = 0.1  # at the bound, how often open connections are looked at again for an idle one
_HEAD_END = b"\r\n\r\n"
_TLS_RECORD = 0x16


class _Reader(asyncio.StreamReader):
    """A connection's reader that knows whether a whole request head has arrived since ``next_request``."""

    head_arrived = False
    _tail = b""

    def next_request(self) -> None:
        self.head_arrived, self._tail = False, b""

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        if not self.head_arrived:
            seen = self._tail + bytes(data)[: 1 << 16]  # the transport hands bytes: no copy but the slice
            self.head_arrived = _HEAD_END in seen
            self._tail = seen[-3:]
        super().feed_data(data)


@dataclass(slots=True)
class _Open:
    """An open connection, as the server sees it when it needs room."""

    sock: socket.socket
    reader: _Reader
    waiting: bool = True  # waiting for a request: nothing of one, or a part of its head, has arrived

    def idle(self) -> bool:
        """Whether it may be closed to make room: waiting, without a whole request head read or still in the
        socket (a whole HTTP head, or a TLS handshake's first record, is a request sent). On Linux a new
        connection reaches us only once it sent something, or stayed silent for long (``sockets.bind``)."""
        if not self.waiting or self.reader.head_arrived:
            return False
        try:
            sent = self.sock.recv(1 << 12, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return True  # gone already
        return not sent or (sent[0] != _TLS_RECORD and _HEAD_END not in sent)


class WebServer:
    """Serves ``app`` on a background thread; ``port`` is the bound port (useful with port 0).

    ``web_config`` (from ``load_web_config``, ``--web.config.file``; a ``LiveWebConfig`` follows the file's
    changes) adds TLS, basic auth on every path but the excluded ones, extra response headers and a rate
    limit; None serves plain HTTP. ``scheme`` is "https" or
    "http".
    """

    def __init__(
        self,
        app: WSGIApplication,
        host: str,
        port: int,
        web_config: WebConfig | LiveWebConfig | None = None,
        *,
        handshake_timeout: float = HANDSHAKE_TIMEOUT_SECONDS,
        render_paths: frozenset[str] = frozenset({"/metrics"}),
        snapshot: Callable[[], object] | None = None,  # what /metrics is made of, replaced whole by each poll
    ) -> None:
        live = web_config if isinstance(web_config, LiveWebConfig) else LiveWebConfig(None, web_config or WebConfig())
        config = live.current() or WebConfig()
        self._tls = TLSAcceptor(config.tls, handshake_timeout, live) if config.tls else None
        each = TLS_CONNECTION_BYTES if self._tls else PLAIN_CONNECTION_BYTES
        self.max_connections = min(MAX_CONNECTIONS, CONNECTION_BUDGET_BYTES // each)
        self._listener = bind(host, port)
        self.port: int = self._listener.getsockname()[1]
        self.scheme: str = config.scheme
        self._exchange = Exchange(app, live, self.port, self.scheme, Renders(render_paths, snapshot=snapshot))
        self._loop = asyncio.SelectorEventLoop()  # sockets as they are (Windows' default loop has no add_reader)
        self._thread = threading.Thread(
            target=lambda: self._loop.run_until_complete(self._serve()), name="web", daemon=True
        )
        self._stopping: asyncio.Event | None = None
        self._open: OrderedDict[asyncio.Task[None], _Open] = OrderedDict()  # oldest first
        self._room = asyncio.Event()  # set when a connection ends

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._request_stop)
            self._thread.join(timeout=5.0)
        self._exchange.close()
        self._listener.close()
        if not self._thread.is_alive():
            self._loop.close()

    def _request_stop(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        accepting = asyncio.create_task(self._accept_loop())
        await self._stopping.wait()
        accepting.cancel()
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(accepting, *self._open, return_exceptions=True)

    async def _accept_loop(self) -> None:
        self._listener.setblocking(False)
        while True:
            await self._room_for_one()
            try:
                sock, address = await self._loop.sock_accept(self._listener)
            except OSError as error:  # out of file descriptors, say: make room, or the loop would spin
                if error.errno in _LIMITS and self._close_oldest_idle():
                    continue
                log.warning("cannot accept a connection: %s", error)
                await asyncio.sleep(0.1)
                continue
            try:
                self._admit(sock, client_name(address))
            except Exception:  # one connection's trouble must never end the accept loop
                log.exception("could not take a connection")
                sock.close()

    async def _room_for_one(self) -> None:
        """Until one more connection may be open: at the bound, the oldest idle one is closed; when every
        open connection is working, none is accepted (the next wait in the listen backlog) until one ends or
        turns idle. A request a client has sent is never cut to make room."""
        while len(self._open) >= self.max_connections and not self._close_oldest_idle():
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._room.wait(), ROOM_CHECK_SECONDS)  # or one of them turned idle

    def _admit(self, sock: socket.socket, client: str) -> None:
        reader = _Reader(limit=1 << 16)
        task = asyncio.create_task(self._connection(sock, reader, client))
        self._open[task] = _Open(sock, reader)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._open.pop(task, None)
        self._room.set()
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("error serving a connection", exc_info=error)

    def _close_oldest_idle(self) -> bool:
        oldest = next((task for task, state in self._open.items() if state.idle() and not task.done()), None)
        if oldest is None:
            return False
        oldest.cancel()
        self._open.pop(oldest, None)
        return True

    async def _connection(self, sock: socket.socket, reader: _Reader, client: str) -> None:
        task = asyncio.current_task()

        def idle(waiting: bool) -> None:  # the oldest idle connections are the first to go
            if task is not None and (state := self._open.get(task)) is not None:
                state.waiting = waiting
                if waiting:
                    reader.next_request()
                    self._open.move_to_end(task)

        deadline = time.monotonic() + HEAD_TIMEOUT_SECONDS
        writer: asyncio.StreamWriter | None = None
        ended_well = False
        try:
            writer = await self._open_stream(sock, reader, client, deadline)
            if writer is not None:
                await self._exchange.serve(
                    reader, writer, client, idle, deadline, refusal=self._refusal(writer, client)
                )
            ended_well = True
        except (Timeout, ClientGone, OSError, asyncio.IncompleteReadError) as error:
            log.debug("connection ended", extra={"client": client, "err": str(error) or type(error).__name__})
            forget_traceback(error)
        except asyncio.CancelledError as error:  # closed to make room for another, or the server stops
            forget_traceback(error)
            raise
        finally:
            if writer is None:
                sock.close()
            elif ended_well:
                close_quietly(writer)  # what is written is sent first; TLS says close_notify
            else:  # a client that is slow, gone or pushed out gets no farewell: its buffers go now
                writer.transport.abort()
            if (held := reader.exception()) is not None:  # what the transport reported, never read by us
                forget_traceback(held)

    def _refusal(self, writer: asyncio.StreamWriter, client: str) -> str | None:
        """Why a TLS client's requests are refused (403) once it is in: a verified certificate without any of
        ``client_allowed_sans`` (Python checks those only after the handshake, where Go refuses in it)."""
        if self._tls is None or self._tls.config.allows_peer(writer.get_extra_info("peercert")):
            return None
        log.warning("client certificate has none of client_allowed_sans; refused", extra={"client": client})
        return "the client certificate has none of the names in client_allowed_sans"

    async def _open_stream(
        self, sock: socket.socket, reader: asyncio.StreamReader, client: str, deadline: float
    ) -> asyncio.StreamWriter | None:
        """The connection's writer (``reader`` reads it), after the TLS handshake when TLS is on (None: not
        one to serve)."""
        if self._tls is None:
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await self._loop.connect_accepted_socket(lambda: protocol, sock)
            return asyncio.StreamWriter(transport, protocol, reader, self._loop)
        left = min(deadline, time.monotonic() + self._tls.handshake_timeout) - time.monotonic()
        if not await readable(self._loop, sock, left):
            raise Timeout("no TLS handshake")
        if not is_tls_hello(sock):
            answer_plain_http(sock)  # in cleartext, as Go's net/http does
            return None
        try:
            return await handshake(
                sock,
                reader,
                self._tls.context(),
                timeout=max(0.1, left),
                shutdown_timeout=TLS_SHUTDOWN_SECONDS,
            )
        except OSError as error:  # the handshake failed (the client was sent the alert) or timed out
            raise Timeout(f"TLS handshake failed: {error}") from None
