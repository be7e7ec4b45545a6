"""The test peers' HTTP server is quiet about clients that hang up, and only about them (issue 29, point 14)."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from tests.support.quiet_server import QuietHTTPServer
from tests.support.wait import wait_for


@pytest.mark.parametrize(
    ("error", "printed"), [(BrokenPipeError, False), (ConnectionResetError, False), (KeyError, True)]
)
def test_a_client_that_hangs_up_prints_nothing_and_a_bug_still_does(
    error: type[Exception], printed: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    handled = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handled.set()
            raise error("raised by the handler")

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_address[1]), timeout=5) as client:
            client.sendall(b"GET / HTTP/1.0\r\n\r\n")
            client.recv(100)  # the server closes the connection once its handler failed
        wait_for(handled.is_set, 5, "the handler ran")
    finally:
        server.shutdown()
        server.server_close()
    assert ("Exception occurred during processing of request" in capfd.readouterr().err) is printed
