"""Fleet scale past one Prometheus: the same simulated fleet sent through remote_write to VictoriaMetrics.

``fleet_series`` writes the fleet's 6 hours (the single-server benchmark's series, bench_fleet.py), each
sample with its timestamp, into vmagent's import endpoint; vmagent, as a cluster's agent does, adds the
cluster's label and sends everything to a single-node VictoriaMetrics over the Prometheus remote-write
protocol. vmalert replays the recording rules over the window (``-replay.*``), writing them back the same
way. Then every dashboard query and every rule's expression runs as in bench_fleet.py, three times each.

Needs Debian's ``victoria-metrics`` package (``victoria-metrics``, ``vmagent``, ``vmalert`` on PATH).
"""

from __future__ import annotations

import math
import shutil
import subprocess
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from benchmarks.bench_fleet import RULES, SIZES, STEP, Panel, Rule, _instant, _measure, print_queries
from benchmarks.common import Mode, Report, bound_url, http_get, proc_status_kib
from benchmarks.fleet_series import fleet, write_openmetrics

NAME = "fleet_engine"
CHUNK_BYTES = 32 * 2**20  # what one import request carries
CLUSTER = "fleet"
INSERTED = 'vm_rows_inserted_total{type="promremotewrite"}'


def run(mode: Mode, vms: int | None = None) -> Report:
    count, hours = SIZES[mode.name]
    count = vms or count
    report = Report(NAME)
    binaries = {name: shutil.which(name) for name in ("victoria-metrics", "vmagent", "vmalert")}
    if not all(binaries.values()):
        raise RuntimeError("needs victoria-metrics, vmagent and vmalert on PATH (Debian's victoria-metrics)")
    with tempfile.TemporaryDirectory(prefix="se-fleet-engine-") as folder:
        tmp = Path(folder)
        end = math.floor(time.time() / STEP) * STEP - STEP
        start = end - hours * 3600
        figures: dict[str, Any] = {"vms": count, "hours": hours, "start": start, "end": end}
        processes = [_start([str(binaries["victoria-metrics"]), *_engine_flags(tmp)], tmp, "engine")]
        try:
            engine = bound_url(processes[0])
            _wait(engine + "/health")
            processes.append(_start([str(binaries["vmagent"]), *_agent_flags(tmp, engine)], tmp, "agent"))
            agent = bound_url(processes[1])
            _wait(agent + "/health")
            figures |= _send(tmp, agent, engine, count, start=start, end=end)
            figures["agent_peak_rss_mib"] = proc_status_kib(processes[1].pid, "VmHWM") / 1024
            figures["rules_backfilled"] = _replay(str(binaries["vmalert"]), tmp, engine, start, end)
            panels, rules = _measure(engine, hours, start, end)
            figures["series_end"] = _instant(engine, 'count({__name__=~".+"})', end)
            figures["engine_peak_rss_mib"] = proc_status_kib(processes[0].pid, "VmHWM") / 1024
            figures["data_bytes"] = sum(f.stat().st_size for f in (tmp / "vm-data").rglob("*") if f.is_file())
        finally:
            for process in reversed(processes):
                process.terminate()
                process.wait(60)
    _print_engine(report, figures, panels, rules)
    return report


def _engine_flags(tmp: Path) -> list[str]:
    return [
        "-httpListenAddr=127.0.0.1:0",
        f"-storageDataPath={tmp / 'vm-data'}",
        "-retentionPeriod=1y",
        "-search.disableCache",  # every query is timed as the first
        "-search.latencyOffset=0s",
        "-search.maxQueryDuration=120s",
        "-search.maxUniqueTimeseries=5000000",  # the default 300,000 refuses a query over the whole fleet
        "-loggerLevel=WARN",
    ]


def _agent_flags(tmp: Path, engine: str) -> list[str]:
    return [
        "-httpListenAddr=127.0.0.1:0",
        f"-remoteWrite.url={engine}/api/v1/write",
        f"-remoteWrite.label=cluster={CLUSTER}",  # the cluster's external label
        f"-remoteWrite.tmpDataPath={tmp / 'agent-queue'}",
        "-loggerLevel=WARN",
    ]


def _start(argv: list[str], tmp: Path, name: str) -> subprocess.Popen[bytes]:
    log = (tmp / f"{name}.log").open("wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def _send(tmp: Path, agent: str, engine: str, count: int, *, start: float, end: float) -> dict[str, Any]:
    """Generate the fleet's text (timestamps in ms, as the import wants), post it in chunks to vmagent and
    wait until the engine holds every sample."""
    began = time.monotonic()
    text = tmp / "fleet.prom"
    with text.open("w") as out:
        samples = write_openmetrics(out, fleet(count, start, (end - start) / 3600), start, end, STEP, millis=True)
    generated = time.monotonic() - began
    began = time.monotonic()
    with text.open("rb") as source:
        while chunk := _lines(source):
            request = urllib.request.Request(agent + "/api/v1/import/prometheus", data=chunk, method="POST")
            with urllib.request.urlopen(request, timeout=600) as answer:
                answer.read()
    posted = time.monotonic() - began
    _drain(engine, samples)
    _searchable(engine, end)
    return {
        "samples": samples,
        "text_bytes": text.stat().st_size,
        "generated": generated,
        "posted": posted,
        "sent": time.monotonic() - began,
    }


def _lines(source: Any) -> bytes:
    """About CHUNK_BYTES of whole lines."""
    chunk = source.read(CHUNK_BYTES)
    return chunk + source.readline() if chunk else b""


def _drain(engine: str, samples: int, timeout: float = 3600) -> None:
    """Until the engine has inserted every sample vmagent sent it by remote_write (its own counter says)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _inserted(engine) >= samples:
            http_get(engine + "/internal/force_flush")  # searchable now, not at the next periodic flush
            return
        time.sleep(0.5)
    raise RuntimeError(f"the engine did not receive {samples:,} samples within {timeout:.0f} s")


def _searchable(engine: str, end: float, timeout: float = 600) -> None:
    """Until a query at the window's end sees every VM's last sample (the engine inserts before it can find:
    one run's instant queries at the end read the minute before, and "Unhealthy exporters" listed every VM)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = _instant(engine, f"count(timestamp(up) >= {end:.0f})", end)
        if last and last == _instant(engine, "count(up)", end):
            return
        http_get(engine + "/internal/force_flush")
        time.sleep(0.5)
    raise RuntimeError(f"the engine's samples at the window's end were not searchable within {timeout:.0f} s")


def _inserted(engine: str) -> int:
    text = http_get(engine + "/metrics")[1].decode()
    rows = [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(INSERTED)]
    return int(float(rows[0])) if rows else 0


def _replay(vmalert: str, tmp: Path, engine: str, start: float, end: float) -> float:
    """The recording rules over the window, as vmalert would have recorded them, written back to the engine."""
    began = time.monotonic()
    replay = subprocess.run(
        [
            vmalert,
            f"-rule={_recording_rules(tmp)}",
            f"-datasource.url={engine}",
            f"-remoteWrite.url={engine}",
            f"-replay.timeFrom={_rfc3339(start)}",
            f"-replay.timeTo={_rfc3339(end)}",
            f"-evaluationInterval={STEP:.0f}s",
            "-replay.disableProgressBar",
            # A recording rule over 10,000 VMs writes millions of points per replayed query: the default
            # queue of 100,000 points overflows.
            "-remoteWrite.maxQueueSize=20000000",
            "-remoteWrite.maxBatchSize=10000",
            "-remoteWrite.concurrency=2",
            "-loggerLevel=WARN",
        ],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if replay.returncode != 0:
        raise RuntimeError(f"vmalert's replay exited {replay.returncode}: {(replay.stdout + replay.stderr)[-1500:]}")
    http_get(engine + "/internal/force_flush")
    return time.monotonic() - began


def _recording_rules(tmp: Path) -> Path:
    """The rule file's recording rules alone: what the dashboards read (each rule replayed waits a second for
    the one before it to be written; alerting rules would only add ALERTS series, timed apart anyway)."""
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    recording = [
        {**group, "rules": [rule for rule in group["rules"] if "record" in rule]}
        for group in groups
        if any("record" in rule for rule in group["rules"])
    ]
    path = tmp / "recording.rules.yml"
    path.write_text(yaml.safe_dump({"groups": recording}, sort_keys=False), encoding="utf-8")
    return path


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _wait(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http_get(url)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer")


def _print_engine(report: Report, figures: dict[str, Any], panels: list[Panel], rules: list[Rule]) -> None:
    count, hours = figures["vms"], figures["hours"]
    report.table(
        f"Fleet of {count:,} VMs, {hours:g} h at a {STEP:.0f} s interval, through remote_write to VictoriaMetrics",
        ["figure", "value"],
        [
            ["samples sent", f"{figures['samples']:,}"],
            ["text generated in / posted to vmagent in", f"{figures['generated']:.0f} s / {figures['posted']:.0f} s"],
            ["all samples in the engine after", f"{figures['sent']:.0f} s"],
            ["recording rules replayed in (vmalert)", f"{figures['rules_backfilled']:.0f} s"],
            ["series at the end of the window", f"{figures['series_end']:,}"],
            ["engine data on disk", f"{figures['data_bytes'] / 2**20:,.1f} MiB"],
            ["bytes per sample on disk", f"{figures['data_bytes'] / figures['samples']:.2f}"],
            ["VictoriaMetrics peak RSS after the queries", f"{figures['engine_peak_rss_mib']:,.0f} MiB"],
            ["vmagent peak RSS", f"{figures['agent_peak_rss_mib']:,.0f} MiB"],
            ["slowest dashboard query (median of 3)", f"{max(p[4][0] for p in panels) * 1000:,.0f} ms"],
            ["slowest rule (median of 3)", f"{max(r[2][0] for r in rules) * 1000:,.0f} ms"],
        ],
    )
    print_queries(report, figures, panels, rules)
