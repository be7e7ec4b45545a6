"""A raw TCP peer on loopback that answers every connection with a script: bytes, pauses, and endless
streams. For what a well-behaved HTTP server never does (drip a status line, send 100 Continue for
ever), which is exactly what the clients' deadlines are about."""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator

# A script yields what to send next: bytes, or a float (seconds to pause). It ends when the peer closes.
Script = Callable[[], Iterable[bytes | float]]


class RawPeer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.received = b""
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.getsockname()[1]}"

    def __enter__(self) -> RawPeer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(2)
            with contextlib.suppress(TimeoutError):
                self.received += conn.recv(65536)  # the request (small): then answer
            for step in self.script():
                if self._stop.is_set():
                    return
                if isinstance(step, float):
                    time.sleep(step)
                else:
                    conn.sendall(step)


def drip(data: bytes, every: float = 0.2) -> Iterator[bytes | float]:
    """One byte at a time."""
    for index in range(len(data)):
        yield data[index : index + 1]
        yield every


def forever(data: bytes, every: float = 0.2) -> Iterator[bytes | float]:
    while True:
        yield data
        yield every


OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
DOCUMENT = b'{"DocumentIncarnation": 1, "Events": []}'

# Every way to hold a client before (or while) it reads the body, one byte or line at a time.
SLOW_ANSWERS: dict[str, Script] = {
    "status line dripped": lambda: drip(b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 200 + b"\r\n"),
    "headers dripped": lambda: [OK_HEAD, *drip(b"X-Pad: " + b"a" * 200 + b"\r\n")],
    "endless 100 Continue": lambda: forever(b"HTTP/1.1 100 Continue\r\n\r\n"),
    "chunk-size line dripped": lambda: [
        OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n",
        *drip(b"0000000000000000000000000000000000000028"),
    ],
    # A generator, never a list: "[head, *forever(...)]" would build an endless list in the peer's thread,
    # which once grew the test process to 24 GB long after the test had passed.
    "endless trailers": lambda: itertools.chain(
        [OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(DOCUMENT) + DOCUMENT + b"\r\n0\r\n"],
        forever(b"X-Trailer: 1\r\n"),
    ),
    "body dripped": lambda: [OK_HEAD + b"Content-Length: %d\r\n\r\n" % len(DOCUMENT), *drip(DOCUMENT)],
}
