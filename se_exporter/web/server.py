"""The HTTP server: asyncio on one thread, so a connection costs a coroutine and a file descriptor, never a
thread, and no client can stop or starve it.

Every connection is bounded in time and in number, by the bytes each may hold (``CONNECTION_BUDGET_BYTES``):
when one more comes, the oldest of those waiting for a request is closed, so a flood of idle or dripping
connections cannot keep a scrape out. A socket is bound with deferred accept on Linux. Whatever happens to
one connection, or to an accept, the accept loop goes on, and what a connection's error holds is let go
with it.

A connection's HTTP/1.1 exchanges (h11, ``HTTPExchanges``): a TLS handshake within ``handshake_timeout``; a
request read in full, within ``HEAD_TIMEOUT_SECONDS`` of its first byte and at most ``MAX_HEAD_BYTES`` of
head (``MAX_BODY_BYTES`` of body, discarded), before anything runs for it, so a slow or dripping client holds
a coroutine, never a worker; 30 s idle between kept-alive requests. Only then:

- basic auth (``web/access.py``): credentials checked valid before are answered at once; others need bcrypt
  (tens of milliseconds) on one thread, requests with the same credentials sharing one check, at most
  ``MAX_AUTH_WAITING`` distinct ones waiting: a flood of wrong passwords is answered 429 and never delays a
  scrape whose credentials are known;
- /metrics is rendered on one thread, shared by the requests that would get the same answer, bounded in
  number (``web/renders.py``); the probes and the landing page are answered at once, never behind it;
- the answer must be taken within ``WRITE_TIMEOUT_SECONDS``; HEAD gets GET's headers without the body;
  other methods 405. A client that is slower than any of these raises ``Timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import logging
import socket
import sys
import threading
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, SupportsIndex
from wsgiref.types import WSGIApplication

import h11

from se_exporter.config.values import HEALTHY_PATH, TRAFFIC_PATH
from se_exporter.errors import forget_traceback
from se_exporter.web.access import AccessRules, Authentication
from se_exporter.web.config import LiveWebConfig, WebConfig
from se_exporter.web.endpoints import Headers, HTTPAnswer, call_app, plain
from se_exporter.web.renders import ClientGone, Renders
from se_exporter.web.tls import HANDSHAKE_TIMEOUT_SECONDS, answer_plain_http, handshake, is_tls_hello, refusal


async def readable(loop: asyncio.AbstractEventLoop, sock: socket.socket, timeout: float) -> bool:
    if timeout <= 0:
        return False
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        async with asyncio.timeout(timeout):
            await ready
        return True
    except TimeoutError:
        return False
    finally:
        loop.remove_reader(sock.fileno())


def client_name(address: object) -> str:
    return str(address[0]) if isinstance(address, tuple) and address else str(address)


# Connections the kernel holds for us while every open one is working (web/server.py stops accepting then):
# 300 clients at once must wait there, not be refused (Linux caps it at net.core.somaxconn).
BACKLOG = 1024

DEFER_SECONDS = 5  # a silent client's connection is handed over after this at the latest (Linux)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket: ``""`` and ``"::"`` take every address, IPv4 too (like Go's ":port")."""
    return _defer_accept(_listen(host, port))


def _listen(host: str, port: int) -> socket.socket:
    if host in ("", "::") and socket.has_ipv6:
        with contextlib.suppress(OSError, ValueError):  # ValueError: no dual-stack sockets here
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=BACKLOG)
        if host == "::":
            raise OSError(errno.EAFNOSUPPORT, "IPv6 is not available", host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host or "0.0.0.0", port), family=family, backlog=BACKLOG)


def _defer_accept(listener: socket.socket) -> socket.socket:
    """On Linux, a connection is handed over once its client sent something (or after ``DEFER_SECONDS`` of
    silence): a client that connects and writes its request a moment later is never taken for an idle
    connection the server may close to make room, and silent ones wait in the kernel. Where
    the option does not exist, a connection is handed over at once (a request not yet written may then be
    cut at the bound: docs/reliability.md)."""
    option = getattr(socket, "TCP_DEFER_ACCEPT", None)
    if option is not None:
        with contextlib.suppress(OSError):
            listener.setsockopt(socket.IPPROTO_TCP, option, DEFER_SECONDS)
    return listener


HEAD_TIMEOUT_SECONDS = 10.0  # a request (and a TLS handshake) must arrive in full within this

IDLE_TIMEOUT_SECONDS = 30.0  # a kept-alive connection waits this long for its next request

WRITE_TIMEOUT_SECONDS = 10.0  # an answer must be taken within this

MAX_HEAD_BYTES = 64 << 10

MAX_BODY_BYTES = 64 << 10  # none of the endpoints reads a body

WRITE_CHUNK_BYTES = 64 << 10  # an answer's body is written this much at a time, as the client takes it


class Timeout(Exception):
    """The client took longer than it may (a slow or dripping client)."""


async def read_request(http: h11.Connection, reader: asyncio.StreamReader, idle_deadline: float) -> h11.Request | None:
    """The next request, read in full (its body discarded); None when the client closed the connection."""
    deadline = idle_deadline  # until the first byte; then HEAD_TIMEOUT_SECONDS for the rest
    request: h11.Request | None = None
    body = 0
    while True:
        event = http.next_event()
        if event is h11.NEED_DATA:
            data = await _receive(reader, deadline)
            if data and request is None and http.their_state is h11.IDLE and deadline == idle_deadline:
                deadline = min(idle_deadline, time.monotonic() + HEAD_TIMEOUT_SECONDS)
            http.receive_data(data)
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += len(event.data)
            if body > MAX_BODY_BYTES:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed):
            return None


async def _receive(reader: asyncio.StreamReader, deadline: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout
    try:
        async with asyncio.timeout(left):
            return await reader.read(16384)  # small reads: the head bound is checked between them
    except TimeoutError:
        raise Timeout from None


async def write_answer(
    http: h11.Connection, writer: asyncio.StreamWriter, answer: HTTPAnswer, *, head: bool, close: bool
) -> None:
    """The answer, taken by the client within ``WRITE_TIMEOUT_SECONDS``. The body goes out a chunk at a time,
    each written once the transport's buffer has drained: a connection holds at most a chunk and the
    buffer's high-water mark beyond the shared body, never a copy of it (250 clients that did not read a
    large /metrics over TLS once held a copy each, encrypted, 361 MiB in all)."""
    headers: Headers = [*answer.headers, ("Content-Length", str(len(answer.body)))]
    if close:
        headers.append(("Connection", "close"))
    response = h11.Response(
        status_code=answer.status, reason=answer.reason.encode("latin-1"), headers=_encoded(headers)
    )
    try:
        async with asyncio.timeout(WRITE_TIMEOUT_SECONDS):
            writer.write(http.send(response))
            body = memoryview(answer.body) if not head else memoryview(b"")
            for start in range(0, len(body), WRITE_CHUNK_BYTES):
                chunk = h11.Data(data=body[start : start + WRITE_CHUNK_BYTES])  # type: ignore[arg-type]  # a view: no copy
                for piece in http.send_with_data_passthrough(chunk) or ():
                    writer.write(piece)
                await writer.drain()
            writer.write(http.send(h11.EndOfMessage()))
            await writer.drain()
    except TimeoutError:
        raise Timeout from None


def _encoded(headers: Sequence[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


PLAIN_TEXT = ("Content-Type", "text/plain; charset=utf-8")


class HTTPExchanges:
    """What the server does with a request: shared by every connection (its threads and bounds too)."""

    def __init__(self, app: WSGIApplication, config: LiveWebConfig, port: int, scheme: str, renders: Renders) -> None:
        self._app = app
        self._config = config
        self._rules = AccessRules.of(config.current() or WebConfig(), None)
        self._base = {
            "SERVER_PORT": str(port),
            "wsgi.url_scheme": scheme,
            "wsgi.version": (1, 0),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            "SCRIPT_NAME": "",
        }
        self._renders = renders
        self._authentication = Authentication()

    def close(self) -> None:
        self._renders.close()
        self._authentication.close()

    async def serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client: str,
        idle: Callable[[bool], None],
        deadline: float,
        *,
        refusal: str | None = None,
    ) -> None:
        """Requests until the client, an error or a timeout ends the connection; ``idle(True)`` while it
        waits for a request (such connections are the ones the server may close when it needs room).
        ``refusal``: why this client may have nothing: its first request is answered 403 with it, then closed."""
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        while True:
            idle(True)
            try:
                request = await read_request(http, reader, deadline)
            except h11.RemoteProtocolError as error:
                await write_answer(http, writer, plain(error.error_status_hint, str(error)), head=False, close=True)
                return
            if request is None:
                return
            idle(False)
            rules = self._rules_now()
            with_extra = rules.with_extra if rules is not None else _as_is
            if refusal is not None:
                forbidden = HTTPAnswer(403, "Forbidden", [PLAIN_TEXT], f"{refusal}\n".encode())
                await write_answer(http, writer, with_extra(forbidden), head=request.method == b"HEAD", close=True)
                return
            answer = await self._answer(
                request, client, rules, lambda: reader.at_eof() or writer.transport.is_closing()
            )
            await write_answer(http, writer, with_extra(answer), head=request.method == b"HEAD", close=False)
            if http.our_state is not h11.DONE or http.their_state is not h11.DONE:
                return
            http.start_next_cycle()
            deadline = time.monotonic() + IDLE_TIMEOUT_SECONDS

    def _rules_now(self) -> AccessRules | None:
        """What the web config in force says of requests (rebuilt when it changed); None: nothing is in force."""
        config = self._config.current()
        if config is None:
            return None
        if config is not self._rules.config:
            self._rules = AccessRules.of(config, self._rules)
        return self._rules

    async def _answer(
        self, request: h11.Request, client: str, rules: AccessRules | None, gone: Callable[[], bool]
    ) -> HTTPAnswer:
        if request.method not in (b"GET", b"HEAD"):
            return HTTPAnswer(405, "Method Not Allowed", [("Allow", "GET, HEAD")], b"Method not allowed: use GET\n")
        environ = self._environ(request, client)
        refused = await self._refused(rules, environ)
        if refused is not None:
            return refused
        if environ["PATH_INFO"] in self._renders.paths:
            return await self._renders.answer(self._app, environ, gone)
        return call_app(self._app, environ)  # the probes and the landing page: at once, never behind a render

    async def _refused(self, rules: AccessRules | None, environ: dict[str, Any]) -> HTTPAnswer | None:
        """Why the web config in force refuses this request (None: it may go on)."""
        path = environ["PATH_INFO"]
        if rules is None:  # the web config does not parse: fail closed, as exporter-toolkit does
            if path in (HEALTHY_PATH, TRAFFIC_PATH):  # but the process is alive, and a probe must not drop it
                return None
            log.debug("request refused: the web config does not parse", extra={"client": environ["REMOTE_ADDR"]})
            return HTTPAnswer(500, "Internal Server Error", [PLAIN_TEXT], b"Internal Server Error\n")
        if rules.limit is not None and path != TRAFFIC_PATH and not rules.limit.allow():
            return HTTPAnswer(429, "Too Many Requests", [PLAIN_TEXT], b"Too Many Requests\n")
        if rules.auth is not None and path not in rules.excluded:
            return await self._authentication.refusal(rules.auth, environ)
        return None

    def _environ(self, request: h11.Request, client: str) -> dict[str, Any]:
        target = request.target.decode("latin-1")
        path, _, query = target.partition("?")
        environ: dict[str, Any] = {
            **self._base,
            "REQUEST_METHOD": "GET",
            "QUERY_STRING": query,
            "PATH_INFO": urllib.parse.unquote(path, "latin-1"),
            "SERVER_NAME": "se-exporter",
            "SERVER_PROTOCOL": f"HTTP/{request.http_version.decode()}",
            "REMOTE_ADDR": client,
            "wsgi.input": io.BytesIO(b""),
        }
        for name, value in request.headers:
            key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
            text = value.decode("latin-1")
            environ[key] = f"{environ[key]},{text}" if key in environ else text
        return environ


def _as_is(answer: HTTPAnswer) -> HTTPAnswer:
    return answer


def close_quietly(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()


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
class _OpenConnection:
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
        self._live, self._tls, self._handshake_timeout = live, config.tls is not None, handshake_timeout
        each = TLS_CONNECTION_BYTES if self._tls else PLAIN_CONNECTION_BYTES
        self.max_connections = min(MAX_CONNECTIONS, CONNECTION_BUDGET_BYTES // each)
        self._listener = bind(host, port)
        self.port: int = self._listener.getsockname()[1]
        self.scheme: str = config.scheme
        self._exchanges = HTTPExchanges(app, live, self.port, self.scheme, Renders(render_paths, snapshot=snapshot))
        self._loop = asyncio.SelectorEventLoop()  # sockets as they are (Windows' default loop has no add_reader)
        self._thread = threading.Thread(
            target=lambda: self._loop.run_until_complete(self._serve()), name="web", daemon=True
        )
        self._stopping: asyncio.Event | None = None
        self._open: OrderedDict[asyncio.Task[None], _OpenConnection] = OrderedDict()  # oldest first
        self._room = asyncio.Event()  # set when a connection ends

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._request_stop)
            self._thread.join(timeout=5.0)
        self._exchanges.close()
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
        self._open[task] = _OpenConnection(sock, reader)
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
                await self._exchanges.serve(
                    reader,
                    writer,
                    client,
                    idle,
                    deadline,
                    refusal=refusal(self._live.tls_in_force(), writer, client) if self._tls else None,
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

    async def _open_stream(
        self, sock: socket.socket, reader: asyncio.StreamReader, client: str, deadline: float
    ) -> asyncio.StreamWriter | None:
        """The connection's writer (``reader`` reads it), after the TLS handshake when TLS is on (None: not
        one to serve)."""
        context = self._live.tls_context()
        if context is None:
            protocol = asyncio.StreamReaderProtocol(reader)
            transport, _ = await self._loop.connect_accepted_socket(lambda: protocol, sock)
            return asyncio.StreamWriter(transport, protocol, reader, self._loop)
        left = min(deadline, time.monotonic() + self._handshake_timeout) - time.monotonic()
        if not await readable(self._loop, sock, left):
            raise Timeout("no TLS handshake")
        if not is_tls_hello(sock):
            answer_plain_http(sock)  # in cleartext, as Go's net/http does
            return None
        try:
            return await handshake(
                sock,
                reader,
                context,
                timeout=max(0.1, left),
                shutdown_timeout=TLS_SHUTDOWN_SECONDS,
            )
        except OSError as error:  # the handshake failed (the client was sent the alert) or timed out
            raise Timeout(f"TLS handshake failed: {error}") from None
