"""Wires the exporter together: every outside resource is passed in, nothing is global.

The stages, in the direction data flows: IMDS client → document → event store → approver → sinks
(counters for /metrics, the audit trail, lifecycle spans). The poller drives them; the collector
renders /metrics from the store, the poll status and the counters; the web server serves it. The parts
that depend on what the operator configured (the state file, the textfile, the approver with a policy,
the actions runner with an actions file, this VM's identity for the OpenTelemetry resource) are each
built by a function of their own, with what they need passed in.

**The files an operator writes** (``load_operator_files``), read and validated as the exporter uses them
(``se-exporter check`` too).

Every configured file is read, and every problem of every file is reported at once, each on its own line
naming the file and the key path: an operator fixes them all in one go.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

from se_exporter import __version__
from se_exporter.audit.records import AuditTrail
from se_exporter.common.times import time_left
from se_exporter.config.options import ExporterConfig
from se_exporter.durable.lock import LockHeld
from se_exporter.durable.persistence import Persistence
from se_exporter.durable.schema import TooNew
from se_exporter.errors import ConfigError, IMDSError, IMDSStopped, os_problem, socket_problem
from se_exporter.imds import api_versions
from se_exporter.imds.client import ClientSettings, IMDSClient, RateLimiter
from se_exporter.imds.document import VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.machine import TABLES as STORE_TABLES
from se_exporter.metrics.collector import SnapshotCollector, exporter_registry
from se_exporter.metrics.counters import Counters
from se_exporter.metrics.textfile import TextfileWriter
from se_exporter.otel.config import (
    HOW_TO_ENABLE,
    SHUTDOWN_SECONDS,
    NoTelemetry,
    OTelConfig,
    Telemetry,
    parse_otel_environment,
    resource_attributes,
)
from se_exporter.poller import Poller, PollSink
from se_exporter.web.config import LiveWebConfig, WebConfig, load_web_config
from se_exporter.web.endpoints import TrafficGate, make_app
from se_exporter.web.server import WebServer

if TYPE_CHECKING:
    from opentelemetry import trace
    from prometheus_client import CollectorRegistry

    from se_exporter.actions.config import Actions
    from se_exporter.actions.runner import ActionRunner
    from se_exporter.approval.approver import Approver
    from se_exporter.approval.policy import Policy


T = TypeVar("T")

# What a stop's waits share: under WinSW's 20 s stop timeout (systemd's TimeoutStopSec and Kubernetes' grace: 30 s).
STOP_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class OperatorFiles:
    """The files an operator writes, read and validated as the exporter uses them."""

    web_config: WebConfig | None = None
    policy: Policy | None = None
    actions: Actions | None = None


def load_operator_files(config: ExporterConfig) -> OperatorFiles:
    """Read every configured file (``se-exporter check`` and the exporter alike); a ``ConfigError`` holds one
    line per problem, of every file, each naming the file and the key path."""
    problems: list[str] = []

    def attempt(load: Callable[[], T]) -> T | None:
        try:
            return load()
        except ConfigError as error:
            problems.extend(str(error).splitlines())
            return None

    web_file, policy_file, actions_file = config.web_config_file, config.approval_config, config.actions_config
    web_config = attempt(lambda: load_web_config(web_file)) if web_file is not None else None
    policy = attempt(lambda: _load_policy(policy_file)) if policy_file is not None else None
    actions = attempt(lambda: _load_actions(actions_file)) if actions_file is not None else None
    if problems:
        raise ConfigError("\n".join(problems))
    return OperatorFiles(web_config, policy, actions)


def _load_actions(path: Path) -> Actions:
    from se_exporter.actions.config import load_actions

    return load_actions(path)


def _load_policy(path: Path) -> Policy:
    """The approval package is imported only when a policy is configured."""
    from se_exporter.approval.policy import load_policy

    return load_policy(path)


log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Exporter:
    """The exporter process minus signal handling: start(), run(stop), close()."""

    def __init__(
        self,
        config: ExporterConfig,
        *,
        environ: Mapping[str, str] | None = None,  # OTEL_* variables; None: no OpenTelemetry pipeline
        stop: threading.Event | None = None,  # once set, a GET to IMDS in flight ends (start-up's too)
    ) -> None:
        self.config = config
        self._stop = stop or threading.Event()
        # Operator files first: a mistake in one stops start-up before anything touches the network.
        files = load_operator_files(config)
        self.textfile = _textfile_writer(config.textfile_path)
        self.counters = _counters(config, files)
        self.persistence = _open_state_file(config.state_file, self.counters.observe_write)
        store = self.persistence.restore("store", STORE_TABLES, EventStore.from_rows, EventStore)
        self.persistence.track("store", store, STORE_TABLES)
        settings, limiter = _client_settings(config), RateLimiter()
        identity = VMIdentity(name=config.vm_name) if config.vm_name else None
        self.telemetry: Telemetry = NoTelemetry()
        if environ is not None:
            identity = self._start_telemetry(parse_otel_environment(environ), identity, settings, limiter)
        provider = self.telemetry.tracer_provider
        tracer = provider.get_tracer("se_exporter", __version__) if provider is not None else None
        on_response = self.counters.observe_response
        self.client = IMDSClient(settings, limiter, on_response=on_response, tracer=tracer, stop=self._stop)
        policy, actions = files.policy, files.actions
        approver = None if policy is None else _approver(policy, self.client, self.persistence, config.poll_interval)
        runner = None if actions is None else _action_runner(actions, self.persistence, time.time)
        self.persistence.flush(force=True)  # the restored state, as it will be saved from now on
        self.poller = Poller(
            client=self.client,
            store=store,
            sinks=self._sinks(store, tracer),
            persistence=self.persistence,
            interval=config.poll_interval,
            identity=identity,
            approver=approver,
            actions=runner,
            tracer=tracer,
            after_poll=self.textfile.poll_done if self.textfile else None,
        )
        # The web config in force: the whole file re-read when it changes (web/config.py).
        live_web = LiveWebConfig(config.web_config_file, files.web_config) if files.web_config is not None else None
        self.registry = self._registry(store, approver, live_web)
        self.web = self._web_server(config, live_web, store, time.time) if config.listen_port is not None else None

    def _start_telemetry(
        self,
        otel: OTelConfig,
        identity: VMIdentity | None,
        settings: ClientSettings,
        limiter: RateLimiter,
    ) -> VMIdentity | None:
        """The OpenTelemetry pipeline, when a signal is on: the resource needs this VM's identity, learned first
        (``settings``, ``limiter``: the IMDS client's). Returns the identity, as given or learned."""
        if not otel.enabled:
            log.info("OpenTelemetry is disabled (OTEL_SDK_DISABLED=true)" if otel.disabled else HOW_TO_ENABLE)
            return identity
        from se_exporter.otel.pipeline import build_telemetry  # the SDK: only when a signal is on

        on_response = self.counters.observe_response
        probe = IMDSClient(settings, limiter, on_response=on_response, stop=self._stop)
        identity = _startup_identity(probe, identity)
        attributes = resource_attributes(identity, __version__)
        self.telemetry = build_telemetry(otel, attributes, self.persistence.database, __version__)
        return identity

    def _lifecycle_spans(self, tracer: trace.Tracer, store: EventStore) -> PollSink:
        """The lifecycle spans' sink, its open spans restored from the state file."""
        from se_exporter.otel import lifecycle_spans  # OpenTelemetry: only when spans go

        lifecycle = self.persistence.restore(
            "lifecycle",
            lifecycle_spans.TABLES,
            functools.partial(lifecycle_spans.LifecycleSpans.from_rows, tracer, store.removal),
            functools.partial(lifecycle_spans.LifecycleSpans, tracer, store.removal),
        )
        self.persistence.track("lifecycle", lifecycle, lifecycle_spans.TABLES)
        return lifecycle

    def _sinks(self, store: EventStore, tracer: trace.Tracer | None) -> list[PollSink]:
        """What every poll's result goes to: the counters, the audit trail and, when spans go, lifecycle spans."""
        sinks: list[PollSink] = [self.counters, AuditTrail(self.telemetry.spool)]
        if tracer is not None:  # else no lifecycle span is ever sent
            sinks.append(self._lifecycle_spans(tracer, store))
        return sinks

    def _registry(
        self, store: EventStore, approver: Approver | None, web_config: LiveWebConfig | None
    ) -> CollectorRegistry:
        """The registry /metrics renders: the snapshot collector (also the textfile's) and client_python's own."""
        snapshot = SnapshotCollector(
            store=store,
            poller=self.poller,
            counters=self.counters,
            clock=time.time,
            version=__version__,
            spool=self.telemetry.spool,
            state=self.persistence if self.config.state_file else None,
            approvals=approver,
            textfile=self.textfile,
            web_config=web_config,
        )
        if self.textfile is not None:
            self.textfile.registry.register(snapshot)
        return exporter_registry(snapshot)

    def _web_server(
        self, config: ExporterConfig, web_config: LiveWebConfig | None, store: EventStore, clock: Clock
    ) -> WebServer:
        gate = TrafficGate(
            store,
            lambda: self.poller.identity,
            lead_seconds=config.traffic_lead_time,
            impacts=config.traffic_impacts,
            clock=clock,
        )
        app = make_app(
            self.registry,
            config.telemetry_path,
            lambda: self.poller.status.readiness,
            __version__,
            gate.verdict,
        )
        try:
            return WebServer(
                app,
                config.listen_host,
                config.listen_port or 0,
                web_config=web_config,
                render_paths=frozenset({config.telemetry_path}),
                snapshot=lambda: self.poller.status,
            )
        except OSError as error:
            self.persistence.close()
            problem = socket_problem(error)
            raise ConfigError(f"--web.listen-address: cannot listen on {_address(config)}: {problem}") from None

    def start(self) -> None:
        if self.textfile is not None:
            self.textfile.write()  # the restored state, or the first poll's
            self.textfile.start()
            log.info("writing the metrics to %s after every poll", self.textfile.path)
        if self.web is not None:
            self.web.start()
            log.info("listening on %s", self.url)
        else:  # no port: no /metrics, no probes, no /-/traffic (a load balancer cannot ask this VM)
            log.info("serving no port (--web.listen-address is empty): the textfile is the only output")

    @property
    def url(self) -> str | None:
        """Where the metrics are, as a URL one can paste (IPv6 in brackets; localhost for every address)."""
        if self.web is None:
            return None
        host = self.config.listen_host
        host = "localhost" if host in ("", "::", "0.0.0.0") else f"[{host}]" if ":" in host else host
        return f"{self.web.scheme}://{host}:{self.web.port}{self.config.telemetry_path}"

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set (blocks)."""
        self.poller.run(stop)

    def close(self) -> None:
        """Save state, flush telemetry, write the textfile last and release the port, the IMDS connection and
        the state lock; the waits share ``STOP_SECONDS``. What a slow disk or a dead collector has not taken by
        then is said, and left to the next start."""
        deadline = time.monotonic() + STOP_SECONDS
        self.poller.close(deadline)  # the approver's last decisions reach the audit trail before the spool closes
        self.telemetry.close(min(SHUTDOWN_SECONDS, time_left(deadline)))
        if self.textfile is not None:
            self.textfile.close()
        if self.web is not None:
            self.web.stop()
        self.client.close()
        self.persistence.close(time_left(deadline))


def _address(config: ExporterConfig) -> str:
    host = f"[{config.listen_host}]" if ":" in config.listen_host else config.listen_host
    return f"{host}:{config.listen_port}"


def _counters(config: ExporterConfig, files: OperatorFiles) -> Counters:
    """The counters, with the zero series of what is configured: approval, each action, the durable files."""
    actions = files.actions
    return Counters(
        approval_enabled=files.policy is not None,
        actions={action.name: action.transitions for action in actions.actions} if actions is not None else None,
        written_files=("state", "spool") if config.state_file else (),
    )


def _client_settings(config: ExporterConfig) -> ClientSettings:
    """The IMDS client's settings; a preferred api-version older than the default is said to lack fields."""
    if lacking := api_versions.lacks(config.api_versions[0]):  # older than the default: shown as unknown
        log.warning("api-version %s has no %s: shown as unknown", config.api_versions[0], ", ".join(lacking))
    return ClientSettings(base_url=config.imds_url, api_versions=config.api_versions, timeout=config.imds_timeout)


def _open_state_file(path: Path | None, observe_write: Callable[[str, float], None]) -> Persistence:
    """The state file, locked; a file that cannot be written is a start-up error, not a surprise at the first
    event."""
    try:
        return Persistence(path, observe_write=observe_write)
    except TooNew as error:
        raise ConfigError(
            f"--state.file: {path} was written by a newer se-exporter ({error}); it is left as it was: run that "
            "release, or point --state.file at another file"
        ) from None
    except LockHeld as error:
        raise ConfigError(
            f"--state.file: {path} is in use by another se-exporter (pid {error.holder or 'unknown'}); two on one "
            "state file would approve every event twice"
        ) from None
    except OSError as error:
        raise ConfigError(f"--state.file: cannot write {path}: {os_problem(error)}") from None


def _textfile_writer(path: Path | None) -> TextfileWriter | None:
    """The writer of ``--textfile.path``, once a file can be made beside it (else a start-up error)."""
    if path is None:
        return None
    writer = TextfileWriter(path)
    try:
        writer.probe()
    except OSError as error:
        raise ConfigError(f"--textfile.path: cannot write {path}: {os_problem(error)}") from None
    return writer


def _approver(policy: Policy, client: IMDSClient, persistence: Persistence, poll_interval: float) -> Approver:
    from se_exporter.approval.approver import Approver
    from se_exporter.approval.ledger import TABLES as LEDGER_TABLES
    from se_exporter.approval.ledger import restore_ledger

    def post(event_ids: Sequence[str]) -> None:
        client.approve(event_ids, paced=False)  # the poster waited for the slot before its recheck

    approver = functools.partial(
        Approver,
        policy,
        post,
        can_remember=lambda: persistence.ok,
        # A POST waits for a look younger than two polls (approval/approver.py: never one from before a pause),
        # for its request slot before its recheck, and for its decision to be on disk.
        fresh_within=max(5.0, 2 * poll_interval),
        pace=client.pace,
        commit_requested=persistence.commit_requested,
    )
    built = persistence.restore(
        "approvals",
        LEDGER_TABLES,
        lambda tables: approver(ledger=restore_ledger(tables, policy.fingerprint)),
        approver,
    )
    persistence.track("approvals", built, LEDGER_TABLES)
    mode = "dry run: decisions are logged, nothing is approved" if policy.dry_run else "approvals are POSTed"
    log.info(
        "approval policy %s loaded: %d rule(s), leader=%s, %s", policy.source, len(policy.rules), policy.leader, mode
    )
    return built


def _action_runner(actions: Actions, persistence: Persistence, clock: Callable[[], float]) -> ActionRunner:
    from se_exporter.actions.runner import TABLES, ActionRunner
    from se_exporter.actions.runs import runs_from_rows

    runner = functools.partial(ActionRunner, actions, save=persistence.flush, clock=clock)
    restored = persistence.restore("actions", TABLES, lambda tables: runner(runs=runs_from_rows(tables)), runner)
    persistence.track("actions", restored, TABLES)
    log.info("actions %s loaded: %s", actions.source, ", ".join(action.name for action in actions.actions))
    return restored


def _startup_identity(probe: IMDSClient, given: VMIdentity | None) -> VMIdentity | None:
    """Compute metadata for the OTel resource; --vm.name, if given, stays the name. None if unknown (or
    if the exporter was stopped meanwhile: the stop follows at once)."""
    try:
        learned = probe.get_identity()
    except IMDSStopped:
        return given
    except IMDSError as error:
        log.warning("compute metadata unavailable: the OpenTelemetry resource has no cloud.* attributes: %s", error)
        return given
    finally:
        probe.close()
    log.info("learned VM identity name=%s vm_id=%s location=%s", learned.name, learned.vm_id, learned.location)
    return learned if given is None else msgspec.structs.replace(learned, name=given.name)
