"""Pytest fixtures for the OTLP test receiver.

Enable them for the whole suite from ``tests/conftest.py`` with either::

    pytest_plugins = ["tests.otlp.fixtures"]

or::

    from tests.otlp.fixtures import otlp_grpc_receiver, otlp_http_receiver, otlp_receiver  # noqa: F401

Each fixture yields a started receiver on 127.0.0.1 (fresh port, fresh store) and stops it at
teardown. Use ``receiver.env`` to point a subprocess at it::

    proc = subprocess.Popen([...], env={**os.environ, **otlp_http_receiver.env})
    logs = otlp_http_receiver.wait_for_logs(event_name="scheduled_event.transition", timeout=10)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import OTLPGrpcReceiver, OTLPHttpReceiver, OTLPReceiver, TelemetryStore

__all__ = ["otlp_grpc_receiver", "otlp_http_receiver", "otlp_receiver"]


@pytest.fixture
def otlp_http_receiver() -> Iterator[OTLPHttpReceiver]:
    """OTLP/HTTP receiver (``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``)."""
    with OTLPHttpReceiver() as receiver:
        yield receiver


@pytest.fixture
def otlp_grpc_receiver() -> Iterator[OTLPGrpcReceiver]:
    """OTLP/gRPC receiver (``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``, insecure)."""
    with OTLPGrpcReceiver() as receiver:
        yield receiver


@pytest.fixture(params=["http/protobuf", "grpc"])
def otlp_receiver(request: pytest.FixtureRequest) -> Iterator[OTLPReceiver]:
    """Parametrized: the test runs once against each transport."""
    cls = OTLPHttpReceiver if request.param == "http/protobuf" else OTLPGrpcReceiver
    with cls(TelemetryStore()) as receiver:
        yield receiver
