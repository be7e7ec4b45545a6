"""The wire side of one connection: a request read in full and an answer written, each within a deadline.

A request must arrive within ``HEAD_TIMEOUT_SECONDS`` of its first byte, its head within
``MAX_HEAD_BYTES`` (h11's bound) and its body within ``MAX_BODY_BYTES`` (read and discarded); an answer
must be taken by the client within ``WRITE_TIMEOUT_SECONDS``. A client that is slower raises ``Timeout``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from wsgiref.types import WSGIApplication

import h11

HEAD_TIMEOUT_SECONDS = 10.0  # a request (and a TLS handshake) must arrive in full within this
IDLE_TIMEOUT_SECONDS = 30.0  # a kept-alive connection waits this long for its next request
WRITE_TIMEOUT_SECONDS = 10.0  # an answer must be taken within this
MAX_HEAD_BYTES = 64 << 10
MAX_BODY_BYTES = 64 << 10  # none of the endpoints reads a body
WRITE_CHUNK_BYTES = 64 << 10  # an answer's body is written this much at a time, as the client takes it
Headers = list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    reason: str
    headers: Headers
    body: bytes


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
    http: h11.Connection, writer: asyncio.StreamWriter, answer: Answer, *, head: bool, close: bool
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


def plain(status: int, text: str) -> Answer:
    reasons = {400: "Bad Request", 413: "Content Too Large", 431: "Request Header Fields Too Large"}
    return Answer(
        status,
        reasons.get(status, "Bad Request"),
        [("Content-Type", "text/plain; charset=utf-8")],
        f"{text}\n".encode(),
    )


def call_app(app: WSGIApplication, environ: dict[str, Any]) -> Answer:
    """The WSGI application's answer to one request, its body joined."""
    started: list[tuple[str, Headers]] = []

    def start_response(status: str, headers: Headers, exc_info: Any = None) -> Callable[[bytes], object]:
        started[:] = [(status, list(headers))]
        return lambda _data: None

    result = app(environ, start_response)
    try:
        body = b"".join(result)
    finally:
        if hasattr(result, "close"):
            result.close()
    status, headers = started[0]
    code, _, reason = status.partition(" ")
    return Answer(int(code), reason, headers, body)
