"""The wire side of one connection: a request read in full and an answer written, each within a deadline.

A request must arrive within ``HEAD_TIMEOUT_SECONDS`` of its first byte, its head within
``MAX_HEAD_BYTES`` (h11's bound) and its body within ``MAX_BODY_BYTES`` (read and discarded); an answer
must be taken by the client within ``WRITE_TIMEOUT_SECONDS``. A client that is slower raises ``Timeout``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import h11

from se_exporter.web.loop import READ, WRITE, Timeout, Wait

HEAD_TIMEOUT_SECONDS = 10.0  # a request (and a TLS handshake) must arrive in full within this
IDLE_TIMEOUT_SECONDS = 30.0  # a kept-alive connection waits this long for its next request
WRITE_TIMEOUT_SECONDS = 10.0  # an answer must be taken within this
MAX_HEAD_BYTES = 64 << 10
MAX_BODY_BYTES = 64 << 10  # none of the endpoints reads a body
RECEIVE_BYTES = 16384  # small reads: the head bound is checked between them
Headers = list[tuple[str, str]]
T = TypeVar("T")
Waits = Generator[Wait, Any, Any]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    reason: str
    headers: Headers
    body: bytes


class Stream(Protocol):
    """A connection's bytes, plain (``PlainStream``) or TLS (``web/tls.py``); each call waits, if it
    must, until ``deadline``, and raises ``Timeout`` past it."""

    sock: socket.socket

    def recv(self, deadline: float) -> Generator[Wait, Any, bytes]: ...

    def send(self, data: memoryview, deadline: float) -> Generator[Wait, Any, int]: ...


Errors = tuple[type[Exception], ...]
AGAIN: Errors = (BlockingIOError, InterruptedError)  # a non-blocking call that must wait


class PlainStream:
    # What a call raises when it must wait (for the socket to be readable, writable): TLSStream adds
    # OpenSSL's own (a TLS read may need to write, and a write to read).
    recv_waits: tuple[Errors, Errors] = (AGAIN, ())
    send_waits: tuple[Errors, Errors] = ((), AGAIN)

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def recv(self, deadline: float) -> Generator[Wait, Any, bytes]:
        # RECEIVE_BYTES is a TLS record's most: nothing stays buffered in OpenSSL unseen by the selector
        received: bytes = yield from attempt(
            lambda: self.sock.recv(RECEIVE_BYTES), self.sock, deadline, *self.recv_waits
        )
        return received

    def send(self, data: memoryview, deadline: float) -> Generator[Wait, Any, int]:
        sent: int = yield from attempt(lambda: self.sock.send(data), self.sock, deadline, *self.send_waits)
        return sent


def attempt(
    call: Callable[[], T], sock: socket.socket, deadline: float, wait_read: Errors, wait_write: Errors
) -> Generator[Wait, Any, T]:
    """``call()`` once ``sock`` is ready for it: each of ``wait_read``/``wait_write`` waits for it to be
    readable/writable, and the call is made again."""
    while True:
        check_deadline(deadline)
        try:
            return call()
        except wait_read:
            yield Wait(deadline, sock, READ)
        except wait_write:
            yield Wait(deadline, sock, WRITE)


def check_deadline(deadline: float) -> None:
    """Also when data keeps coming: a client that never pauses must not outlive its deadline."""
    if time.monotonic() >= deadline:
        raise Timeout


def read_request(
    http: h11.Connection, stream: Stream, idle_deadline: float
) -> Generator[Wait, Any, h11.Request | None]:
    """The next request, read in full (its body discarded); None when the client closed the connection."""
    deadline = idle_deadline  # until the first byte; then HEAD_TIMEOUT_SECONDS for the rest
    request: h11.Request | None = None
    body = 0
    while True:
        event = http.next_event()
        if event is h11.NEED_DATA:
            data = yield from stream.recv(deadline)
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


def write_answer(
    http: h11.Connection, stream: Stream, answer: Answer, *, head: bool, close: bool
) -> Generator[Wait, Any, None]:
    headers: Headers = [*answer.headers, ("Content-Length", str(len(answer.body)))]
    if close:
        headers.append(("Connection", "close"))
    data = http.send(
        h11.Response(status_code=answer.status, reason=answer.reason.encode("latin-1"), headers=_encoded(headers))
    )
    if answer.body and not head:
        data += http.send(h11.Data(data=answer.body))
    data += http.send(h11.EndOfMessage())
    deadline = time.monotonic() + WRITE_TIMEOUT_SECONDS
    left = memoryview(data)
    while left:
        sent = yield from stream.send(left, deadline)
        left = left[sent:]


def _encoded(headers: Sequence[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]


def plain(status: int, text: str) -> Answer:
    reasons = {400: "Bad Request", 413: "Content Too Large", 431: "Request Header Fields Too Large"}
    return Answer(
        status,
        reasons.get(status, "Bad Request"),
        [("Content-Type", "text/plain; charset=utf-8")],
        f"{text}\n".encode(),
    )
