"""Real Prometheus and Alertmanager processes, a webhook receiver, and their configuration files.

Everything listens on 127.0.0.1 only, every process logs to a file whose tail goes into failure
messages, and every wait has a deadline.
"""

from __future__ import annotations

import copy
import json
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.quiet_server import QuietHTTPServer
from tests.support.tools import require
from tests.support.wait import wait_for


def require_binary(*names: str) -> str:
    """The first of ``names`` found (``tests.support.tools.require``: a skip locally, a failure under CI)."""
    return require(*names)


def tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as error:
        return f"<cannot read {path}: {error}>"


# What exporter-toolkit's servers (Prometheus, Alertmanager, node_exporter) log once bound: the address they
# got, so they are started on port 0 and no port is chosen here and left for another process to take.
TOOLKIT_LISTENING = re.compile(r'msg="Listening on" address=127\.0\.0\.1:(\d+)')


class ManagedProcess:
    """A long-running binary: started with its output in a log file, always stopped (TERM, then KILL)."""

    name = "process"
    listening = TOOLKIT_LISTENING  # how the process says which port it bound

    def __init__(self, argv: Sequence[str], log_path: Path) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._port: int | None = None
        self._http: httpx.Client | None = None

    @property
    def port(self) -> int:
        """The port it bound (its log line, waited for)."""
        if self._port is None:
            self._port = wait_for(self._bound_port, 30, f"{self.name}'s 'listening' line", retry_on=())
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            self._http = httpx.Client(base_url=self.url, timeout=30, trust_env=False)
        return self._http

    def _bound_port(self) -> int | None:
        self.alive()
        found = self.listening.search(tail(self.log_path, 1 << 20))
        return int(found.group(1)) if found else None

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        self.stop()

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.logs()}")
        return True

    def logs(self, chars: int = 4000) -> str:
        return tail(self.log_path, chars)

    def stop(self, timeout: float = 10) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout)
        finally:
            self._log.close()


class Prometheus(ManagedProcess):
    name = "prometheus"

    def __init__(self, binary: str, config: Path, workdir: Path) -> None:
        super().__init__(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                "--web.listen-address=127.0.0.1:0",
                "--log.level=info",
            ],
            workdir / "prometheus.log",
        )

    def wait_ready(self, timeout: float = 30) -> None:
        wait_for(lambda: self.alive() and self.http.get("/-/ready").status_code == 200, timeout, "Prometheus ready")

    def api(self, path: str, **params: Any) -> Any:
        """``data`` of a successful API answer; AssertionError (with the error and log tail) otherwise."""
        response = self.http.get(f"/api/v1/{path}", params=params)
        body = response.json()
        if response.status_code != 200 or body.get("status") != "success":
            raise AssertionError(
                f"Prometheus /api/v1/{path} {params} answered {response.status_code}: "
                f"{body.get('errorType')}: {body.get('error')}\n--- prometheus log ---\n{self.logs(2000)}"
            )
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self.api("query", **params)
        if data["resultType"] == "scalar":  # e.g. time() alone: make it look like a one-sample vector
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[dict[str, Any]]:
        return list(self.api("query_range", query=expr, start=start, end=end, step=step)["result"])


class Alertmanager(ManagedProcess):
    name = "alertmanager"

    def __init__(self, binary: str, config: Path, workdir: Path) -> None:
        (workdir / "am-data").mkdir(exist_ok=True)
        super().__init__(
            [
                binary,
                f"--config.file={config}",
                f"--storage.path={workdir / 'am-data'}",
                "--web.listen-address=127.0.0.1:0",
                "--cluster.listen-address=",  # no gossip: a single, isolated instance
            ],
            workdir / "alertmanager.log",
        )

    def wait_ready(self, timeout: float = 30) -> None:
        wait_for(lambda: self.alive() and self.http.get("/-/ready").status_code == 200, timeout, "Alertmanager ready")

    def alerts(self) -> list[dict[str, Any]]:
        response = self.http.get("/api/v2/alerts")
        response.raise_for_status()
        return list(response.json())


@dataclass
class Delivery:
    path: str
    payload: dict[str, Any]
    at: float = field(default_factory=time.time)


class WebhookReceiver:
    """Records every JSON body POSTed to it (Alertmanager's webhook_configs)."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = {"unparsable": raw.decode(errors="replace")}
                with receiver._lock:
                    receiver.deliveries.append(Delivery(self.path, payload))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="e2e-webhook", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def alerts(self) -> list[tuple[str, dict[str, Any]]]:
        """(receiver path, alert) for every alert in every delivery so far."""
        with self._lock:
            deliveries = list(self.deliveries)
        return [(d.path, alert) for d in deliveries for alert in d.payload.get("alerts", [])]

    def wait_alert(
        self, match: Callable[[str, dict[str, Any]], bool], timeout: float, what: str
    ) -> tuple[str, dict[str, Any]]:
        def found() -> tuple[str, dict[str, Any]] | None:
            return next(((p, a) for p, a in self.alerts() if match(p, a)), None)

        delivered = wait_for(found, timeout, what, interval=0.1)
        assert delivered is not None  # wait_for only returns a truthy value
        return delivered


# ----- configuration files ----------------------------------------------------------------------

OVERRIDE_LABEL = "e2e_for_override"


def for_override_rules(rules: dict[str, Any]) -> dict[str, Any]:
    """A copy of the shipped alerting rules with every ``for:`` set to 0s, for a Prometheus that
    also loads the shipped file: recording rules are dropped (the shipped file records them),
    groups are renamed and every alert gets the label ``e2e_for_override="true"``, so both
    copies can be told apart in Prometheus and Alertmanager.
    """
    out: dict[str, Any] = {"groups": []}
    for group in rules["groups"]:
        alerts = []
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            rule = copy.deepcopy(rule)
            rule["for"] = "0s"
            rule["labels"] = {**rule.get("labels", {}), OVERRIDE_LABEL: "true"}
            alerts.append(rule)
        if alerts:
            out["groups"].append({**group, "name": f"{group['name']}-e2e-for-override", "rules": alerts})
    return out


def prometheus_config(*, job: str, target: str, rule_files: Sequence[Path], alertmanager: str) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files],
        "alerting": {"alertmanagers": [{"api_version": "v2", "static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}],
    }


def alertmanager_config(shipped: dict[str, Any], webhook_url: str) -> dict[str, Any]:
    """The shipped example configuration with its routing tree and inhibit rules intact, timers
    shortened to a second, and every receiver replaced by the test webhook at ``/hook/<receiver>``."""
    config = copy.deepcopy(shipped)
    config.pop("templates", None)

    def shorten(route: dict[str, Any]) -> None:
        for key, value in (("group_wait", "1s"), ("group_interval", "1s"), ("repeat_interval", "1h")):
            if key in route or route is config["route"]:
                route[key] = value
        for child in route.get("routes", []):
            shorten(child)

    shorten(config["route"])
    config["receivers"] = [
        {"name": r["name"], "webhook_configs": [{"url": f"{webhook_url}/hook/{r['name']}", "send_resolved": False}]}
        for r in shipped["receivers"]
    ]
    return config


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
