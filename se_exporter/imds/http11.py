"""HTTP/1.1 with IMDS on one socket: a request's bytes, and its answer read within one deadline.

The exporter asks IMDS the same question every second. ``http.client`` answers it through an
e-mail header parser, two file objects and a dozen header calls per request: measured cold (a poll a
second, caches gone), 540 us of CPU per request against 200 us for this module, which made
``http.client`` the largest part of an idle exporter's CPU (BENCHMARKS.md). What IMDS needs of
HTTP/1.1 is small and done here with the same bounds, and the framing rules of RFC 9112:

- every ``recv`` waits at most until the one deadline: a peer dripping its status line, its headers,
  endless ``100 Continue`` answers, chunk-size lines or trailers is a ``ReadTimeout``;
- the head (status line and headers) is at most ``MAX_HEAD_BYTES`` and ``MAX_HEADERS`` lines; a
  chunk-size line at most ``MAX_LINE_BYTES``; the body is never held here, only handed on as it arrives
  (``imds.body`` caps and decodes it);
- a body is framed by ``Transfer-Encoding: chunked``, else ``Content-Length``, else the connection's end;
  1xx (other than 100, skipped), 204 and 304 have none;
- the connection may carry the next request only after the whole answer was read, from an HTTP/1.1
  peer that did not say ``Connection: close``, and when nothing more arrived after it.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator

from se_exporter.errors import TOO_SLOW

MAX_HEAD_BYTES = 65536
MAX_HEADERS = 100
MAX_LINE_BYTES = 4096
RECV_BYTES = 65536
_STATUS = re.compile(rb"HTTP/1\.([01]) ([0-9]{3})(?: [^\r\n]*)?")
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


class Closed(Exception):
    """The peer closed the connection before a byte of the answer: on a kept-alive connection, it
    closed it while idle (worth one more try on a new connection)."""


class ProtocolError(Exception):
    """The answer is not HTTP/1.1 as RFC 9112 frames it."""


def encode_request(
    method: str, host: str, port: int, target: str, headers: dict[str, str], *, body: bytes | None
) -> bytes:
    authority = f"[{host}]" if ":" in host else host
    if port != 80:
        authority += f":{port}"
    lines = [f"{method} {target} HTTP/1.1", f"Host: {authority}", "Accept-Encoding: identity"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    return "\r\n".join([*lines, "", ""]).encode("latin-1") + (body or b"")


class Exchange:
    """One request's answer on ``sock``, read by ``deadline`` (a ``time.monotonic``)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._buffer = bytearray()
        self._ended = False  # the peer closed its side
        self.status = 0
        self.headers: dict[str, str] = {}
        self.complete = False  # the whole body was read
        self._keep_alive = False
        self._framing = ("length", 0)  # how the body ends: ("length", bytes), ("chunked", 0) or ("close", 0)

    @property
    def reusable(self) -> bool:
        return self.complete and self._keep_alive and not self._buffer and not self._ended

    def send(self, data: bytes) -> None:
        self._sock.settimeout(max(0.001, self._deadline - time.monotonic()))  # sendall: a total bound
        self._sock.sendall(data)

    def read_head(self, method: str) -> None:
        """Status and headers (a 100 Continue skipped); raises ``Closed``, ``ProtocolError``, ``TimeoutError``."""
        while True:
            head = self._head()
            match = _STATUS.fullmatch(head[: head.find(b"\r\n") if b"\r\n" in head else len(head)])
            if match is None:
                raise ProtocolError(f"not an HTTP/1.x answer: {bytes(head[:40])!r}")
            self.status = int(match[2])
            if self.status != 100:
                break
        self.headers = _headers(head)
        tokens = {token.strip().lower() for token in self.headers.get("connection", "").split(",")}
        self._keep_alive = match[1] == b"1" and "close" not in tokens
        self._framing = self._frame(method)

    def body(self) -> Iterator[bytes]:
        """The raw body as it arrives (``complete`` once all of it was read)."""
        kind, length = self._framing
        if kind == "length":
            yield from self._exactly(length)
        elif kind == "chunked":
            while size := self._chunk_size():
                yield from self._exactly(size)
                self._crlf()
            for _ in range(MAX_HEADERS + 1):  # trailers, until the empty line
                if not self._line():
                    break
            else:
                raise ProtocolError(f"more than {MAX_HEADERS} trailer lines")
        else:  # to the connection's end
            while chunk := self._take(RECV_BYTES):
                yield chunk
            self._keep_alive = False
        self.complete = True

    def _frame(self, method: str) -> tuple[str, int]:
        if method == "HEAD" or self.status < 200 or self.status in (204, 304):
            return "length", 0
        if "transfer-encoding" in self.headers:
            if self.headers["transfer-encoding"].rsplit(",", 1)[-1].strip().lower() != "chunked":
                raise ProtocolError(f"Transfer-Encoding {self.headers['transfer-encoding']!r} is not chunked")
            return "chunked", 0
        if "content-length" in self.headers:
            values = {value.strip() for value in self.headers["content-length"].split(",")}
            if len(values) != 1 or not next(iter(values)).isdigit():
                raise ProtocolError(f"invalid Content-Length {self.headers['content-length']!r}")
            return "length", int(values.pop())
        return "close", 0

    def _head(self) -> bytearray:
        start = 0
        while (end := self._buffer.find(b"\r\n\r\n", start)) < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise ProtocolError(f"the answer's head exceeds {MAX_HEAD_BYTES} bytes")
            start = max(0, len(self._buffer) - 3)
            if not self._fill():
                if not self._buffer:
                    raise Closed
                raise ProtocolError("the connection closed in the answer's head")
        head = self._buffer[:end]
        del self._buffer[: end + 4]
        return head

    def _exactly(self, size: int) -> Iterator[bytes]:
        while size > 0:
            chunk = self._take(min(size, RECV_BYTES))
            if not chunk:
                raise ProtocolError("the connection closed in the answer's body")
            size -= len(chunk)
            yield chunk

    def _chunk_size(self) -> int:
        line = self._line().split(b";", 1)[0].strip()
        try:
            return int(line, 16)
        except ValueError:
            raise ProtocolError(f"invalid chunk size {line[:20]!r}") from None

    def _crlf(self) -> None:
        if self._line():
            raise ProtocolError("a chunk longer than its size")

    def _line(self) -> bytes:
        while (end := self._buffer.find(b"\r\n")) < 0:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise ProtocolError(f"a line of the body exceeds {MAX_LINE_BYTES} bytes")
            if not self._fill():
                raise ProtocolError("the connection closed in the answer's body")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def _take(self, size: int) -> bytes:
        if not self._buffer and not self._fill():
            return b""
        chunk = bytes(self._buffer[:size])
        del self._buffer[:size]
        return chunk

    def _fill(self) -> bool:
        """Append what the socket has now, waiting at most until the deadline; False at its end."""
        if self._ended:
            return False
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(TOO_SLOW)
        self._sock.settimeout(left)
        try:
            data = self._sock.recv(RECV_BYTES)
        except TimeoutError:
            raise TimeoutError(TOO_SLOW) from None
        self._ended = not data
        self._buffer += data
        return bool(data)


def _headers(head: bytearray) -> dict[str, str]:
    lines = bytes(head).split(b"\r\n")[1:]
    if len(lines) > MAX_HEADERS:
        raise ProtocolError(f"more than {MAX_HEADERS} headers")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:
            raise ProtocolError(f"invalid header line {line[:40]!r}")
        key, text = name.decode("ascii").lower(), value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers
