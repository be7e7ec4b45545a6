"""Clients that try to stop or starve the web server (issue 22, points 5, 7 and 8): raw sockets on loopback
against the real server. Each case once took /metrics and both probes down, or past Prometheus' 10 s
scrape timeout; now a scrape in the middle of the attack answers within a second."""

from __future__ import annotations

import contextlib
import itertools
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import bcrypt
import httpx
import pytest
from prometheus_client import CollectorRegistry, Gauge

from se_exporter.web import server as web_server
from se_exporter.web.config import WebConfig
from se_exporter.web.endpoints import make_app
from se_exporter.web.server import MAX_CONNECTIONS, WebServer
from tests.support.wait import wait_for

pytestmark = pytest.mark.full

Serve = Callable[..., WebServer]
# What a scrape during an attack may take at most: half the 10 s a slow client is given (web/server.py), which a
# scrape that waited behind one would take; a scrape takes milliseconds.
QUICK = 5.0


def scrape(server: WebServer, **kwargs: Any) -> httpx.Response:
    started = time.monotonic()
    answer = httpx.get(f"http://127.0.0.1:{server.port}/metrics", trust_env=False, timeout=10, **kwargs)
    took = time.monotonic() - started
    assert took < QUICK, f"a scrape took {took:.2f} s"
    return answer


@contextlib.contextmanager
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        yield opened
    finally:
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.close()


def connect(server: WebServer, opened: list[socket.socket], first: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    if first:
        sock.sendall(first)
    opened.append(sock)
    return sock


def test_waiting_connections_that_send_a_byte_while_new_ones_come_never_stop_the_server(serve: Serve) -> None:
    """More waiting connections than the bound, whose oldest send a byte while new ones connect, once
    killed the accept thread (a socket closed and unregistered in the same batch): /metrics and both
    probes then timed out for good while the process lived on."""
    server = serve(None)
    with sockets() as opened:
        for _ in range(MAX_CONNECTIONS + 20):
            connect(server, opened)
        for round_ in range(5):
            for sock in opened[:40]:
                with contextlib.suppress(OSError):
                    sock.send(b"G")
            for _ in range(40):
                connect(server, opened)
            assert scrape(server).status_code == 200, f"round {round_}"
        for path in ("/-/healthy", "/-/ready"):
            assert httpx.get(f"http://127.0.0.1:{server.port}{path}", trust_env=False, timeout=5).status_code == 200


def test_slow_clients_neither_starve_a_scrape_nor_hold_on_for_ever(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 connections that sent one byte, and 20 that drip a byte a second: every scrape timed out."""
    monkeypatch.setattr(web_server, "HEAD_TIMEOUT_SECONDS", 2.0)
    server = serve(None)
    stop = threading.Event()
    with sockets() as opened:
        for _ in range(200):
            connect(server, opened, b"G")
        drippers = [connect(server, opened, b"G") for _ in range(20)]

        def drip() -> None:
            while not stop.wait(0.5):
                for sock in drippers:
                    with contextlib.suppress(OSError):
                        sock.send(b"E")

        dripping = threading.Thread(target=drip)
        dripping.start()
        try:
            for _ in range(5):
                assert scrape(server).status_code == 200
            for sock in drippers[:3]:  # each waits for the server to hang up on it, at the head's deadline (2 s)
                sock.settimeout(30)
                assert sock.recv(100) == b"", "a dripping client is disconnected at the head's deadline"
        finally:
            stop.set()
            dripping.join()


def test_a_wrong_password_flood_does_not_delay_a_scrape_with_known_credentials(serve: Serve) -> None:
    """At bcrypt cost 10 (about 15 checks a second), 64 clients guessing once delayed such a scrape 3.3 s."""
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(rounds=10)).decode()
    server = serve(WebConfig(basic_auth_users={"prometheus": hashed}))
    assert scrape(server, auth=("prometheus", "right")).status_code == 200  # bcrypt once; known from now on
    stop = threading.Event()
    refused: list[int] = []

    def guess(guesser: int) -> None:  # each guess another password: the same credentials share one check
        with httpx.Client(trust_env=False, timeout=30) as client:
            for attempt in itertools.count():
                if stop.is_set():
                    return
                with contextlib.suppress(httpx.HTTPError):
                    wrong = ("prometheus", f"wrong-{guesser}-{attempt}")
                    refused.append(client.get(f"http://127.0.0.1:{server.port}/metrics", auth=wrong).status_code)

    guessers = [threading.Thread(target=guess, args=(n,)) for n in range(64)]
    for thread in guessers:
        thread.start()
    try:
        wait_for(lambda: len(refused) >= len(guessers), 60, "the flood under way: a refusal a guesser")
        for _ in range(10):
            assert scrape(server, auth=("prometheus", "right")).status_code == 200
    finally:
        stop.set()
        for thread in guessers:
            thread.join()
    assert set(refused) <= {401, 429} and 429 in refused and 401 in refused


def test_head_answers_like_get_without_a_body_and_other_methods_are_refused(serve: Serve) -> None:
    server = serve(None)
    base = f"http://127.0.0.1:{server.port}"
    for path in ("/metrics", "/-/healthy", "/-/ready", "/"):
        get = httpx.get(base + path, trust_env=False, timeout=5)
        head = httpx.head(base + path, trust_env=False, timeout=5)
        assert (head.status_code, head.content) == (get.status_code, b""), path
        assert head.headers["Content-Length"] == get.headers["Content-Length"] != "0", path
        assert head.headers["Content-Type"] == get.headers["Content-Type"], path
    post = httpx.post(base + "/metrics", trust_env=False, timeout=5)
    assert (post.status_code, post.headers["Allow"]) == (405, "GET, HEAD")


def test_identical_scrapes_at_once_share_one_rendering(serve: Serve) -> None:
    """Memory holds one rendering of /metrics however many scrape at once (each is megabytes at 1,000 events)."""
    renders: list[float] = []
    registry = CollectorRegistry(auto_describe=True)

    def slow_value() -> float:
        renders.append(time.monotonic())
        time.sleep(0.3)  # the rendering that takes long: what a scrape would wait on
        return 1.0

    Gauge("slow_render", "A gauge whose collection takes 0.3 s.", registry=registry).set_function(slow_value)
    server = WebServer(make_app(registry, "/metrics", lambda: True, "test"), "127.0.0.1", 0)
    server.start()
    try:
        renders.clear()
        with httpx.Client(trust_env=False, timeout=10) as client:
            answers: list[httpx.Response] = []
            threads = [
                threading.Thread(target=lambda: answers.append(client.get(f"http://127.0.0.1:{server.port}/metrics")))
                for _ in range(20)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        server.stop()
    assert [answer.status_code for answer in answers] == [200] * 20
    assert len(renders) <= 3, f"{len(renders)} renderings for 20 scrapes at once"


def test_a_request_head_over_the_bound_is_refused(serve: Serve) -> None:
    server = serve(None)
    answer = httpx.get(
        f"http://127.0.0.1:{server.port}/metrics", trust_env=False, timeout=5, headers={"X-Big": "a" * (100 << 10)}
    )
    assert answer.status_code == 431
    assert scrape(server).status_code == 200


def test_many_connections_keep_the_server_within_its_file_descriptors(serve: Serve) -> None:
    if os.name == "posix":  # the clients live in this process too: a user's soft limit (1024) is too few
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 5 * MAX_CONNECTIONS:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 5 * MAX_CONNECTIONS), hard))
    server = serve(None)
    with sockets() as opened:
        for _ in range(3 * MAX_CONNECTIONS):  # each with a byte: on Linux a silent one waits in the kernel
            connect(server, opened, b"G")
        assert scrape(server).status_code == 200
        # At most MAX_CONNECTIONS stay open: the others were closed to make room (which ones depends on when each
        # connection's task first ran). Counted as they turn readable at their end, within a generous deadline.
        closed: set[socket.socket] = set()
        deadline, turn = time.monotonic() + 20, 0
        while len(closed) < 2 * MAX_CONNECTIONS - 10 and time.monotonic() < deadline:
            still = [sock for sock in opened if sock not in closed]
            turn = (turn + 500) % max(1, len(still))
            with selectors.DefaultSelector() as watch:  # Windows' select() takes 512 sockets: 500 at a time
                for sock in (still[turn:] + still[:turn])[:500]:
                    watch.register(sock, selectors.EVENT_READ)
                for key, _ in watch.select(0.5):
                    ended = key.fileobj
                    assert isinstance(ended, socket.socket)
                    closed.add(ended)  # readable at its end: EOF, or a reset
        assert len(closed) >= 2 * MAX_CONNECTIONS - 10, f"idle connections closed to make room: {len(closed)}"
