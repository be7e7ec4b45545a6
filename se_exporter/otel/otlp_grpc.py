"""OTLP/gRPC requests: one channel, one ``Export`` call per request, its answer sorted as the OTLP
specification says (``common/outcome.py``).

The SDK's gRPC exporters retry on their own and report every answer as a plain success or failure:
a partial success rejecting every record counted as delivered, and the log shipper could not tell a
refusal worth retrying from one that is not. This makes the ``Export`` call with the request's bytes
(``otel/otlp_proto.py`` encodes them) and reads the ``partial_success`` and the status code.
``grpcio`` is the optional extra ``[grpc]``: imported only when ``OTEL_EXPORTER_OTLP_PROTOCOL=grpc``.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

from se_exporter.common.httpio import redacted
from se_exporter.common.outcome import Outcome
from se_exporter.errors import ConfigError
from se_exporter.otel.config import SignalConfig
from se_exporter.otel.otlp_answers import partial_success, retry_delay

# Per the OTLP specification; RESOURCE_EXHAUSTED only when the server says when to come back (RetryInfo).
RETRYABLE_CODES = frozenset({"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"})
_METHODS = {  # signal -> the Export method of its collector service
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
}


class OTLPGrpcClient:
    """One signal's endpoint; ``close()`` from another thread cancels a call in progress."""

    def __init__(self, signal: SignalConfig, kind: str, user_agent: str) -> None:
        try:
            import grpc
        except ImportError:
            raise ConfigError(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs the grpc extra: pip install "
                "'azure-scheduled-events-exporter[grpc]' (or use http/protobuf)"
            ) from None
        url = urllib.parse.urlsplit(signal.endpoint if "://" in signal.endpoint else f"http://{signal.endpoint}")
        if not url.hostname:
            raise ConfigError(f"OTLP endpoint {redacted(signal.endpoint)!r}: a host is needed")
        target = f"{url.hostname}:{url.port or 4317}" if ":" not in url.hostname else f"[{url.hostname}]:{url.port}"
        insecure = signal.insecure if signal.insecure is not None else url.scheme == "http"
        options = [("grpc.primary_user_agent", user_agent)]
        compression = grpc.Compression.Gzip if signal.compression == "gzip" else grpc.Compression.NoCompression
        if insecure:
            self._channel = grpc.insecure_channel(target, options=options, compression=compression)
        else:
            self._channel = grpc.secure_channel(
                target, _credentials(grpc, signal), options=options, compression=compression
            )
        self._export = self._channel.unary_unary(_METHODS[kind])  # bytes in, bytes out: no serializers
        self._metadata = tuple((name.lower(), value) for name, value in signal.headers.items())
        self._timeout = signal.timeout
        self._grpc = grpc

    def post(self, request: bytes) -> Outcome:
        """What became of one ``Export`` call (never raises for what the network or the collector does)."""
        try:
            response = self._export(request, timeout=self._timeout, metadata=self._metadata)
        except self._grpc.RpcError as error:
            code = error.code()
            name = code.name if code is not None else "UNKNOWN"
            retry_after = _retry_after(error)
            retryable = name in RETRYABLE_CODES or (name == "RESOURCE_EXHAUSTED" and retry_after is not None)
            return Outcome.refused(
                f"the collector answered {name}: {error.details() or 'no details'}",
                retryable=retryable,
                retry_after=retry_after,
            )
        except ValueError as error:  # the channel was closed (shutting down)
            return Outcome.refused(f"the exporter is stopping ({error})", retryable=True)
        try:
            return Outcome.taken(*partial_success(response))
        except ValueError:  # not a protobuf answer: the collector took the request all the same
            return Outcome.taken(0, "")

    def close(self) -> None:
        self._channel.close()


def _retry_after(error: Any) -> float | None:
    """The delay in the ``google.rpc.RetryInfo`` of the call's trailers, if the server sent one."""
    try:
        raw = dict(error.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
        return None if raw is None else retry_delay(raw)
    except (ValueError, TypeError):
        return None


def _credentials(grpc: Any, signal: SignalConfig) -> Any:
    return grpc.ssl_channel_credentials(
        root_certificates=_read(signal.certificate) if signal.certificate else None,
        private_key=_read(signal.client_key) if signal.client_key else None,
        certificate_chain=_read(signal.client_certificate) if signal.client_certificate else None,
    )


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"OTEL_EXPORTER_OTLP_*CERTIFICATE/CLIENT_KEY: cannot read {path}: {error}") from None
