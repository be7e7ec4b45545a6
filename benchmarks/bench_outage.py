"""Idle CPU while the OTLP collector is dead and 1,000 audit records wait in the spool, over 10 minutes.

The case that matters most for OTel: a collector is down exactly when the exporter must not start
costing more. Seven processes poll one idle simulator at 1 s, side by side in the same window: the urllib
loop, the exporter with OTel off, the exporter shipping to a live OTLP/HTTP receiver, the exporter whose
OTLP endpoint is a closed loopback port, started with 1,000 transition records already in its spool
(``--state.file``: the spool's table in it, written by the real ``Spool``), and beside each exporter the
design's stack used plainly (reference_stack.py) configured alike (it keeps nothing to send).

CPU is read every ``window / SLICES`` seconds (the kernel's process CPU clock, to the nanosecond:
``cpu_seconds``), so a cost that grows with the outage (retries that do not back off, work redone per
attempt) shows as rising slices; the whole-window figure is wait4()'s exact rusage after a SIGKILL, less
the reading at the window's start.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ExporterProc,
    Mode,
    Proc,
    ReferenceProc,
    Report,
    StackScriptProc,
    cpu_seconds,
    metric_value,
    otel_env,
    otlp_receiver,
    proc_status_kib,
    refusing_port,
    simulator,
    wait_all_started,
)

NAME = "outage"
WAITING = 1000
SLICES = 5
DEAD = "exporter, OTel on, dead collector, 1,000 waiting"
SCRIPT_DEAD = "script, OTel on, dead collector"
KINDS = (
    "reference loop",
    "script, OTel off",
    "exporter, OTel off",
    "script, OTel on, live collector",
    "exporter, OTel on, live collector",
    SCRIPT_DEAD,
    DEAD,
)
# Each exporter and the script (reference_stack.py, the design's stack used plainly) configured alike.
PAIRS = {
    "exporter, OTel off": "script, OTel off",
    "exporter, OTel on, live collector": "script, OTel on, live collector",
    DEAD: SCRIPT_DEAD,
}


def fill_spool(state_file: Path, count: int) -> None:
    """``count`` transition records in the spool the exporter will load (as an earlier outage left them)."""
    from se_exporter.audit.records import AuditRecord, decode_record, encode_record
    from se_exporter.durable.opening import open_database
    from se_exporter.durable.persistence import MAX_DATABASE_BYTES

    database = open_database(state_file, MAX_DATABASE_BYTES).database
    spool = database.spool(encode=encode_record, decode=decode_record)
    spool.append(
        AuditRecord(
            "scheduled_event.transition",
            "INFO",
            f"Freeze scheduled (benchmark record {n})",
            {
                "scheduled_event.id": f"bench-{n}",
                "scheduled_event.type": "Freeze",
                "scheduled_event.transition": "scheduled",
                "scheduled_event.description": "Host server is undergoing maintenance.",
            },
            1_700_000_000_000_000_000 + n,
            f"bench-uid-{n}",
        )
        for n in range(count)
    )
    database.submit({})  # the transaction a poll's save makes
    database.sync(60)
    spool.close()
    database.close(60)


def dead_endpoint() -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{refusing_port()}",  # nothing listens there
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "se-exporter-bench",
    }


def _spawn(url: str, receiver: Any, state_dir: Path) -> dict[str, Proc]:
    state_file = state_dir / "state.db"
    fill_spool(state_file, WAITING)
    processes: dict[str, Proc] = {
        "reference loop": ReferenceProc(url, name="reference"),
        "exporter, OTel off": ExporterProc(url, name="exporter-off"),
        "script, OTel off": StackScriptProc(url, name="script-off"),
        SCRIPT_DEAD: StackScriptProc(url, otel_env=dead_endpoint(), name="script-dead-collector"),
        DEAD: ExporterProc(
            url, otel_env=dead_endpoint(), extra_args=[f"--state.file={state_file}"], name="exporter-dead-collector"
        ),
    }
    if receiver is not None:
        processes["exporter, OTel on, live collector"] = ExporterProc(
            url, otel_env=otel_env(receiver), name="exporter-live-collector"
        )
        processes["script, OTel on, live collector"] = StackScriptProc(
            url, otel_env=otel_env(receiver), name="script-live-collector"
        )
    wait_all_started(processes.values())
    return processes


def _measure(processes: dict[str, Proc], window: float) -> tuple[float, dict[str, Any]]:
    start = {kind: cpu_seconds(p.pid) for kind, p in processes.items()}
    slices: dict[str, list[float]] = {kind: [] for kind in processes}
    last = dict(start)
    began = time.monotonic()
    for index in range(1, SLICES + 1):
        time.sleep(max(0.0, began + window * index / SLICES - time.monotonic()))
        for kind, proc in processes.items():
            now = cpu_seconds(proc.pid)
            slices[kind].append(now - last[kind])
            last[kind] = now
    dead = processes[DEAD]
    assert isinstance(dead, ExporterProc)
    depth = metric_value(dead.metrics(), "azure_scheduled_events_log_spool_depth")
    peak = {kind: proc_status_kib(p.pid, "VmHWM") for kind, p in processes.items()}
    wall = time.monotonic() - began
    measured = {}
    for kind, proc in processes.items():
        total, _ = proc.kill_for_rusage()
        measured[kind] = {"cpu_s": total - start[kind], "slices_s": slices[kind], "peak_rss_kib": peak[kind]}
    measured[DEAD]["spool_depth_at_end"] = depth
    return wall, measured


def run(mode: Mode, duration: float | None = None) -> Report:
    report = Report(NAME)
    window = duration if duration is not None else mode.pick(600.0, 60.0, 2.0)
    warmup = mode.pick(10.0, 3.0, 0.5)
    with contextlib.ExitStack() as stack:
        receiver = stack.enter_context(otlp_receiver())
        sim = stack.enter_context(simulator(0))
        state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="se-bench-outage-")))
        processes: dict[str, Proc] = {}
        try:
            processes = _spawn(sim.url, receiver, state_dir)
            time.sleep(warmup)
            wall, measured = _measure(processes, window)
        finally:
            for proc in processes.values():
                proc.stop()

    reference = measured["reference loop"]["cpu_s"]
    rows = []
    for kind in KINDS:
        if kind not in measured:
            continue
        figures = measured[kind]
        ratio = figures["cpu_s"] / reference if reference > 0 else float("nan")
        script = measured.get(PAIRS.get(kind, ""), {}).get("cpu_s", 0.0)
        versus = f"{figures['cpu_s'] / script:.2f}" if script > 0 else ""
        per_slice = " / ".join(f"{1000 * s:.0f}" for s in figures["slices_s"])
        rows.append(
            [
                kind,
                round(100 * figures["cpu_s"] / wall, 3),
                versus,
                round(ratio, 2),
                per_slice,
                round(figures["peak_rss_kib"] / 1024, 1),
            ]
        )
    report.table(
        f"Idle CPU with the collector dead and {WAITING} records waiting ({wall:.0f} s window, "
        f"{SLICES} slices of {wall / SLICES:.0f} s)",
        ["process", "CPU % of one core", "CPU x script", "CPU x urllib loop", "CPU ms per slice", "peak RSS MiB"],
        rows,
    )
    report.note(f"records still waiting at the end (dead collector): {measured[DEAD]['spool_depth_at_end']}")
    report.data = {"window_s": wall, "warmup_s": warmup, "slices": SLICES, "waiting": WAITING, "results": measured}
    return report
