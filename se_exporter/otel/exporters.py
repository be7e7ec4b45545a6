"""Each signal's exporters, found as the SDK finds them (its entry points) and built as it builds them, with
what se-exporter adds to the official OTLP ones: the timeout in the specification's unit (``otel/config.py``)
and a watch on the collector's answers (``otel/answers.py``). Imported only when a signal is exported;
gRPC only when an exporter needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from se_exporter.errors import ConfigError
from se_exporter.otel.answers import MAX_ANSWER_BYTES, Answers, grpc_exporter_class
from se_exporter.otel.config import ENTRY_POINT_GROUPS, GRPC_INSTALL, SignalConfig

# A collector's gRPC answer, decompressed, at most this (gRPC's own default is 4 MiB): as OTLP/HTTP's bound.
_GRPC_ANSWER_BOUND = (("grpc.max_receive_message_length", MAX_ANSWER_BYTES),)


@dataclass(frozen=True, slots=True)
class Built:
    """An exporter, its entry-point name and, for the official OTLP ones, the watch on its answers."""

    name: str
    exporter: Any  # a SpanExporter or a LogRecordExporter
    answers: Answers | None


def build(signal: str, config: SignalConfig) -> list[Built]:
    return [_one(signal, name, config.timeout) for name in config.exporters]


def _one(signal: str, name: str, timeout: float | None) -> Built:
    (point,) = entry_points(group=ENTRY_POINT_GROUPS[signal], name=name)  # config.py checked it is installed
    try:
        exporter_class = point.load()
        if name == "otlp_proto_grpc":
            import grpc  # noqa: F401 - what it needs, even if its module was loaded already
    except ImportError as error:
        hint = f" ({GRPC_INSTALL})" if name == "otlp_proto_grpc" else ""
        raise ConfigError(f"the {signal} exporter {name!r} cannot be loaded: {error}{hint}") from None
    if name == "otlp_proto_http":
        from se_exporter.otel.collector_http import CollectorSession

        answers = Answers(_response(signal))
        session = CollectorSession(answers.http_answer, answers.http_error)
        return Built(name, exporter_class(timeout=timeout, session=session), answers)
    if name == "otlp_proto_grpc":
        answers = Answers(_response(signal))
        watched = grpc_exporter_class(exporter_class, answers)
        return Built(name, watched(timeout=timeout, channel_options=_GRPC_ANSWER_BOUND), answers)
    return Built(name, exporter_class(), None)  # the console's, a vendor's: as the SDK would build it


def _response(signal: str) -> type[Any]:
    """The protobuf class of a collector's answer to an export of ``signal``."""
    if signal == "logs":
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

        return ExportLogsServiceResponse
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    return ExportTraceServiceResponse
