"""The OpenTelemetry configuration, read from the standard ``OTEL_*`` variables only.

Export is off unless asked for: a signal is exported when its exporter variable is set
(``OTEL_TRACES_EXPORTER`` / ``OTEL_LOGS_EXPORTER``) or an endpoint applies to it
(``OTEL_EXPORTER_OTLP_ENDPOINT``, or the signal's own ``OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT``);
``OTEL_SDK_DISABLED=true`` always wins. Nobody is retried in the background who was not asked for.

The SDK's exporters read several of these variables from ``os.environ`` on their own, and its
autoconfiguration (which we do not use: providers are built by hand, never globally) would read
the rest. Parsing them here, from an injected mapping, makes the mapping the only thing that
counts: ``telemetry.py`` passes every value to the SDK explicitly. Pure: no SDK import, no I/O.
"""

from __future__ import annotations

import contextlib
import ipaddress
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from se_exporter.errors import ConfigError
from se_exporter.imds.identity import VMIdentity

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("http/protobuf", "grpc")
DEFAULT_SERVICE_NAME = "se-exporter"
DEFAULT_TIMEOUT_MS = 10_000.0
DEFAULT_BSP_SCHEDULE_DELAY_MS = 5_000.0
_DEFAULT_ENDPOINTS = {"http/protobuf": "http://localhost:4318", "grpc": "http://localhost:4317"}
_COMPRESSIONS = {"http/protobuf": ("none", "gzip", "deflate"), "grpc": ("none", "gzip")}


@dataclass(frozen=True, slots=True)
class SignalConfig:
    """How one signal (``traces`` or ``logs``) is exported."""

    exporter: str  # otlp | console | none
    protocol: str = "http/protobuf"
    endpoint: str = ""  # OTLP/HTTP: the full URL with the signal path; gRPC: the target URL
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT_MS / 1000  # seconds
    compression: str = "none"
    insecure: bool | None = None  # gRPC only; None: decided by the endpoint's scheme
    certificate: str | None = None
    client_key: str | None = None
    client_certificate: str | None = None
    proxy: str | None = None  # OTLP/HTTP: HTTPS_PROXY or HTTP_PROXY for the endpoint, unless NO_PROXY names it


@dataclass(frozen=True, slots=True)
class OTelConfig:
    disabled: bool
    traces: SignalConfig
    logs: SignalConfig
    service_name: str | None = None  # OTEL_SERVICE_NAME
    resource: Mapping[str, str] = field(default_factory=dict)  # OTEL_RESOURCE_ATTRIBUTES
    span_schedule_delay_ms: float = DEFAULT_BSP_SCHEDULE_DELAY_MS

    @property
    def enabled(self) -> bool:
        """False when no pipeline is to be built at all."""
        return not self.disabled and (self.traces.exporter != "none" or self.logs.exporter != "none")


HOW_TO_ENABLE = (
    "OpenTelemetry export is off: set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_TRACES_EXPORTER / "
    "OTEL_LOGS_EXPORTER) to send spans and a log record per transition (docs/opentelemetry.md)"
)


def parse_otel_environment(environ: Mapping[str, str]) -> OTelConfig:
    """Read the variables; a bad value is a ``ConfigError`` naming the variable."""
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
    return OTelConfig(
        disabled=disabled,
        traces=_signal(environ, "traces", "v1/traces"),
        logs=_signal(environ, "logs", "v1/logs"),
        service_name=environ.get("OTEL_SERVICE_NAME", "").strip() or None,
        resource=_key_values(environ, "OTEL_RESOURCE_ATTRIBUTES"),
        span_schedule_delay_ms=_number(environ, ("OTEL_BSP_SCHEDULE_DELAY",), DEFAULT_BSP_SCHEDULE_DELAY_MS),
    )


def resource_attributes(config: OTelConfig, identity: VMIdentity | None, version: str) -> dict[str, str]:
    """Detected attributes, overridden by OTEL_RESOURCE_ATTRIBUTES, then OTEL_SERVICE_NAME.

    The user's explicit values win over what compute metadata says (e.g. to name the host as the
    fleet knows it). ``cloud.*`` appear only when compute metadata was read (``vm_id`` is known).
    """
    detected = {"service.version": version}
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
    attributes = {key: value for key, value in detected.items() if value} | dict(config.resource)
    attributes["service.name"] = config.service_name or attributes.get("service.name") or DEFAULT_SERVICE_NAME
    return attributes


def _signal(environ: Mapping[str, str], signal: str, path: str) -> SignalConfig:
    upper = signal.upper()

    def var(name: str) -> tuple[str, ...]:  # the per-signal variable first, then the generic one
        return (f"OTEL_EXPORTER_OTLP_{upper}_{name}", f"OTEL_EXPORTER_OTLP_{name}")

    asked = any(
        environ.get(name, "").strip()
        for name in (f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    )
    exporter = _choice(environ, (f"OTEL_{upper}_EXPORTER",), EXPORTERS, "otlp" if asked else "none")
    protocol = _choice(environ, var("PROTOCOL"), PROTOCOLS, "http/protobuf")
    endpoint = environ.get(f"OTEL_EXPORTER_OTLP_{upper}_ENDPOINT", "").strip()
    if not endpoint:  # the generic endpoint is a base URL: OTLP/HTTP appends the signal's path
        base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or _DEFAULT_ENDPOINTS[protocol]
        endpoint = f"{base.rstrip('/')}/{path}" if protocol == "http/protobuf" else base
    insecure = _first(environ, var("INSECURE"))
    return SignalConfig(
        exporter=exporter,
        protocol=protocol,
        endpoint=endpoint,
        headers=_key_values(environ, *var("HEADERS")),
        timeout=_number(environ, var("TIMEOUT"), DEFAULT_TIMEOUT_MS) / 1000,  # milliseconds, per the spec
        compression=_choice(environ, var("COMPRESSION"), _COMPRESSIONS[protocol], "none"),
        insecure=None if insecure is None else insecure[1].strip().lower() == "true",
        certificate=_value(environ, var("CERTIFICATE")),
        client_key=_value(environ, var("CLIENT_KEY")),
        client_certificate=_value(environ, var("CLIENT_CERTIFICATE")),
        proxy=_proxy(environ, endpoint) if protocol == "http/protobuf" else None,
    )


def _proxy(environ: Mapping[str, str], endpoint: str) -> str | None:
    """The proxy for ``endpoint`` (``https_proxy``/``HTTPS_PROXY`` for https, ``http_proxy``/``HTTP_PROXY`` for
    http), as the SDK's OTLP/HTTP exporter (``requests``) would use it, but read from ``environ``."""
    url = urllib.parse.urlsplit(endpoint)
    scheme = url.scheme.lower()
    proxy = (environ.get(f"{scheme}_proxy") or environ.get(f"{scheme.upper()}_PROXY") or "").strip()
    no_proxy = (environ.get("no_proxy") or environ.get("NO_PROXY") or "").strip()
    port = url.port or (443 if scheme == "https" else 80)
    if not proxy or bypassed(url.hostname or "", port, no_proxy):
        return None
    return proxy


def bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether NO_PROXY names ``host:port``, as curl and ``requests`` read it: ``*``; a host or an IP address,
    with or without a port (``collector:4318``, ``[::1]:4318``); a domain it is in (``.example.com`` or
    ``example.com``); an IP range (``10.0.0.0/8``, the usual Kubernetes entry)."""
    host = host.lower().strip("[]")
    address = _ip(host)
    for entry in (item.strip().lower() for item in no_proxy.split(",") if item.strip()):
        if entry == "*":
            return True
        if "/" in entry:
            with contextlib.suppress(ValueError):
                if address is not None and address in ipaddress.ip_network(entry, strict=False):
                    return True
            continue
        name, entry_port = _host_and_port(entry)
        if entry_port is not None and entry_port != port:
            continue
        domain = name.lstrip(".")
        if domain and (host == domain or (address is None and host.endswith("." + domain))):
            return True
    return False


def _host_and_port(entry: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]:port`` or a bare IPv6 address, apart."""
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        return name, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, int(port) if port.isdigit() else None
    return entry, None


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of ``names`` that is set and not blank, with its value."""
    for name in names:
        if environ.get(name, "").strip():
            return name, environ[name]
    return None


def _value(environ: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    found = _first(environ, names)
    return None if found is None else found[1].strip()


def _choice(environ: Mapping[str, str], names: tuple[str, ...], choices: tuple[str, ...], default: str) -> str:
    found = _first(environ, names)
    if found is None:
        return default
    name, raw = found
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{name}={raw!r} is not supported (use one of: {', '.join(choices)})")
    return value


def _number(environ: Mapping[str, str], names: tuple[str, ...], default: float) -> float:
    found = _first(environ, names)
    if found is None:
        return default
    name, raw = found
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise ConfigError(f"{name}={raw!r} must be a positive number of milliseconds")
    return value


def _key_values(environ: Mapping[str, str], *names: str) -> dict[str, str]:
    """``key1=value1,key2=value2`` with percent-encoded values (headers, resource attributes)."""
    found = _first(environ, names)
    if found is None:
        return {}
    name, raw = found
    pairs: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            # The value is not echoed: headers often carry credentials.
            raise ConfigError(f"{name}: every entry must be key=value (entry {len(pairs) + 1} is not)")
        pairs[urllib.parse.unquote(key.strip())] = urllib.parse.unquote(value.strip())
    return pairs
