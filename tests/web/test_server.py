"""The accept loop: serves concurrent clients, stops promptly and releases the port."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from se_exporter.web.server import WebServer
from tests.web.conftest import tiny_app


def _port_is_free(port: int) -> bool:
    """Whether a restarted exporter could listen there (SO_REUSEADDR, as ours: TIME_WAIT is no obstacle)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
            probe.listen()
        except OSError:
            return False
        return True


def test_serves_concurrent_clients_then_stops_and_releases_the_port() -> None:
    server = WebServer(tiny_app(), "127.0.0.1", 0)
    server.start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: httpx.get(url, trust_env=False, timeout=5), range(32)))
    assert {answer.status_code for answer in answers} == {200}
    assert all("se_web_test_up 1.0" in answer.text for answer in answers)
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 4.0, "a stop that hangs gives up after its 5 s join"
    assert _port_is_free(server.port)


def test_a_server_that_never_started_stops_at_once() -> None:
    server = WebServer(tiny_app(), "127.0.0.1", 0)
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 4.0, "a stop that hangs gives up after its 5 s join"
    assert _port_is_free(server.port)
