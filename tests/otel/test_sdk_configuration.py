"""Every OTEL_* variable works as the SDK and the official exporters read it (issue 37): headers,
compression, the sampler, span limits, TLS with a CA and a client certificate, and any exporter installed
under the SDK's entry points. Seen on the wire by a real receiver, or in what a vendor's exporter wrote."""

from __future__ import annotations

import os
import ssl
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from se_exporter.audit.records import AuditRecord
from se_exporter.simulator import EventPlan, SimWorld
from tests.otel.conftest import StartOTel, build_in_process
from tests.otlp import OTLPHttpReceiver
from tests.support.wait import wait_for
from tests.web.pki import PKI, make_pki

RECORD = AuditRecord("scheduled_event.approval", "INFO", "record 1", {"log.record.uid": "uid-1"}, 1, "uid-1")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_headers_compression_sampler_and_span_limits_are_the_sdks(
    otlp_http_receiver: OTLPHttpReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {
        **otlp_http_receiver.env,
        "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=t1,authorization=Bearer%20abc",
        "OTEL_EXPORTER_OTLP_LOGS_COMPRESSION": "gzip",
        "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "1",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    try:
        assert telemetry.spool is not None and telemetry.tracer_provider is not None
        telemetry.append([RECORD])
        with telemetry.tracer_provider.get_tracer("test").start_as_current_span("s", attributes={"a": 1, "b": 2}):
            pass
        otlp_http_receiver.wait_for_logs(timeout=20)
        (span,) = otlp_http_receiver.wait_for_spans(timeout=20)
    finally:
        telemetry.close(timeout=2)
    (logs,) = otlp_http_receiver.store.find_requests(signal="logs", accepted=True)
    assert logs.headers["x-tenant"] == "t1" and logs.headers["authorization"] == "Bearer abc"
    assert logs.content_encoding == "gzip"
    assert len(span.attributes) == 1, "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT is the SDK's"


def test_the_sampler_is_the_sdks(
    otlp_http_receiver: OTLPHttpReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {**otlp_http_receiver.env, "OTEL_TRACES_SAMPLER": "always_off", "OTEL_BSP_SCHEDULE_DELAY": "50"}
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    try:
        assert telemetry.spool is not None and telemetry.tracer_provider is not None
        with telemetry.tracer_provider.get_tracer("test").start_as_current_span("not sampled"):
            pass
        telemetry.append([RECORD])
        otlp_http_receiver.wait_for_logs(timeout=20)
    finally:
        telemetry.close(timeout=2)
    assert otlp_http_receiver.spans == [], "always_off: no span leaves the process"


@pytest.fixture
def https_receiver(pki: PKI) -> Iterator[OTLPHttpReceiver]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.path("server.crt"), pki.path("server.key"))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(pki.ca_file)
    with OTLPHttpReceiver(tls=context) as receiver:
        yield receiver


def test_tls_with_the_configured_ca_and_client_certificate(
    https_receiver: OTLPHttpReceiver, pki: PKI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {
        **https_receiver.env,
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(pki.ca_file),
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": str(pki.path("client.crt")),
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": str(pki.path("client.key")),
    }
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    try:
        assert telemetry.spool is not None
        telemetry.append([RECORD])
        (log,) = https_receiver.wait_for_logs(timeout=20)
    finally:
        telemetry.close(timeout=2)
    assert log.body == "record 1"


def test_without_the_ca_the_record_waits_in_the_spool(
    https_receiver: OTLPHttpReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    environ = {**https_receiver.env, "OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_TIMEOUT": "500"}
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    try:
        spool = telemetry.spool
        assert spool is not None
        telemetry.append([RECORD])
        wait_for(lambda: spool.depth == 1 and spool.dropped == 0, 5, "the record kept")
    finally:
        telemetry.close(timeout=2)
    assert https_receiver.logs == []


@pytest.mark.skipif(
    sys.platform == "win32",
    reason="the embeddable Windows CPython of tests/shipped ignores PYTHONPATH (its ._pth file names its paths)",
)
def test_an_exporter_installed_under_the_sdks_entry_points_is_used(
    simulator: tuple[SimWorld, str], start_otel: StartOTel, tmp_path: Path
) -> None:
    """A vendor's exporter, installed as a distribution with an ``opentelemetry_traces_exporter`` entry point,
    named by OTEL_TRACES_EXPORTER (``zipkin`` and the like were refused once)."""
    site = tmp_path / "site"
    (site / "listfile_exporter-1.0.dist-info").mkdir(parents=True)
    (site / "listfile_exporter-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: listfile-exporter\nVersion: 1.0\n", encoding="utf-8"
    )
    (site / "listfile_exporter-1.0.dist-info" / "entry_points.txt").write_text(
        "[opentelemetry_traces_exporter]\nlistfile = listfile_exporter:ListFileExporter\n", encoding="utf-8"
    )
    spans_file = tmp_path / "spans.txt"
    (site / "listfile_exporter.py").write_text(
        textwrap.dedent(
            f"""
            from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

            class ListFileExporter(SpanExporter):
                def export(self, spans):
                    with open({str(spans_file)!r}, "a", encoding="utf-8") as out:
                        out.writelines(span.name + "\\n" for span in spans)
                    return SpanExportResult.SUCCESS
            """
        ),
        encoding="utf-8",
    )
    world, url = simulator
    repo = Path(__file__).resolve().parents[2]
    env = {"OTEL_TRACES_EXPORTER": "listfile", "OTEL_LOGS_EXPORTER": "none"}
    exporter = start_otel(url, None, env={**env, "PYTHONPATH": os.pathsep.join([str(site), str(repo)])})
    exporter.wait_ready()
    world.add_event(EventPlan("Freeze", notice=600))
    wait_for(
        lambda: spans_file.exists() and "scheduled_events.poll" in spans_file.read_text(encoding="utf-8"),
        20,
        "poll spans written by the vendor's exporter",
    )
    assert exporter.stop() == 0
