"""The IMDS transport over loopback: kept-alive connections, reused only when that is safe, and
the transport's own exception types for every way a connection fails (the client maps them to its own)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from se_exporter.imds.transport import ConnectError, IMDSTransport, ReadTimeout, Request, TransportError

DOC = b'{"DocumentIncarnation": 1, "Events": []}'


class CountingServer(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0
    close_after = False  # answer with "Connection: close"
    stall = 0.0  # seconds before answering
    drop_idle = False  # close the connection after answering, without saying so (an idle timeout)

    def get_request(self) -> tuple[socket.socket, Any]:
        self.connections += 1
        return super().get_request()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CountingServer

    def do_GET(self) -> None:
        time.sleep(self.server.stall)
        self.send_response(200)
        self.send_header("Content-Length", str(len(DOC)))
        if self.server.close_after:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(DOC)
        if self.server.drop_idle:
            self.close_connection = True

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[CountingServer]:
    srv = CountingServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


TARGET = "/metadata/scheduledevents?api-version=2020-07-01"


def get(transport: IMDSTransport, port: int, read: float = 5.0, *, consume: bool = True) -> tuple[int, bytes]:
    request = Request("GET", "127.0.0.1", port, TARGET, {"Metadata": "true"})
    answer = transport.send(request, time.monotonic() + read)
    body = b"".join(answer.chunks) if consume else b""
    answer.close()
    return answer.status, body


def test_one_connection_serves_every_poll(server: CountingServer) -> None:
    transport = IMDSTransport()
    answers = [get(transport, server.server_address[1]) for _ in range(20)]
    transport.close()
    assert {status for status, _ in answers} == {200} and answers[0][1] == DOC
    assert server.connections == 1


def test_a_connection_is_not_reused_when_the_server_closes_it_or_the_body_was_not_read(
    server: CountingServer,
) -> None:
    transport = IMDSTransport()
    server.close_after = True
    for _ in range(3):
        get(transport, server.server_address[1])
    server.close_after = False
    for _ in range(3):
        get(transport, server.server_address[1], consume=False)  # abandoned answers
    transport.close()
    assert server.connections == 6


def test_failures_have_the_transports_types(server: CountingServer) -> None:
    transport = IMDSTransport()
    server.stall = 1.0
    with pytest.raises(ReadTimeout):
        get(transport, server.server_address[1], read=0.2)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ConnectError) as refused:
        get(transport, port)
    assert isinstance(refused.value, TransportError) and "ConnectionRefusedError" in str(refused.value)
    server.stall = 0.0
    assert get(transport, server.server_address[1])[0] == 200  # a fresh connection after the timeout


def test_a_kept_connection_the_server_dropped_is_replaced_without_an_error(server: CountingServer) -> None:
    transport = IMDSTransport()
    server.drop_idle = True
    answers = [get(transport, server.server_address[1]) for _ in range(5)]
    transport.close()
    assert [status for status, _ in answers] == [200] * 5 and server.connections == 5


def test_a_post_always_takes_a_new_connection_so_it_is_never_sent_twice(server: CountingServer) -> None:
    """A POST on a kept-alive connection found closed would have to be sent again: approving again is the
    approver's decision, after a fresh look at the event, never the transport's."""
    transport = IMDSTransport()
    port = server.server_address[1]
    get(transport, port)
    request = Request("POST", "127.0.0.1", port, TARGET, {"Metadata": "true"}, b'{"StartRequests": []}')
    answer = transport.send(request, time.monotonic() + 5.0)
    assert b"".join(answer.chunks) == DOC
    answer.close()
    get(transport, port)  # the GETs share their connection; the POST had its own
    transport.close()
    assert server.connections == 2
