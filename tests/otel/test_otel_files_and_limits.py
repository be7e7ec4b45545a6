"""What the OTLP exporters would read later, read at start (issue 45, point 7), and span attribute values
bounded where the user set no limit (point 6)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from se_exporter.errors import ConfigError
from se_exporter.otel.config import SPAN_ATTRIBUTE_LENGTH, parse_otel_environment
from se_exporter.simulator import SimWorld
from tests.otel.conftest import InProcess, StartOTel, build_in_process
from tests.otlp import OTLPReceiver

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example:4318"}
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize(
    "variable",
    [
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        "OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
    ],
)
@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda path: None, "No such file or directory"),
        (lambda path: path.mkdir(), "it is a directory, not a regular file"),
        (lambda path: path.write_text("not a certificate\n"), "holds no PEM block"),
        (lambda path: path.write_bytes(b"\0" * (2 << 20)), "larger than 1 MiB"),
    ],
    ids=["missing", "a directory", "not PEM", "too large"],
)
def test_a_certificate_or_key_that_cannot_be_used_names_its_variable(
    variable: str, make: object, problem: str, tmp_path: Path
) -> None:
    """A missing CA file started the exporter; then HTTP said the collector refused the connection (it was
    up) and gRPC printed the library's traceback."""
    path = tmp_path / "ca.pem"
    make(path)  # type: ignore[operator]
    with pytest.raises(ConfigError, match=rf"^{variable}={re.escape(repr(str(path)))}: .*{problem}"):
        parse_otel_environment({**ENDPOINT, variable: str(path)})


def test_a_readable_pem_file_is_taken_and_a_signal_not_exported_is_not_checked(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text(PEM)
    parse_otel_environment({**ENDPOINT, "OTEL_EXPORTER_OTLP_CERTIFICATE": str(tmp_path / "ca.pem")})
    parse_otel_environment({"OTEL_EXPORTER_OTLP_CERTIFICATE": str(tmp_path / "missing.pem")})  # export is off


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_missing_ca_file_is_a_startup_error_in_one_line(
    protocol: str, simulator: tuple[SimWorld, str], start_otel: StartOTel, tmp_path: Path
) -> None:
    _, url = simulator
    missing = tmp_path / "missing-ca.pem"
    env = {**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_EXPORTER_OTLP_CERTIFICATE": str(missing)}
    exporter = start_otel(url, None, env=env)
    assert exporter.proc.wait(20) == 2
    errors = [line for line in exporter.logs().splitlines() if "OTEL_EXPORTER_OTLP_CERTIFICATE" in line]
    assert len(errors) == 1 and "No such file or directory" in errors[0]
    assert "Traceback" not in exporter.logs()


@pytest.mark.parametrize(
    ("environ", "lengths"),
    [
        ({}, (SPAN_ATTRIBUTE_LENGTH, SPAN_ATTRIBUTE_LENGTH)),
        ({"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "100"}, (None, None)),  # the SDK applies it to both
        ({"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "100"}, (SPAN_ATTRIBUTE_LENGTH, None)),  # events: ours
    ],
)
def test_attribute_values_are_bounded_only_where_the_user_set_no_limit(
    environ: dict[str, str], lengths: tuple[int | None, int | None]
) -> None:
    """(span events' and the general limit, spans' own): None where the SDK reads the user's."""
    config = parse_otel_environment(environ)
    assert (config.attribute_length, config.span_attribute_length) == lengths


@pytest.fixture
def pipeline(
    otlp_receiver: OTLPReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[InProcess]:
    environ = {**otlp_receiver.env, "OTEL_BSP_SCHEDULE_DELAY": "50", **getattr(request, "param", {})}
    telemetry = build_in_process(monkeypatch, environ, tmp_path / "spool")
    yield telemetry
    telemetry.close(timeout=2)


@pytest.mark.parametrize(
    ("pipeline", "kept", "kept_on_events"),
    [
        ({}, SPAN_ATTRIBUTE_LENGTH, SPAN_ATTRIBUTE_LENGTH),
        ({"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "100"}, 100, SPAN_ATTRIBUTE_LENGTH),
        ({"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "50"}, 50, 50),
    ],
    indirect=["pipeline"],
)
def test_a_huge_description_reaches_the_collector_cut_on_spans_and_span_events(
    otlp_receiver: OTLPReceiver, pipeline: InProcess, kept: int, kept_on_events: int
) -> None:
    assert pipeline.tracer_provider is not None
    description = "d" * 3_500_000
    with pipeline.tracer_provider.get_tracer("test").start_as_current_span("lifecycle") as span:
        span.set_attribute("scheduled_event.description", description)
        span.add_event("scheduled", {"scheduled_event.description": description})
    (received,) = otlp_receiver.wait_for_spans(timeout=20)
    assert received.attributes["scheduled_event.description"] == "d" * kept
    assert received.events[0].attributes["scheduled_event.description"] == "d" * kept_on_events


def test_grpc_without_the_extra_is_one_line_naming_it() -> None:
    """Issue 56: without the [grpc] extra its exporter is not installed: the exporter says which extra, exit 2.
    The real command line, in a process where the SDK's entry point of the gRPC exporter is not found."""
    hide = (
        "import importlib.metadata as m, sys\n"
        "real = m.entry_points\n"
        "m.entry_points = lambda **kw: [p for p in real(**kw) if p.name != 'otlp_proto_grpc']\n"
        "from se_exporter.cli import main\n"
        "sys.exit(main(['--imds.url=http://127.0.0.1:9', '--web.listen-address=127.0.0.1:0']))\n"
    )
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
        "OTEL_SDK_DISABLED": "false",
    }
    result = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "se-exporter: error: OTLP over gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc) needs the grpc extra: "
        "pip install 'azure-scheduled-events-exporter[grpc]'"
    ]
