"""What the OpenTelemetry SDK does not decide, and what the exporter holds of OpenTelemetry, without importing
it: most VMs run without an OTLP endpoint, and then nothing of OpenTelemetry is imported at all (the SDK was
about a third of a started exporter's memory and start-up time, the API is 0.4 MiB). ``NoTelemetry`` is what
they get; ``otel.pipeline.build_telemetry`` builds the real one.

Everything else is read by the SDK and the official exporters themselves, from the process's environment:
endpoints and their per-signal variants, headers, compression, certificates and client keys, ``OTEL_BSP_*``,
span limits, the sampler, ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``. Decided here:

- Off unless asked for: a signal is exported when its exporter variable is set (``OTEL_TRACES_EXPORTER``,
  ``OTEL_LOGS_EXPORTER``) or an endpoint applies to it (``OTEL_EXPORTER_OTLP_ENDPOINT``, or the signal's own
  ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` always wins.
- An exporter is any installed under the SDK's entry points (``opentelemetry_traces_exporter``,
  ``opentelemetry_logs_exporter``: ``console``, a vendor's), or ``otlp``: OTLP/HTTP with protobuf unless
  ``OTEL_EXPORTER_OTLP[_<SIGNAL>]_PROTOCOL`` says ``grpc``, as the specification says (the Python SDK's own
  autoconfiguration, which is not used, would default to gRPC).
- ``OTEL_EXPORTER_OTLP[_<SIGNAL>]_TIMEOUT`` is milliseconds, as the specification says; the Python OTLP
  exporters read it as seconds (open-telemetry/opentelemetry-python#4044), so ``10000`` would wait almost
  three hours: it is read here and handed to them in seconds.
- A value the SDK or its exporters would misread silently, or fail on with a traceback, is a clear error; the
  certificate and key files the variables name are read (at most 1 MiB each), so that a missing one is a
  start-up error naming the variable.
- What se-exporter knows of itself and of this VM, as resource attributes (the pipeline merges them under
  what the SDK reads from the environment).
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from se_exporter.audit.records import AuditRecord
from se_exporter.common.files import read_text
from se_exporter.durable.spool import Spool
from se_exporter.errors import ConfigError
from se_exporter.imds.document import VMIdentity

if TYPE_CHECKING:
    from opentelemetry import trace


ENTRY_POINT_GROUPS = {"traces": "opentelemetry_traces_exporter", "logs": "opentelemetry_logs_exporter"}

OTLP_BY_PROTOCOL = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc"}

GRPC_INSTALL = "pip install 'azure-scheduled-events-exporter[grpc]'"

OTLP_EXPORTERS = frozenset(OTLP_BY_PROTOCOL.values())

DEFAULT_LOG_BATCH = 512  # OTEL_BLRP_MAX_EXPORT_BATCH_SIZE's default, the batch processor's and ours


# The span processor's queue and batch where OTEL_BSP_MAX_QUEUE_SIZE / _MAX_EXPORT_BATCH_SIZE are not set: the
# SDK's (2,048 and 512) bound spans by count alone, and 2,048 lifecycle spans of the largest events IMDS may
# list, held while a collector is away, took the DaemonSet's pod past its 96 MiB (BENCHMARKS.md).
SPAN_QUEUE, SPAN_BATCH = 512, 128


# A span attribute value at most this many characters where neither OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT nor
# OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT is set, a span event's where the first is not: the SDK keeps them whole,
# and a 3.5 MB Description on every lifecycle span, 512 of them queued while a collector is away, took the
# exporter to 118 MiB. The transition's log record, bounded by the spool's bytes, keeps the whole text.
SPAN_ATTRIBUTE_LENGTH = 4096

_ATTRIBUTE_LENGTHS = ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")

_SPAN_QUEUE_AND_BATCH = ("OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE")

_COMPRESSIONS = {"otlp_proto_http": ("none", "gzip", "deflate"), "otlp_proto_grpc": ("none", "gzip")}


# Counts and times the SDK parses with int() and falls back on its default, with a warning, when it cannot.
_POSITIVE = (
    "OTEL_BSP_SCHEDULE_DELAY",
    "OTEL_BSP_EXPORT_TIMEOUT",
    "OTEL_BSP_MAX_QUEUE_SIZE",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
)


HOW_TO_ENABLE = (
    "OpenTelemetry export is off: set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER / "
    "OTEL_LOGS_EXPORTER) to send spans and a log record per transition (docs/opentelemetry.md)"
)


@dataclass(frozen=True, slots=True)
class SignalConfig:
    """How one signal is exported: its exporters' entry-point names (none: not exported)."""

    exporters: tuple[str, ...] = ()
    timeout: float | None = None  # seconds, for the official OTLP exporters; None: their default (10 s)


@dataclass(frozen=True, slots=True)
class OTelConfig:
    disabled: bool
    traces: SignalConfig
    logs: SignalConfig
    log_batch_size: int = DEFAULT_LOG_BATCH
    span_queue: int | None = SPAN_QUEUE  # None: the SDK reads OTEL_BSP_MAX_QUEUE_SIZE
    span_batch: int | None = SPAN_BATCH  # None: the SDK reads OTEL_BSP_MAX_EXPORT_BATCH_SIZE
    # Value lengths of span attributes and of span events' (the general limit); None: the SDK reads the user's.
    attribute_length: int | None = SPAN_ATTRIBUTE_LENGTH
    span_attribute_length: int | None = SPAN_ATTRIBUTE_LENGTH

    @property
    def enabled(self) -> bool:
        """False when no pipeline is to be built at all."""
        return not self.disabled and bool(self.traces.exporters or self.logs.exporters)


def parse_otel_environment(environ: Mapping[str, str]) -> OTelConfig:
    """Read what the SDK does not decide; a bad value is a ``ConfigError`` naming the variable."""
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    if disabled:
        return OTelConfig(True, SignalConfig(), SignalConfig())
    for name in _POSITIVE:
        _positive(environ, (name,), "a positive whole number")
    batch = _positive(environ, ("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",), "a positive whole number")
    queue, span_batch = (_positive(environ, (name,), "a positive whole number") for name in _SPAN_QUEUE_AND_BATCH)
    if queue is not None and span_batch is not None and span_batch > queue:  # the SDK's ValueError, at start
        raise ConfigError(
            f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE={span_batch:g} is larger than OTEL_BSP_MAX_QUEUE_SIZE={queue:g}"
        )
    return OTelConfig(
        False,
        _signal(environ, "traces"),
        _signal(environ, "logs"),
        int(batch) if batch is not None else DEFAULT_LOG_BATCH,
        span_queue=None if queue is not None else max(SPAN_QUEUE, int(span_batch or 0)),
        span_batch=None if span_batch is not None else min(SPAN_BATCH, int(queue or SPAN_QUEUE)),
        attribute_length=None if _first(environ, _ATTRIBUTE_LENGTHS[:1]) else SPAN_ATTRIBUTE_LENGTH,
        span_attribute_length=None if _first(environ, _ATTRIBUTE_LENGTHS) else SPAN_ATTRIBUTE_LENGTH,
    )


def _signal(environ: Mapping[str, str], signal: str) -> SignalConfig:
    upper = signal.upper()

    def var(name: str) -> tuple[str, ...]:  # the per-signal variable first, then the generic one
        return (f"OTEL_EXPORTER_OTLP_{upper}_{name}", f"OTEL_EXPORTER_OTLP_{name}")

    protocol = _protocol(environ, var("PROTOCOL"))  # refused even when unused: a typo should not wait
    found = _first(environ, (f"OTEL_{upper}_EXPORTER",))
    if found is None:  # not named: OTLP when an endpoint applies to this signal, else nothing
        asked = _first(environ, (f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))
        found = (f"OTEL_{upper}_EXPORTER", "otlp" if asked else "none")
    variable, raw = found
    names = [name.strip().lower() for name in raw.split(",") if name.strip()]
    if names == ["none"]:
        return SignalConfig()
    exporters = tuple(dict.fromkeys(OTLP_BY_PROTOCOL[protocol] if name == "otlp" else name for name in names))
    _installed(variable, raw, signal, exporters)
    if OTLP_EXPORTERS.intersection(exporters):
        _endpoint(environ, (f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"), protocol)
    for exporter in OTLP_EXPORTERS.intersection(exporters):
        _one_of(environ, var("COMPRESSION"), _COMPRESSIONS[exporter])
    _headers(environ, var("HEADERS"))
    if OTLP_EXPORTERS.intersection(exporters):
        for name in ("CERTIFICATE", "CLIENT_CERTIFICATE", "CLIENT_KEY"):
            _pem_file(environ, var(name))
    timeout = _positive(environ, var("TIMEOUT"), "a positive number of milliseconds")
    return SignalConfig(exporters, None if timeout is None else timeout / 1000)


def _installed(variable: str, raw: str, signal: str, exporters: tuple[str, ...]) -> None:
    """Every exporter named must be installed under the SDK's entry points (else the SDK's own error is a
    traceback at the first export)."""
    from importlib.metadata import entry_points  # 0.7 MiB: only where an exporter is asked for

    available = {point.name for point in entry_points(group=ENTRY_POINT_GROUPS[signal])}
    missing = [name for name in exporters if name not in available]
    if missing == [OTLP_BY_PROTOCOL["grpc"]]:  # OTLP over gRPC is an extra: say which
        raise ConfigError(f"OTLP over gRPC (OTEL_EXPORTER_OTLP_PROTOCOL=grpc) needs the grpc extra: {GRPC_INSTALL}")
    if missing:
        choices = ", ".join(sorted({"otlp", "none", *available}))
        raise ConfigError(
            f"{variable}={raw!r}: no {signal} exporter named {', '.join(missing)} is installed (installed: {choices})"
        )


def _endpoint(environ: Mapping[str, str], names: tuple[str, ...], protocol: str) -> None:
    """An endpoint the official exporter can reach: it takes any string, and then fails every export as if
    the collector were away (``htp://…``, a URL without a host)."""
    found = _first(environ, names)
    if found is None:
        return
    name, raw = found
    value = raw.strip()
    url = urllib.parse.urlsplit(value if "://" in value or protocol == "http/protobuf" else f"http://{value}")
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"{name}={redacted(value)!r}: an http:// or https:// URL with a host is needed")


def redacted(url: str) -> str:
    """``url`` fit for a log line or an error: its user and password, if any, replaced by ``***``."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    return f"{scheme}{separator}{authority}{slash}{path}"


def _protocol(environ: Mapping[str, str], names: tuple[str, ...]) -> str:
    found = _first(environ, names)
    if found is None:
        return "http/protobuf"
    name, raw = found
    if raw.strip() not in OTLP_BY_PROTOCOL:
        raise ConfigError(f"{name}={raw!r} is not supported (use one of: {', '.join(OTLP_BY_PROTOCOL)})")
    return raw.strip()


def _one_of(environ: Mapping[str, str], names: tuple[str, ...], choices: tuple[str, ...]) -> None:
    found = _first(environ, names)
    if found is not None and found[1].strip().lower() not in choices:
        raise ConfigError(f"{found[0]}={found[1]!r} is not supported (use one of: {', '.join(choices)})")


def _pem_file(environ: Mapping[str, str], names: tuple[str, ...]) -> None:
    """A CA, client certificate or key file the exporter will read at every connection: missing, it was
    taken for a collector refusing the connection (HTTP) or a traceback (gRPC), with the exporter running."""
    found = _first(environ, names)
    if found is None:
        return
    name, raw = found
    text = read_text(f"{name}={raw!r}", raw.strip())
    if "-----BEGIN " not in text:
        raise ConfigError(f"{name}={raw!r}: the file holds no PEM block (-----BEGIN ...)")


def _headers(environ: Mapping[str, str], names: tuple[str, ...]) -> None:
    """``key1=value1,key2=value2``: the SDK skips a malformed entry with a warning, sending no credentials."""
    found = _first(environ, names)
    if found is None:
        return
    name, raw = found
    for index, item in enumerate((item for item in raw.split(",") if item.strip()), start=1):
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():  # the value is not echoed: headers often carry credentials
            raise ConfigError(f"{name}: every entry must be key=value (entry {index} is not)")


def _positive(environ: Mapping[str, str], names: tuple[str, ...], what: str) -> float | None:
    found = _first(environ, names)
    if found is None:
        return None
    name, raw = found
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < math.inf or (what.endswith("whole number") and not value.is_integer()):
        raise ConfigError(f"{name}={raw!r} must be {what}")
    return value


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of ``names`` that is set and not blank, with its value."""
    for name in names:
        if environ.get(name, "").strip():
            return name, environ[name]
    return None


DEFAULT_SERVICE_NAME = "se-exporter"


def resource_attributes(identity: VMIdentity | None, version: str) -> dict[str, str]:
    """What se-exporter knows of itself and this VM (compute metadata); ``OTEL_RESOURCE_ATTRIBUTES`` and
    ``OTEL_SERVICE_NAME``, read by the SDK, win over it. ``cloud.*`` only when compute metadata was read."""
    detected = {"service.name": DEFAULT_SERVICE_NAME, "service.version": version}
    if identity is not None:
        detected |= {"host.name": identity.name or "", "host.id": identity.vm_id, "host.type": identity.vm_size}
        if identity.vm_id:
            detected |= {
                "cloud.provider": "azure",
                "cloud.platform": "azure.vm",
                "cloud.region": identity.location,
                "cloud.account.id": identity.subscription_id,
                "cloud.resource_id": identity.resource_id,
                "azure.vm.scaleset.name": identity.vm_scale_set_name,
            }
    return {key: value for key, value in detected.items() if value}


SHUTDOWN_SECONDS = 5.0  # SIGTERM: logs may use all of it; spans get what is left, at least 1 s


class Telemetry(Protocol):
    """A tracer provider (API type; None: spans not exported), the spool the audit trail fills (None: logs
    not exported), close()."""

    @property
    def tracer_provider(self) -> trace.TracerProvider | None: ...

    @property
    def spool(self) -> Spool[AuditRecord] | None: ...

    def close(self, timeout: float) -> None: ...


@dataclass
class NoTelemetry:
    tracer_provider: trace.TracerProvider | None = None
    spool: Spool[AuditRecord] | None = None

    def close(self, timeout: float) -> None:
        """Nothing to flush."""
