"""Every private name of a library that se-exporter uses, where no public API exists (DESIGN.md, The stack):
each pinned here, so an upgrade that renames or reshapes one fails this test rather than losing a bound or
an answer silently. The IMDS deadline needs none: it is a public ``httpx.BaseTransport`` on httpcore's
documented network backend (``tests/test_imds_deadline.py`` holds what it does)."""

from __future__ import annotations

import inspect
from typing import Any

import httpx
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.sdk._logs import ReadableLogRecord

from se_exporter.imds.client import DeadlineTransport
from se_exporter.otel.answers import CollectorAnswers, grpc_exporter_class


class _Answer(Message):
    pass


def test_the_grpc_exporter_still_makes_its_channel_where_the_answers_are_watched() -> None:
    """``grpc_exporter_class`` overrides ``_initialize_channel_and_stub`` and rewraps ``_channel`` and
    ``_client`` with ``_stub``: every gRPC answer passes our interceptor only while those exist."""
    for exporter in (GrpcLogExporter, GrpcSpanExporter):
        assert callable(getattr(exporter, "_initialize_channel_and_stub", None)), exporter
        watched: Any = grpc_exporter_class(exporter, CollectorAnswers(_Answer))(endpoint="http://127.0.0.1:9")
        assert {"_channel", "_client", "_stub"} <= set(vars(watched)), exporter
        assert type(watched._channel).__name__ == "_Channel", "the channel is the intercepted one"
        watched.shutdown()


def test_the_sdk_log_record_types_the_pipeline_builds_are_where_it_imports_them() -> None:
    """The Python logs SDK is experimental (``opentelemetry.sdk._logs``); ``otel/pipeline.py`` builds
    ``ReadableLogRecord(log_record, resource, scope)`` and hands it to ``export()``."""
    parameters = list(inspect.signature(ReadableLogRecord).parameters)
    assert parameters[:3] == ["log_record", "resource", "instrumentation_scope"]


def test_the_imds_transport_is_httpx_public_transport_api() -> None:
    transport = DeadlineTransport(httpx.Limits(max_connections=1))
    assert isinstance(transport, httpx.BaseTransport)
    assert not isinstance(transport, httpx.HTTPTransport), "nothing of httpx's own transport is reached into"
    transport.close()
