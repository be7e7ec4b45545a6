"""At the bound on open connections nothing a client has sent is lost (issue 53, point 7): idle connections
make room first; beyond that, new ones wait in the listen backlog. exporter-toolkit's cache test sends 300
basic-auth requests at once: 19 to 37 of them were reset here, node_exporter answers all 300."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import httpx
import pytest

from se_exporter.web.config import WebConfig
from se_exporter.web.server import WebServer
from tests.web.conftest import HASH, PASSWORD

pytestmark = pytest.mark.full

Serve = Callable[..., WebServer]


def closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (what is left of an earlier answer is read first)."""
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return False
    except OSError:  # reset: closed too
        return True
    return True


def parallel_requests(server: WebServer, count: int) -> list[int | str]:
    """``count`` clients, each on a connection of its own, released at once; their status codes or errors."""
    start = threading.Barrier(count)
    results: list[int | str] = []
    lock = threading.Lock()

    def one() -> None:
        start.wait()
        try:
            response = httpx.get(
                f"http://127.0.0.1:{server.port}/metrics", auth=("prometheus", PASSWORD), trust_env=False, timeout=60
            )
            outcome: int | str = response.status_code
        except httpx.HTTPError as error:
            outcome = type(error).__name__
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("cap", [None, 16], ids=["the bound", "a bound of 16"])
def test_every_one_of_300_requests_at_once_is_answered(serve: Serve, cap: int | None) -> None:
    server = serve(WebConfig(basic_auth_users={"prometheus": HASH}))
    if cap is not None:
        server.max_connections = cap
    results = parallel_requests(server, 300)
    assert sorted(results, key=str) == [200] * 300, {str(r): results.count(r) for r in set(results)}


def test_idle_connections_make_room_first(serve: Serve) -> None:
    """At the bound, a kept-alive connection waiting for its next request is closed for a new client."""
    server = serve(None)
    server.max_connections = 4
    idle = []
    for _ in range(4):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        sock.sendall(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")  # answered, and kept alive
        idle.append(sock)
    try:
        response = httpx.get(f"http://127.0.0.1:{server.port}/metrics", trust_env=False, timeout=5)
        assert response.status_code == 200
        assert closed(idle[0]), "the oldest idle connection made room"
    finally:
        for sock in idle:
            sock.close()
