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
from se_exporter.otel.answers import Answers, grpc_exporter_class
from se_exporter.otel.config import ENTRY_POINT_GROUPS, SignalConfig

GRPC_HINT = "pip install 'azure-scheduled-events-exporter[grpc]'"


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
        hint = f" ({GRPC_HINT})" if name == "otlp_proto_grpc" else ""
        raise ConfigError(f"the {signal} exporter {name!r} cannot be loaded: {error}{hint}") from None
    if name == "otlp_proto_http":
        answers = Answers(_response(signal))
        session = _session()
        session.hooks["response"].append(answers.http_hook)
        return Built(name, exporter_class(timeout=timeout, session=session), answers)
    if name == "otlp_proto_grpc":
        answers = Answers(_response(signal))
        return Built(name, grpc_exporter_class(exporter_class, answers)(timeout=timeout), answers)
    return Built(name, exporter_class(), None)  # the console's, a vendor's: as the SDK would build it


def _response(signal: str) -> type[Any]:
    """The protobuf class of a collector's answer to an export of ``signal``."""
    if signal == "logs":
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

        return ExportLogsServiceResponse
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    return ExportTraceServiceResponse


def _session() -> Any:
    """A ``requests.Session`` whose own CA wins: requests lets ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE``
    replace it (psf/requests#3829), so the CA of ``OTEL_EXPORTER_OTLP_CERTIFICATE``, which the exporter puts
    on its session, was ignored wherever those are set. Proxies from the environment still apply."""
    import requests

    class Session(requests.Session):
        def merge_environment_settings(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
            settings: dict[str, Any] = super().merge_environment_settings(*args, **kwargs)
            if isinstance(self.verify, str):
                settings["verify"] = self.verify
            return settings

    return Session()
