"""/metrics renders: shared by what changes the answer, bounded in number, dropped when their clients leave,
and never in front of the probes (issue 45, point 5). The real server on loopback, with a slow WSGI
application standing in for a render of a thousand events."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, Gauge

from se_exporter.web.endpoints import make_app
from se_exporter.web.renders import MAX_RENDERS, SHARE_SECONDS
from se_exporter.web.server import WebServer
from tests.support.wait import wait_for

RENDER_SECONDS = 0.4


class SlowApp:
    """The exporter's application, each /metrics render taking ``RENDER_SECONDS``; renders counted."""

    def __init__(self) -> None:
        registry = CollectorRegistry(auto_describe=True)
        Gauge("se_web_test_up", "A gauge for the web tests.", registry=registry).set(1)
        Gauge("se_web_test_other", "Another gauge.", registry=registry).set(2)
        self._app = make_app(registry, "/metrics", lambda: True, "test")
        self.renders: list[str] = []
        self.release = threading.Event()
        self.release.set()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ["PATH_INFO"] == "/metrics":
            self.renders.append(environ["QUERY_STRING"])
            time.sleep(RENDER_SECONDS)
            self.release.wait(60)  # a held render: released by the test, or at its end
        body: Iterable[bytes] = self._app(environ, start_response)
        return body


@pytest.fixture
def slow() -> Iterator[tuple[SlowApp, WebServer, list[object]]]:
    app = SlowApp()
    snapshot: list[object] = [object()]  # what /metrics is made of; a poll replaces it
    server = WebServer(app, "127.0.0.1", 0, snapshot=lambda: snapshot[0])
    server.start()
    yield app, server, snapshot
    app.release.set()
    server.stop()


def get(server: WebServer, target: str, timeout: float = 10, **kwargs: Any) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{server.port}{target}", trust_env=False, timeout=timeout, **kwargs)


def test_scrapes_that_differ_only_in_other_parameters_share_one_render(
    slow: tuple[SlowApp, WebServer, list[object]],
) -> None:
    """The sharing key held the whole query string: ``?x=1``, ``?x=2``… were each rendered in full."""
    app, server, _ = slow
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda n: get(server, f"/metrics?x={n}"), range(8)))
    assert {answer.status_code for answer in answers} == {200}
    assert len(app.renders) == 1


def test_what_changes_the_answer_is_rendered_apart(slow: tuple[SlowApp, WebServer, list[object]]) -> None:
    app, server, _ = slow
    targets = [
        ("/metrics", {}),
        ("/metrics?name[]=se_web_test_up", {}),
        ("/metrics?name[]=se_web_test_other", {}),
        ("/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}),
    ]
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda pair: get(server, pair[0], headers=pair[1]), targets))
    assert "se_web_test_other" not in answers[1].text and "se_web_test_up" not in answers[2].text
    assert answers[3].headers["Content-Type"].startswith("application/openmetrics-text")
    assert len(app.renders) == 4


def test_a_finished_render_is_shared_until_the_snapshot_changes(
    slow: tuple[SlowApp, WebServer, list[object]],
) -> None:
    app, server, snapshot = slow
    assert get(server, "/metrics").status_code == 200
    assert get(server, "/metrics?again").status_code == 200
    assert len(app.renders) == 1, "the same snapshot, within a second: the same answer"
    snapshot[0] = object()  # a poll
    assert get(server, "/metrics").status_code == 200
    assert len(app.renders) == 2
    time.sleep(SHARE_SECONDS)  # the "seconds until" gauges are never older than this
    assert get(server, "/metrics").status_code == 200
    assert len(app.renders) == 3


def queued(caplog: pytest.LogCaptureFixture) -> int:
    """Renders the server queued so far (its debug line)."""
    return sum(record.getMessage() == "render queued" for record in caplog.records)


def test_distinct_renders_are_bounded_and_the_excess_told_to_come_back(
    slow: tuple[SlowApp, WebServer, list[object]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="se_exporter.web")
    app, server, _ = slow
    app.release.clear()  # renders hold until the test lets them go
    names = [f"/metrics?name[]=se_web_test_{n}" for n in range(MAX_RENDERS + 3)]
    with ThreadPoolExecutor(len(names)) as pool:
        waiting = [pool.submit(get, server, name) for name in names[:MAX_RENDERS]]
        wait_for(lambda: queued(caplog) == MAX_RENDERS, 10, "the distinct renders pending (one running, held)")
        refused = [get(server, name) for name in names[MAX_RENDERS:]]
        app.release.set()
        assert {answer.result().status_code for answer in waiting} == {200}
    assert {(answer.status_code, answer.headers.get("Retry-After")) for answer in refused} == {(503, "1")}
    assert len(app.renders) == MAX_RENDERS


def test_a_render_whose_clients_left_is_dropped_before_it_starts(
    slow: tuple[SlowApp, WebServer, list[object]], caplog: pytest.LogCaptureFixture
) -> None:
    """Renders were not dropped when their client left: a flood of clients that gave up kept the render
    thread busy long after."""
    caplog.set_level(logging.DEBUG, logger="se_exporter.web")
    app, server, _ = slow
    app.release.clear()
    first = threading.Thread(target=get, args=(server, "/metrics?name[]=held"))
    first.start()
    wait_for(lambda: app.renders == ["name[]=held"], 10, "the first render running, held")
    for n in range(3):  # queued behind it, then gone
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(f"GET /metrics?name[]=gone{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode())

    def gone() -> int:
        return sum(getattr(record, "err", "") == "ClientGone" for record in caplog.records)

    wait_for(lambda: gone() == 3, 10, "the server noticed the three clients left")
    app.release.set()
    first.join(10)
    assert get(server, "/metrics?name[]=after").status_code == 200  # rendered after whatever was queued
    assert app.renders == ["name[]=held", "name[]=after"], "the renders nobody waited for were dropped"


def test_the_probes_never_wait_behind_renders(slow: tuple[SlowApp, WebServer, list[object]]) -> None:
    """Four threads sending distinct scrapes made /-/healthy take 23 to over 30 s (the chart's liveness
    probe allows 3 s, three times). Proven by order, not by time: every render is held, none finishes while
    the probes are asked, under a flood of distinct scrapes; a probe that waited behind a render would never
    be answered (its client gives up after 5 s; the render is held for a minute)."""
    app, server, _ = slow
    app.release.clear()
    stop = threading.Event()

    def flood(worker: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            with contextlib.suppress(httpx.HTTPError):
                httpx.get(f"http://127.0.0.1:{server.port}/metrics?name[]=w{worker}-{n}", trust_env=False, timeout=0.5)

    with ThreadPoolExecutor(4) as pool:
        for worker in range(4):
            pool.submit(flood, worker)
        try:
            wait_for(lambda: len(app.renders) >= 1, 30, "a render held")
            for _ in range(5):
                for probe in ("/-/healthy", "/-/ready", "/"):
                    assert get(server, probe, timeout=5).status_code == 200, probe
            assert not app.release.is_set() and len(app.renders) >= 1  # still held: the probes passed it by
        finally:
            stop.set()
    app.release.set()
    assert get(server, "/metrics").status_code == 200
