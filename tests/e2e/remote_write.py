"""Past one Prometheus, for real (issue 48): Debian's VictoriaMetrics (single node) and vmalert, per-cluster
Prometheus servers that remote_write to it with their own ``cluster`` external label, and a synthetic fleet
whose VMs each are a scrape target (so each has its own ``up``), all on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import yaml

from se_exporter import __version__
from tests.e2e.processes import ManagedProcess, Prometheus
from tests.support.proc_sockets import listening_ports
from tests.support.quiet_server import QuietHTTPServer
from tests.support.tools import require
from tests.support.wait import wait_for

P = "azure_scheduled_events_"
JOB = "se-exporter"


class BoundFromProc(ManagedProcess):
    """A server started on port 0 that logs the address it was given, not the port it got: the port is
    read from the kernel's table of its listening sockets."""

    def _bound_port(self) -> int | None:
        self.alive()
        ports = listening_ports(self.proc.pid)
        assert len(ports) <= 1, f"{self.name} listens on {ports}: which is its HTTP port?"
        return ports[0] if ports else None


class VictoriaMetrics(BoundFromProc):
    name = "victoria-metrics"

    def __init__(self, workdir: Path) -> None:
        super().__init__(
            [
                require("victoria-metrics"),
                "-httpListenAddr=127.0.0.1:0",
                f"-storageDataPath={workdir / 'vm-data'}",
                "-search.latencyOffset=1s",  # the default 30 s hides the newest samples from instant queries
                "-search.disableCache",  # every query sees what was written since the last one
                "-loggerLevel=WARN",
            ],
            workdir / "victoria-metrics.log",
        )

    def wait_ready(self, timeout: float = 30) -> None:
        wait_for(lambda: self.alive() and self.http.get("/health").status_code == 200, timeout, "VictoriaMetrics up")

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr} | ({"time": at} if at is not None else {})
        body = self.http.get("/api/v1/query", params=params).json()
        assert body.get("status") == "success", f"VictoriaMetrics: {expr}: {body}\n{self.logs(2000)}"
        data = body["data"]
        return [{"metric": {}, "value": data["result"]}] if data["resultType"] == "scalar" else list(data["result"])


class VMAlert(BoundFromProc):
    """vmalert evaluating rule files on VictoriaMetrics, writing recording rules back, alerting Alertmanager."""

    name = "vmalert"

    def __init__(self, rules: Sequence[Path], engine: str, alertmanager: str, workdir: Path) -> None:
        super().__init__(
            [
                require("vmalert"),
                *(f"-rule={path}" for path in rules),
                f"-datasource.url={engine}",
                f"-remoteWrite.url={engine}",
                f"-notifier.url={alertmanager}",
                "-evaluationInterval=1s",
                # Queries at now-5s: a VM's sample may still be on its way (a scrape a second, a remote-write
                # batch a second); at "now" the engine sees some series a moment late, and alerts flap.
                "-datasource.lookback=5s",
                # An alert not sent again within 4 resend periods ends in Alertmanager: with a second, a
                # vmalert starved for 4 s on a busy machine would resolve the wave and page it again.
                "-rule.resendDelay=5s",
                "-httpListenAddr=127.0.0.1:0",
                "-loggerLevel=WARN",
            ],
            workdir / "vmalert.log",
        )

    def wait_ready(self, timeout: float = 30) -> None:
        wait_for(lambda: self.alive() and self.http.get("/health").status_code == 200, timeout, "vmalert up")

    def firing(self, alertname: str) -> list[dict[str, str]]:
        """The labels of every firing alert of that name."""
        alerts = self.http.get("/api/v1/alerts").json()["data"]["alerts"]
        return [a["labels"] for a in alerts if a["name"] == alertname and a["state"] == "firing"]


Event = tuple[str, str, str, str, float]  # id, type, impact, cause, NotBefore (Unix time)


@dataclass
class SyntheticVM:
    """What one VM's exporter shows: its Scheduled events, a Started one (since when), an approval, its
    histograms and counters, as docs/design.md names them. ``down``: its target answers 503 (up is 0)."""

    events: list[Event] = field(default_factory=list)
    started: tuple[Event, float] | None = None
    approved_at: float | None = None  # of its first Scheduled event
    imds_up: int = 1
    down: bool = False

    def exposition(self, now: float) -> str:
        lines = [
            f'{P}exporter_build_info{{version="{__version__}",python_version="3.11.7"}} 1',
            f"{P}imds_up {self.imds_up}",
            f"{P}last_successful_poll_timestamp_seconds {now:.3f}",
            f"{P}document_incarnation {1 + len(self.events)}",
            f'{P}poll_errors_total{{reason="timeout"}} 0',
            f'{P}imds_requests_total{{method="GET",code="200"}} 100',
            f'{P}persistence_errors_total{{file="state"}} 0',
            f"{P}log_spool_depth 0",
            f"{P}log_spool_dropped_total 0",
            f'{P}actions_total{{action="notify",transition="scheduled",result="succeeded"}} {len(self.events)}',
            *_histogram(f"{P}imds_request_duration_seconds", 'method="GET"', (0.005, 0.01, 0.05), [0.004] * 60),
            *_histogram(f"{P}state_write_seconds", 'file="state"', (0.001, 0.01, 0.1), [0.002] * 5),
        ]
        for index, (event_id, event_type, impact, cause, not_before) in enumerate(self.events):
            event = f'event_id="{event_id}",event_type="{event_type}"'
            lines += [
                _info(event, "Scheduled", impact, cause),
                f"{P}event_seconds_until_not_before{{{event}}} {not_before - now:.3f}",
                f"{P}event_not_before_timestamp_seconds{{{event}}} {not_before:.0f}",
                f"{P}event_duration_seconds{{{event}}} -1",
                f'{P}pending{{event_type="{event_type}",event_status="Scheduled"}} 1',
                f'{P}transitions_total{{event_type="{event_type}",transition="scheduled"}} 1',
                *_histogram(f"{P}notice_seconds", f'event_type="{event_type}"', (300, 900, 3600), [600]),
            ]
            if index == 0 and self.approved_at is not None:
                lines += [
                    f"{P}event_approved_timestamp_seconds{{{event}}} {self.approved_at:.0f}",
                    f'{P}approvals_total{{event_type="{event_type}",result="approved"}} 1',
                ]
        if self.started is not None:
            (event_id, event_type, impact, cause, _), since = self.started
            event = f'event_id="{event_id}",event_type="{event_type}"'
            lines += [
                _info(event, "Started", impact, cause),
                f"{P}event_started_seconds{{{event}}} {now - since:.3f}",
                f"{P}event_duration_seconds{{{event}}} 600",
                f'{P}pending{{event_type="{event_type}",event_status="Started"}} 1',
                f'{P}transitions_total{{event_type="{event_type}",transition="started"}} 1',
                *_histogram(f"{P}started_duration_seconds", f'event_type="{event_type}"', (60, 300, 900), [240]),
            ]
        return "\n".join(lines) + "\n"


def _info(event: str, status: str, impact: str, cause: str) -> str:
    source = "User" if cause == "user" else "Platform"
    return (
        f'{P}event_info{{{event},event_status="{status}",event_source="{source}",resource_type="VirtualMachine",'
        f'affects_this_vm="true",impact="{impact}",cause="{cause}"}} 1'
    )


def _histogram(name: str, labels: str, buckets: tuple[float, ...], observed: list[float]) -> list[str]:
    rows = [f'{name}_bucket{{{labels},le="{le:g}"}} {sum(v <= le for v in observed)}' for le in buckets]
    rows.append(f'{name}_bucket{{{labels},le="+Inf"}} {len(observed)}')
    return [*rows, f"{name}_sum{{{labels}}} {sum(observed):g}", f"{name}_count{{{labels}}} {len(observed)}"]


class SyntheticFleet:
    """One HTTP server for every VM of every cluster: ``/<cluster>/<vm>`` is that VM's /metrics."""

    def __init__(self) -> None:
        self.vms: dict[tuple[str, str], SyntheticVM] = {}
        self._lock = threading.Lock()
        fleet = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                _, cluster, vm = [*self.path.split("?")[0].split("/"), "", ""][:3]
                with fleet._lock:
                    found = fleet.vms.get((cluster, vm))
                body = found.exposition(time.time()).encode() if found and not found.down else b""
                self.send_response(404 if found is None else 503 if found.down else 200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SyntheticFleet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def targets(self, cluster: str, *, with_cluster_label: bool = False) -> list[dict[str, Any]]:
        """file_sd entries of a cluster's VMs (``instance`` is the VM's name, as the docs relabel it)."""
        with self._lock:
            names = sorted(vm for c, vm in self.vms if c == cluster)
        extra = {"cluster": cluster} if with_cluster_label else {}
        return [
            {"targets": [self.address], "labels": {"__metrics_path__": f"/{cluster}/{vm}", "instance": vm, **extra}}
            for vm in names
        ]


def write_targets(path: Path, entries: list[dict[str, Any]]) -> None:
    """Replaced whole by a rename, as file_sd wants (a half-written file would drop the targets)."""
    staging = path.with_suffix(".tmp")
    staging.write_text(yaml.safe_dump(entries), encoding="utf-8")
    staging.replace(path)


def cluster_prometheus(workdir: Path, cluster: str, targets: Path, engine: str) -> Prometheus:
    """A cluster's own Prometheus: scrapes its VMs, sends everything to the engine with ``cluster`` added."""
    workdir.mkdir()
    config = {
        "global": {"scrape_interval": "5s", "scrape_timeout": "4s", "external_labels": {"cluster": cluster}},
        "scrape_configs": [{"job_name": JOB, "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}]}],
        "remote_write": [{"url": f"{engine}/api/v1/write", "queue_config": {"batch_send_deadline": "1s"}}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return Prometheus(require("prometheus"), workdir / "prometheus.yml", workdir)


def single_prometheus(workdir: Path, targets: Path, rules: Sequence[Path]) -> Prometheus:
    """One Prometheus for the whole fleet (the ``cluster`` label set on its targets): the reference view."""
    workdir.mkdir()
    config = {
        "global": {"scrape_interval": "5s", "scrape_timeout": "4s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in rules],
        "scrape_configs": [{"job_name": JOB, "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "1s"}]}],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return Prometheus(require("prometheus"), workdir / "prometheus.yml", workdir)
