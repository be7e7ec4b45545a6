"""Wires the exporter together: every outside resource is passed in, nothing is global."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx
from opentelemetry import trace
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from se_exporter import __version__
from se_exporter.approval.approver import ApprovalDecision
from se_exporter.approval.policy import load_policy
from se_exporter.approval.sink import build_approval_sink
from se_exporter.audit.trail import EventLog
from se_exporter.config.options import ExporterConfig
from se_exporter.errors import ConfigError, IMDSError
from se_exporter.imds.client import ClientSettings, IMDSClient
from se_exporter.imds.identity import VMIdentity
from se_exporter.imds.pacing import RateLimiter
from se_exporter.metrics.collector import ExporterMetrics, SnapshotCollector, log_spool_families
from se_exporter.otel.config import parse_otel_environment, resource_attributes
from se_exporter.otel.lifecycle_spans import LifecycleSpans
from se_exporter.otel.pipeline import Telemetry, build_telemetry, disabled
from se_exporter.poller import Poller, PollSink
from se_exporter.state.atomic import StateFile, decode_store, encode_store
from se_exporter.state.persistence import Persistence
from se_exporter.store import EventStore
from se_exporter.web.config import load_web_config
from se_exporter.web.server import WebServer, make_app

log = logging.getLogger(__name__)


class Exporter:
    """The exporter process minus signal handling: start(), run(stop), close()."""

    def __init__(
        self,
        config: ExporterConfig,
        *,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        tracer_provider: trace.TracerProvider | None = None,
        extra_sinks: Sequence[PollSink] = (),
        environ: Mapping[str, str] | None = None,  # OTEL_* variables; None: no OpenTelemetry pipeline
    ) -> None:
        self.config = config
        # Operator files first: a mistake in one stops start-up before anything touches the network.
        web_config = load_web_config(config.web_config_file) if config.web_config_file else None
        policy = load_policy(config.approval_config) if config.approval_config else None
        self.registry = CollectorRegistry(auto_describe=False)
        self.metrics = ExporterMetrics(approval_enabled=config.approval_config is not None)
        self.persistence = Persistence(StateFile(config.state_file) if config.state_file else None)
        store = decode_store(self.persistence.loaded["store"]) if "store" in self.persistence.loaded else EventStore()
        self.persistence.register("store", lambda: encode_store(store))
        settings = ClientSettings(base_url=config.imds_url, api_version=config.api_version, timeout=config.imds_timeout)
        limiter = RateLimiter()
        identity = VMIdentity(name=config.vm_name) if config.vm_name else None
        self.telemetry: Telemetry = disabled()
        otel = parse_otel_environment(environ) if environ is not None else None
        if otel is not None and otel.enabled:  # the resource needs the identity: learn it first
            identity = self._startup_identity(settings, limiter, transport, identity)
            self.telemetry = build_telemetry(otel, resource_attributes(otel, identity, __version__),
                                             _spool_path(config.state_file), __version__)
        tracer = (tracer_provider or self.telemetry.tracer_provider).get_tracer("se_exporter", __version__)
        self.event_log = EventLog(self.telemetry.spool)
        lifecycle = LifecycleSpans(tracer, self.persistence.loaded.get("lifecycle"))
        self.persistence.register("lifecycle", lifecycle.to_state)
        self.client = IMDSClient(
            settings,
            limiter,
            transport=transport,
            on_response=self.metrics.observe_response,
            tracer=tracer,
        )
        self.approval = (
            build_approval_sink(policy, self.client.approve, self._on_decision, self.persistence) if policy else None
        )
        if config.state_file is not None and not self.persistence.save():
            raise ConfigError(f"--state.file: cannot write {config.state_file} (see the error above)")
        self.poller = Poller(
            client=self.client,
            store=store,
            metrics=self.metrics,
            sinks=[self.event_log, lifecycle, *([self.approval] if self.approval else []), *extra_sinks],
            persistence=self.persistence,
            interval=config.poll_interval,
            identity=identity,
            clock=clock,
            tracer=tracer,
        )
        self.registry.register(self._collector(store, clock))
        app = make_app(self.registry, config.telemetry_path, lambda: self.poller.health.ready, __version__)
        self.web = WebServer(app, config.listen_host, config.listen_port, web_config=web_config)

    def start(self) -> None:
        self.web.start()
        log.info("listening on %s://%s:%d%s", self.web.scheme, self.config.listen_host or "*", self.web.port,
                 self.config.telemetry_path)

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set (blocks)."""
        self.poller.run(stop)

    def close(self) -> None:
        """Save state, flush telemetry (bounded) and release the port and the IMDS connection."""
        if self.approval is not None:  # before the spool closes: its last decisions must be logged
            self.approval.close()
        self.persistence.save()
        self.telemetry.close()
        self.web.stop()
        self.client.close()

    def _startup_identity(
        self, settings: ClientSettings, limiter: RateLimiter, transport: httpx.BaseTransport | None,
        given: VMIdentity | None,
    ) -> VMIdentity | None:
        """Compute metadata for the OTel resource; --vm.name, if given, stays the name. None if unknown."""
        probe = IMDSClient(settings, limiter, transport=transport, on_response=self.metrics.observe_response)
        try:
            learned = probe.get_identity()
        except IMDSError as error:
            log.warning("compute metadata unavailable: the OpenTelemetry resource has no cloud.* attributes: %s",
                        error)
            return given
        finally:
            probe.close()
        log.info("learned VM identity name=%s vm_id=%s location=%s", learned.name, learned.vm_id, learned.location)
        return dataclasses.replace(learned, name=given.name) if given is not None else learned

    def _collector(self, store: EventStore, clock: Callable[[], float]) -> SnapshotCollector:
        return SnapshotCollector(
            metrics=self.metrics,
            events=lambda: store.events,
            incarnation=lambda: store.incarnation,
            health=lambda: self.poller.health,
            identity=lambda: self.poller.identity,
            clock=clock,
            version=__version__,
            extra=self._spool_families,
        )

    def _on_decision(self, decision: ApprovalDecision) -> None:
        if decision.counted:
            self.metrics.observe_approval(decision.event.event_type, decision.result)
        self.event_log.on_decision(decision)

    def _spool_families(self) -> list[Metric]:
        spool = self.telemetry.spool
        return [] if spool is None else log_spool_families(spool.depth, spool.dropped)


def _spool_path(state_file: Path | None) -> Path | None:
    """The log spool lives next to the state file (and in memory without one)."""
    return None if state_file is None else state_file.with_name(state_file.name + ".spool")
