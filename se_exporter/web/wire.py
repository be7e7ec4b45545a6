"""The wire side of one connection: a request read in full and an answer written, each within a deadline.

A request must arrive within ``HEAD_TIMEOUT_SECONDS`` of its first byte, its head within
``MAX_HEAD_BYTES`` (h11's bound) and its body within ``MAX_BODY_BYTES`` (read and discarded); an answer
must be taken by the client within ``WRITE_TIMEOUT_SECONDS``. A client that is slower raises ``Timeout``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import h11

HEAD_TIMEOUT_SECONDS = 10.0  # a request (and a TLS handshake) must arrive in full within this
IDLE_TIMEOUT_SECONDS = 30.0  # a kept-alive connection waits this long for its next request
WRITE_TIMEOUT_SECONDS = 10.0  # an answer must be taken within this
MAX_HEAD_BYTES = 64 << 10
MAX_BODY_BYTES = 64 << 10  # none of the endpoints reads a body
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
    headers: Headers = [*answer.headers, ("Content-Length", str(len(answer.body)))]
    if close:
        headers.append(("Connection", "close"))
    data = http.send(
        h11.Response(status_code=answer.status, reason=answer.reason.encode("latin-1"), headers=_encoded(headers))
    )
    if answer.body and not head:
        data += http.send(h11.Data(data=answer.body))
    data += http.send(h11.EndOfMessage())
    writer.write(data)
    try:
        async with asyncio.timeout(WRITE_TIMEOUT_SECONDS):
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
