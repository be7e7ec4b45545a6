"""The IMDS client's connections over loopback: kept alive between polls, reused only when that is safe,
a POST always on a connection of its own, and each way a connection fails a typed error."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from se_exporter.errors import IMDSConnectionError, IMDSTimeout
from se_exporter.imds.client import ClientSettings, IMDSClient, RateLimiter

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


def client(server: CountingServer, read: float = 5.0) -> IMDSClient:
    settings = ClientSettings(base_url=f"http://127.0.0.1:{server.server_address[1]}", timeout=read)
    imds = IMDSClient(settings, RateLimiter(min_interval=0))
    imds.get_document()  # the first call, whose timeout is the long one
    return imds


def test_one_connection_serves_every_poll(server: CountingServer) -> None:
    imds = client(server)
    documents = [imds.get_document() for _ in range(20)]
    imds.close()
    assert {document.incarnation for document in documents} == {1}
    assert server.connections == 1


def test_a_connection_is_not_reused_when_the_server_closes_it_or_an_answer_was_abandoned(
    server: CountingServer,
) -> None:
    server.close_after = True
    imds = client(server)
    for _ in range(2):
        imds.get_document()
    server.close_after = False
    server.stall = 0.5
    for _ in range(2):
        with pytest.raises(IMDSTimeout):
            imds.get_document() if imds.settings.timeout == 0.2 else _with_timeout(imds, 0.2).get_document()
    server.stall = 0.0
    imds.get_document()
    imds.close()
    assert server.connections == 6


def _with_timeout(imds: IMDSClient, read: float) -> IMDSClient:
    imds.settings = ClientSettings(base_url=imds.settings.base_url, timeout=read)
    return imds


def test_failures_have_the_clients_types(server: CountingServer) -> None:
    imds = client(server, read=0.2)
    server.stall = 1.0
    with pytest.raises(IMDSTimeout):
        imds.get_document()
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    refused = IMDSClient(ClientSettings(base_url=f"http://127.0.0.1:{port}"), RateLimiter(min_interval=0))
    with pytest.raises(IMDSConnectionError, match="ConnectError"):
        refused.get_document()
    server.stall = 0.0  # the stalled answer goes on in its own thread; the next request gets a connection of its own
    assert imds.get_document().incarnation == 1  # a fresh connection after the timeout
    imds.close()


def test_a_kept_connection_the_server_dropped_is_replaced_without_an_error(server: CountingServer) -> None:
    server.drop_idle = True
    imds = client(server)
    documents = [imds.get_document() for _ in range(4)]
    imds.close()
    assert [document.incarnation for document in documents] == [1] * 4 and server.connections == 5


def test_a_post_always_takes_a_new_connection_so_it_is_never_sent_twice(server: CountingServer) -> None:
    """A POST on a kept-alive connection found closed would have to be sent again: approving again is the
    approver's decision, after a fresh look at the event, never the transport's."""
    imds = client(server)
    imds.approve(["E1"])
    imds.approve(["E2"])
    imds.get_document()  # the GETs share their connection; each POST had its own
    imds.close()
    assert server.connections == 3
