"""The real OpenTelemetry Collector in the tests: built from ``tests/collector/`` (a main that assembles the
Collector's own modules, every one at one release; ``go.sum`` verifies each module) by
``tests/support/go_build.py``, and run on a config a test writes.

``Collector`` runs the binary: every listener binds port 0, and the ports it got are read from ``/proc``
(``tests/support/proc_sockets.py``) and told apart by asking them: the Collector's own telemetry answers
``GET /metrics``; a Collector a test runs has one OTLP receiver besides it (HTTP or gRPC).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.otlp.http_receiver import hex_ids_to_base64
from tests.otlp.records import ReceivedLog, ReceivedSpan, flatten_logs, flatten_spans
from tests.support.go_build import TESTS, go_build
from tests.support.proc_sockets import listening_ports
from tests.support.wait import wait_for

SOURCE = TESTS / "collector"
RELEASE = "0.165.0"  # the core modules' release (contrib v0.165.1 goes with it); main.go says it too
LOOPBACK = "127.0.0.1"


def _scrape(port: int) -> str | None:
    """The Collector's telemetry at ``port``, or None when that port is not it."""
    try:
        answer = httpx.get(f"http://{LOOPBACK}:{port}/metrics", timeout=5)
    except httpx.HTTPError:
        return None
    return answer.text if answer.status_code == 200 and "otelcol_" in answer.text else None


def _answers_http(port: int) -> bool:
    try:
        httpx.post(f"http://{LOOPBACK}:{port}/v1/logs", content=b"", timeout=5)
    except httpx.HTTPError:
        return False
    return True


class Collector:
    """One Collector process on ``config`` (a dict written as YAML in ``folder``); ``receiver_port`` is the
    port of its OTLP receiver, ``telemetry_port`` that of its own metrics."""

    def __init__(self, folder: Path, config: Mapping[str, Any], *, receiver_port: int = 0) -> None:
        """``receiver_port``: the port its OTLP receiver takes instead of the one it would get (a Collector
        replacing another on the port the exporter sends to)."""
        self.binary = go_build(SOURCE)
        self.folder = folder
        self.config_path = folder / "collector.yaml"
        self.config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        self.log_path = folder / "collector.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.receiver_port = receiver_port  # the OTLP receiver's (its HTTP one when it has both)
        self.grpc_port = 0  # its gRPC one, when it has both
        self.telemetry_port = 0
        receivers = (config.get("receivers") or {}).items()
        protocols = [p for name, r in receivers if name.split("/")[0] == "otlp" for p in (r.get("protocols") or {})]
        self._listeners = 1 + len(protocols)  # its telemetry, and an OTLP receiver per protocol

    def start(self) -> Collector:
        """Start it; once its receiver's port is known (a restart), it listens there again (the exporter is
        configured with it)."""
        if self.receiver_port:
            text = self.config_path.read_text()
            text = text.replace(f"{LOOPBACK}:0\n", f"{LOOPBACK}:{self.receiver_port}\n", 1)
            self.config_path.write_text(text)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.binary), f"--config={self.config_path}"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        proc = self.proc
        wait_for(
            lambda: proc.poll() is not None or self._ports_known(proc.pid),
            60,
            "the Collector listening",
        )
        assert proc.poll() is None, f"the Collector exited {proc.returncode}:\n{self.logs()[-4000:]}"
        return self

    def _ports_known(self, pid: int) -> bool:
        ports = set(listening_ports(pid))
        if len(ports) < self._listeners:
            return False
        telemetry = [port for port in ports if _scrape(port) is not None]
        if not telemetry:
            return False
        self.telemetry_port = telemetry[0]
        others = sorted(ports - {self.telemetry_port})
        if len(others) == 1:
            self.receiver_port = others[0]
        elif others:  # OTLP/HTTP answers an HTTP/1.1 request; gRPC's server hangs up on it
            http = [port for port in others if _answers_http(port)]
            self.receiver_port = http[0] if http else others[0]
            self.grpc_port = next((port for port in others if port != self.receiver_port), 0)
        return True

    def endpoint(self, scheme: str = "http") -> str:
        return f"{scheme}://{LOOPBACK}:{self.receiver_port}"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> str:
        return _scrape(self.telemetry_port) or ""

    def counted(self, name: str, **labels: str) -> float:
        """The sum of the Collector's own series ``name`` (``_total`` or not) whose labels include ``labels``."""
        total = 0.0
        for line in self.metrics().splitlines():
            match = re.match(rf"{name}(?:_total)?(?:\{{(.*)\}})? (\S+)$", line)
            if match and all(f'{k}="{v}"' in (match[1] or "") for k, v in labels.items()):
                total += float(match[2])
        return total


def run_validate(config_path: Path) -> subprocess.CompletedProcess[str]:
    """``otelcol validate`` on a config file."""
    return subprocess.run(
        [str(go_build(SOURCE)), "validate", f"--config={config_path}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _requests(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        if line.strip():
            yield json.loads(line)


def file_logs(path: Path) -> list[ReceivedLog]:
    """The log records the Collector's file exporter wrote to ``path`` (OTLP/JSON, a request per line)."""
    logs: list[ReceivedLog] = []
    for request in _requests(path):
        if "resourceLogs" in request:
            message = json_format.ParseDict(hex_ids_to_base64(request), logs_service_pb2.ExportLogsServiceRequest())
            logs.extend(flatten_logs(message, "collector-file"))
    return logs


def file_spans(path: Path) -> list[ReceivedSpan]:
    """The spans the Collector's file exporter wrote to ``path``."""
    spans: list[ReceivedSpan] = []
    for request in _requests(path):
        if "resourceSpans" in request:
            message = json_format.ParseDict(hex_ids_to_base64(request), trace_service_pb2.ExportTraceServiceRequest())
            spans.extend(flatten_spans(message, "collector-file"))
    return spans
