"""Wires the exporter together: every outside resource is passed in, nothing is global."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import httpx
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from se_exporter import __version__
from se_exporter.config import ExporterConfig
from se_exporter.event_log import TransitionLogger
from se_exporter.identity import VMIdentity
from se_exporter.imds_client import ClientSettings, IMDSClient
from se_exporter.metrics import ExporterMetrics, SnapshotCollector
from se_exporter.pacing import RateLimiter
from se_exporter.persistence import Persistence
from se_exporter.poller import Poller, PollSink
from se_exporter.state_file import StateFile, decode_store, encode_store
from se_exporter.store import EventStore
from se_exporter.web import WebServer, make_app

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
    ) -> None:
        self.config = config
        self.registry = CollectorRegistry(auto_describe=False)
        self.metrics = ExporterMetrics(approval_enabled=config.approval_config is not None)
        tracer = (tracer_provider or trace.NoOpTracerProvider()).get_tracer("se_exporter", __version__)
        self.persistence = Persistence(StateFile(config.state_file) if config.state_file else None)
        store = decode_store(self.persistence.loaded["store"]) if "store" in self.persistence.loaded else EventStore()
        self.persistence.register("store", lambda: encode_store(store))
        self.client = IMDSClient(
            ClientSettings(base_url=config.imds_url, api_version=config.api_version, timeout=config.imds_timeout),
            RateLimiter(),
            transport=transport,
            on_response=self.metrics.observe_response,
            tracer=tracer,
        )
        self.poller = Poller(
            client=self.client,
            store=store,
            metrics=self.metrics,
            sinks=[TransitionLogger(), *extra_sinks],
            persistence=self.persistence,
            interval=config.poll_interval,
            identity=VMIdentity(name=config.vm_name) if config.vm_name else None,
            clock=clock,
            tracer=tracer,
        )
        self.registry.register(
            SnapshotCollector(
                metrics=self.metrics,
                events=lambda: store.events,
                incarnation=lambda: store.incarnation,
                health=lambda: self.poller.health,
                identity=lambda: self.poller.identity,
                clock=clock,
                version=__version__,
            )
        )
        app = make_app(self.registry, config.telemetry_path, lambda: self.poller.health.ready, __version__)
        self.web = WebServer(app, config.listen_host, config.listen_port)

    def start(self) -> None:
        self.web.start()
        log.info("listening on %s:%d%s", self.config.listen_host or "*", self.web.port, self.config.telemetry_path)

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set (blocks)."""
        self.poller.run(stop)

    def close(self) -> None:
        """Save state and release the port and the IMDS connection."""
        self.persistence.save()
        self.web.stop()
        self.client.close()
