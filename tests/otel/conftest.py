"""Fixtures for the OpenTelemetry tests: an in-process IMDS simulator on a hand-driven clock,
and the exporter as a subprocess pointed at it and at a real OTLP receiver."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry import trace

from se_exporter.audit.records import AuditRecord
from se_exporter.durable.database import Database
from se_exporter.durable.opening import open_database
from se_exporter.durable.persistence import MAX_DATABASE_BYTES
from se_exporter.durable.spool import Spool
from se_exporter.otel.config import Telemetry, parse_otel_environment
from se_exporter.otel.pipeline import build_telemetry
from se_exporter.simulator import ManualClock, SimulatedVM, SimulatorServer, SimWorld
from tests.otlp import OTLPReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.state_file import commit

VM = SimulatedVM(name="sim-vm-0")
StartOTel = Callable[..., ExporterProcess]


@pytest.fixture
def simulator() -> Iterator[tuple[SimWorld, str]]:
    """(world, base URL) of a running simulator."""
    world = SimWorld(vm=VM, clock=ManualClock(start=time.time()), rng=random.Random())
    with SimulatorServer(world, tick_interval=0.02) as server:
        yield world, server.url


def otel_env(receiver: OTLPReceiver | None, **extra: str) -> dict[str, str]:
    """Environment enabling the pipeline; a short export timeout keeps outages and SIGTERM quick."""
    env = {"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_TIMEOUT": "1000", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    if receiver is not None:
        env.update(receiver.env)
    env.update(extra)
    return env


@pytest.fixture
def start_otel(start_exporter: Callable[..., ExporterProcess], tmp_path: Path) -> StartOTel:
    """start_otel(imds_url, receiver, *flags, env={...}, state=True) -> ExporterProcess."""

    def start(
        imds_url: str, receiver: OTLPReceiver | None, *args: str, env: dict[str, str] | None = None, state: bool = True
    ) -> ExporterProcess:
        flags = [f"--imds.url={imds_url}", "--poll.interval=250ms"]
        if state:
            flags.append(f"--state.file={tmp_path / 'state' / 'state.db'}")
        return start_exporter(*flags, *args, env=otel_env(receiver, **(env or {})))

    return start


@dataclass
class InProcess:
    """A pipeline built in this process, and the database its spool is in."""

    telemetry: Telemetry
    database: Database

    @property
    def spool(self) -> Spool[AuditRecord] | None:
        return self.telemetry.spool

    @property
    def tracer_provider(self) -> trace.TracerProvider | None:
        return self.telemetry.tracer_provider

    def append(self, records: list[AuditRecord]) -> None:
        """As a poll does: the audit trail appends, the poll's save commits them (then they are shipped)."""
        assert self.telemetry.spool is not None
        self.telemetry.spool.append(records)
        commit(self.database)

    def close(self, timeout: float) -> None:
        self.telemetry.close(timeout=timeout)
        self.database.close(10)


def build_in_process(monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], state_file: Path) -> InProcess:
    """The pipeline built in this process from ``environ``, its log spool in the database at ``state_file``:
    the SDK and its exporters read the process's environment, so the variables are set there too (and unset
    after the test)."""
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    database = open_database(state_file, MAX_DATABASE_BYTES).database
    return InProcess(build_telemetry(parse_otel_environment(environ), {}, database, "test"), database)
