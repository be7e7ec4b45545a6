"""Disk writes of the state file: 1,000 listed events, one of them changing every second (issue 64).

A loopback IMDS lists 1,000 Scheduled events; every second one of them is rescheduled (its NotBefore moves,
the DocumentIncarnation goes up), so every poll has one transition to save. The exporter runs with
``--state.file``, with OpenTelemetry off and with it shipping to a live OTLP/HTTP receiver (the poll's
records spooled in the same transaction, deleted once delivered). Beside them, sqlite3 used plainly
(``plain_sqlite.py``): one row of a 1,000-row table updated per second in a WAL database fsynced at every
commit, the least a store of one row per event can write for one change.

What each process caused to be written to the storage layer is read from ``/proc/PID/io`` (``write_bytes``:
the database, its WAL and their checkpoints, as the kernel sends them to the disk) in slices of
``SLICE_SECONDS``, after a warm-up in which the exporter saved the 1,000 events once; each row gives the
median slice and the spread.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from email.utils import formatdate
from pathlib import Path
from typing import Any

from benchmarks.common import (
    REPO,
    ExporterProc,
    Mode,
    Proc,
    Report,
    clean_env,
    otel_env,
    otlp_receiver,
    spread,
    wait_until,
)

NAME = "writes"
EVENTS = 1000
SLICE_SECONDS = 10.0
PLAIN = "sqlite3 plainly: one row of 1,000 updated per second"


def write_bytes(pid: int) -> int:
    """What the process caused to be sent to the storage layer so far (``/proc/PID/io``)."""
    with open(f"/proc/{pid}/io", encoding="ascii") as io:
        for line in io:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    raise RuntimeError(f"no write_bytes in /proc/{pid}/io")


class ChangingIMDS:
    """A loopback IMDS listing ``EVENTS`` Scheduled events, one rescheduled per second of its life."""

    def __init__(self) -> None:
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))
        from tests.support.fake_imds import Answer, FakeIMDS, scheduled_event

        self._began = time.monotonic()
        self._far = time.time() + 30 * 24 * 3600
        self._events = [
            scheduled_event(f"bench-{n:04d}", Description=f"Host server maintenance, benchmark event {n}")
            for n in range(EVENTS)
        ]
        self._answer, self.server = Answer, FakeIMDS()
        self.server.respond = lambda _seen: self._document()

    def _document(self) -> Any:
        second = int(time.monotonic() - self._began)
        changed = self._events[second % EVENTS]
        changed["NotBefore"] = formatdate(self._far + second, usegmt=True)  # rescheduled: a transition a second
        body = json.dumps({"DocumentIncarnation": 1 + second, "Events": self._events})
        self.server.requests.clear()  # the fake keeps every request: not for a benchmark's length
        return self._answer(body=body.encode())

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        self.server.start()
        try:
            yield self.server.url
        finally:
            self.server.stop()


class PlainSqlite(Proc):
    """benchmarks/plain_sqlite.py: sqlite3 alone, doing the least a row-per-event store writes."""

    def __init__(self, path: Path) -> None:
        argv = [sys.executable, str(REPO / "benchmarks" / "plain_sqlite.py"), str(path), str(EVENTS)]
        super().__init__(argv, env=clean_env(), name="plain-sqlite")

    def wait_started(self) -> None:
        self.wait_for_line(lambda line: line.startswith("writing"), "'writing' line", 60)


def _slices(pid: int, window: float, slice_seconds: float) -> list[float]:
    """kB/s written in each slice of the window."""
    rates = []
    last = write_bytes(pid)
    for _ in range(max(1, round(window / slice_seconds))):
        time.sleep(slice_seconds)
        now = write_bytes(pid)
        rates.append((now - last) / slice_seconds / 1000)
        last = now
    return rates


def _exporter(url: str, state_dir: Path, otel: dict[str, str] | None, name: str, settle: float) -> ExporterProc:
    args = [f"--state.file={state_dir / f'{name}.db'}", "--vm.name=vm-a"]
    exporter = ExporterProc(url, otel_env=otel, extra_args=args, name=name)
    exporter.wait_ready(120)
    wait_until(  # warm-up: the 1,000 events saved once, and a few polls' changes after them
        lambda: (exporter.metrics().count("azure_scheduled_events_event_info{") >= EVENTS) or None,
        120,
        f"{name}: {EVENTS} events listed",
    )
    time.sleep(settle)
    return exporter


def run(mode: Mode) -> Report:
    report = Report(NAME)
    slice_seconds = mode.pick(SLICE_SECONDS, SLICE_SECONDS, 1.0)  # tiny: only that it runs
    window = mode.pick(120.0, 40.0, slice_seconds)
    rows, data = [], {}
    imds = ChangingIMDS()
    with imds.running() as url, tempfile.TemporaryDirectory(prefix="se-bench-writes-") as folder, otlp_receiver() as rx:
        kinds: list[tuple[str, dict[str, str] | None]] = [("exporter, OTel off", None)]
        if rx is not None:
            kinds.append(("exporter, OTel on (logs and spans delivered)", otel_env(rx)))
        for kind, otel in kinds:
            exporter = _exporter(url, Path(folder), otel, kind.split(",")[1].strip().split()[1], slice_seconds)
            try:
                data[kind] = _slices(exporter.pid, window, slice_seconds)
            finally:
                exporter.stop()
        plain = PlainSqlite(Path(folder) / "plain.db")
        try:
            plain.wait_started()
            time.sleep(slice_seconds)
            data[PLAIN] = _slices(plain.pid, window, slice_seconds)
        finally:
            plain.stop()
    for kind, rates in data.items():
        rows.append((kind, f"{statistics.median(rates):.1f}", spread(rates, 1), len(rates)))
    report.table(
        f"Disk writes (kB/s, /proc/PID/io write_bytes), {EVENTS} listed events, one rescheduled per second, "
        f"{slice_seconds:.0f}-s slices",
        ("process", "median kB/s", "spread (min-max)", "slices"),
        rows,
    )
    report.data = {"kb_per_s_slices": data, "events": EVENTS, "slice_seconds": slice_seconds}
    return report
