"""What a collector answers is held inside our bounds (issue 45, points 1-3): a redirect keeps the records and
says so, an answer is read up to its byte bound and never inflated past it, and a collector that drips its
answer is given up at the export's deadline, so delivery goes on once it answers again. Over loopback, the
collector a raw TCP peer that answers as a misbehaving proxy or gateway would; the in-process pipeline
sends with the official OTLP/HTTP exporter, as the exporter does."""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection

from se_exporter.audit.records import AuditRecord
from se_exporter.otel import answers as collector_http
from se_exporter.simulator import EventPlan, SimWorld
from tests.hostile.test_memory_bounds import peak_kib
from tests.otel.conftest import InProcess, StartOTel, build_in_process
from tests.support.exposition import value
from tests.support.raw_peer import RawPeer, drip
from tests.support.wait import wait_for

TAKEN = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
REDIRECT = b"HTTP/1.1 302 Found\r\nLocation: https://login.example/sso\r\nContent-Length: 0\r\n\r\n"
MIB = 1 << 20


def records(*numbers: int) -> list[AuditRecord]:
    return [AuditRecord("scheduled_event.approval", "INFO", f"record {n}", {}, n, f"uid-{n}") for n in numbers]


def pipeline_to(peer: RawPeer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **extra: str) -> InProcess:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": peer.url, "OTEL_BSP_SCHEDULE_DELAY": "50", **extra}
    return build_in_process(monkeypatch, environ, tmp_path / "spool")


@pytest.mark.parametrize("status", [b"301 Moved Permanently", b"302 Found", b"307 Temporary Redirect"])
def test_a_redirect_keeps_every_record_and_says_where_it_points(
    status: bytes, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A 302 to a login page was a success: 30 of 30 records left the spool, none counted, nothing said."""
    answer = REDIRECT.replace(b"302 Found", status)
    with RawPeer(lambda: [answer]) as peer:
        telemetry = pipeline_to(peer, monkeypatch, tmp_path)
        spool = telemetry.spool
        assert spool is not None
        telemetry.append(records(*range(30)))
        wait_for(lambda: "not retried until the configuration changes" in caplog.text, 20, "the error line")
        assert spool.depth == 30 and spool.dropped == 0, "every record kept, none counted as lost"
        code = status.split()[0].decode()
        assert f"the collector answered {code}" in caplog.text
        assert "a redirect to 'https://login.example/sso'" in caplog.text
        telemetry.close(timeout=1)


def test_spans_answered_with_a_redirect_are_said_not_taken(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with RawPeer(lambda: [REDIRECT]) as peer:
        telemetry = pipeline_to(peer, monkeypatch, tmp_path, OTEL_LOGS_EXPORTER="none")
        assert isinstance(telemetry.tracer_provider, TracerProvider)
        with telemetry.tracer_provider.get_tracer("test").start_as_current_span("redirected"):
            pass
        wait_for(lambda: "1 of 1 spans dropped" in caplog.text, 20, "the spans' warning")
        assert "the collector answered 302 Found, a redirect" in caplog.text
        telemetry.close(timeout=1)


def zeros(total: int, sent: list[int], done: threading.Event | None = None) -> Iterator[bytes | float]:
    """A 200 whose body is ``total`` bytes of zeros, counting in ``sent`` what the client let through;
    ``done`` is set when the peer stops sending (the client closed the connection, or all was sent)."""
    try:
        yield b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n\r\n" % total
        for _ in range(total // MIB):
            yield b"\0" * MIB
            sent[0] += MIB
    finally:
        if done is not None:
            done.set()


def gzip_bomb(inflated: int) -> bytes:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = b"".join(squeeze.compress(b"\0" * MIB) for _ in range(inflated // MIB)) + squeeze.flush()
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Encoding: gzip\r\n"
    return head + b"Content-Length: %d\r\n\r\n" % len(body) + body


def test_a_huge_answer_is_read_only_up_to_its_bound(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """requests read a 100 MB answer whole (the exporter peaked at 246 MiB); now the connection is closed
    once the bound is passed, and the records count as taken (the collector said 200)."""
    sent, done = [0], threading.Event()
    with RawPeer(lambda: zeros(100 * MIB, sent, done)) as peer:
        telemetry = pipeline_to(peer, monkeypatch, tmp_path)
        spool = telemetry.spool
        assert spool is not None
        telemetry.append(records(1, 2, 3))
        wait_for(lambda: spool.depth == 0, 20, "the records taken")
        wait_for(done.is_set, 20, "the peer stopped sending")
        assert sent[0] <= 16 * MIB, f"{sent[0] / MIB:.0f} MiB read of a 100 MiB answer"
        telemetry.close(timeout=1)


@pytest.mark.posix  # its memory is read from /proc
@pytest.mark.parametrize(
    "answer",
    [pytest.param(lambda: zeros(100 * MIB, [0]), id="100 MB body"), pytest.param(None, id="gzip bomb")],
)
def test_the_exporter_holds_a_huge_or_inflating_answer_in_a_few_mib(
    answer: object, simulator: tuple[SimWorld, str], start_otel: StartOTel
) -> None:
    """A gzip bomb (0.5 MB that inflates to 512 MiB) took the exporter to 1,075 MiB: an OOM kill under
    the chart's 96 MiB, then a crash loop as every restart sends the records again."""
    bomb = gzip_bomb(256 * MIB) if answer is None else b""
    script = (lambda: [bomb]) if answer is None else answer
    world, url = simulator
    with RawPeer(script) as peer:  # type: ignore[arg-type]
        exporter = start_otel(url, None, env={"OTEL_EXPORTER_OTLP_ENDPOINT": peer.url, "OTEL_TRACES_EXPORTER": "none"})
        exporter.wait_ready()
        before = peak_kib(exporter)
        world.add_event(EventPlan("Reboot", notice=900))
        wait_for(lambda: peer.connections >= 1, 15, "the record sent")
        spooled = "azure_scheduled_events_log_spool_depth"
        wait_for(lambda: value(exporter.metrics(), spooled) == 0, 15, "the record taken")
        grown = (peak_kib(exporter) - before) / 1024
        assert grown < 8, f"the peak grew by {grown:.1f} MiB reading the answer"
        assert exporter.stop() == 0


def test_a_collector_dripping_its_answer_is_given_up_at_the_deadline_and_delivery_goes_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """requests' timeout is per read: one export never ended, and with the collector healthy again 0 of 30
    records arrived in 60 s, without a word until shutdown."""
    healthy = threading.Event()
    began: list[float] = []

    def script() -> Iterator[bytes | float]:
        began.append(time.monotonic())
        if healthy.is_set():
            return iter([TAKEN])
        return itertools.chain(drip(TAKEN[:-4], every=0.3), [b"\r\n\r\n"])  # 25 s of dripping

    with RawPeer(script) as peer:
        telemetry = pipeline_to(peer, monkeypatch, tmp_path, OTEL_EXPORTER_OTLP_TIMEOUT="1500")
        spool = telemetry.spool
        assert spool is not None
        telemetry.append(records(*range(30)))
        wait_for(lambda: "OTLP log export failing" in caplog.text, 20, "the outage said")
        assert "did not answer within the deadline" in caplog.text
        # The drip lasts 25 s; giving up within 12 s (8x the 1.5 s deadline, for a loaded machine) proves the deadline.
        assert time.monotonic() - began[0] < 12, "the export was given up at its 1.5 s deadline"
        healthy.set()
        wait_for(lambda: spool.depth == 0, 20, "every record delivered once the collector answers")
        assert spool.dropped == 0
        telemetry.close(timeout=1)


def test_the_deadline_reaches_the_socket_through_urllibs_public_extension_points() -> None:
    """The pool classes and connection classes are how the deadline finds the socket: if urllib3 stops
    using them, no request is watched and a dripping collector holds an export for ever."""
    with RawPeer(lambda: drip(TAKEN, every=0.5)) as peer:
        session = collector_http.CollectorSession(lambda _answer: None, lambda _error: None)
        began = time.monotonic()
        with pytest.raises(collector_http.AnswerTooSlow):
            session.post(peer.url + "/v1/logs", data=b"", timeout=1.0)
        assert time.monotonic() - began < 10, "the 1 s deadline, not a drip that succeeds for ever"
        adapter = session.get_adapter(peer.url)
        assert isinstance(adapter, HTTPAdapter)
        pool = adapter.poolmanager.connection_from_url(peer.url)
        assert type(pool).__name__ == "_Pool" and issubclass(pool.ConnectionCls, HTTPConnection)
        session.close()


def test_a_collector_that_answers_compressed_all_the_same_is_inflated_within_the_bound() -> None:
    seen: list[requests.Response] = []
    message = b"x" * 100
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = squeeze.compress(message) + squeeze.flush()
    head = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Encoding: gzip\r\n"
    with RawPeer(lambda: [head + b"Content-Length: %d\r\n\r\n" % len(body) + body]) as peer:
        session = collector_http.CollectorSession(seen.append, lambda _error: None)
        response = session.post(peer.url + "/v1/logs", data=b"", timeout=5.0)
        assert response.status_code == 400 and response.content == message
        assert b"accept-encoding: identity" in peer.received.lower()
        session.close()
    assert seen == [response]
