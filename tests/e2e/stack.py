"""The end-to-end stack, started once per test module (see conftest.py)::

    SimulatorServer (thread) --IMDS--> se-exporter (subprocess, approval policy, an action, OTLP to a test receiver)
        <--scrape 1s-- Prometheus (Debian binary; shipped rules + a for:0s override copy)
            --alerts--> Alertmanager (Debian binary; the shipped routing tree) --webhook--> WebhookReceiver

Everything is on 127.0.0.1 with free ports and is stopped at exit, also when start-up fails.
"""

from __future__ import annotations

import contextlib
import random
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from se_exporter.simulator import SimClock, SimulatorServer, SimWorld
from tests.e2e import scene as scene_mod
from tests.e2e.processes import (
    Alertmanager,
    Prometheus,
    WebhookReceiver,
    alertmanager_config,
    for_override_rules,
    prometheus_config,
    write_yaml,
)
from tests.otlp import OTLPHttpReceiver
from tests.rules.promql import REPO_ROOT
from tests.support.exporter_process import ExporterProcess
from tests.support.wait import wait_for

RULES = REPO_ROOT / "alerts" / "se-exporter.rules.yml"
ALERTMANAGER_YML = REPO_ROOT / "alerts" / "alertmanager.yml"
JOB = "se-exporter"  # matches the rules' job selector up{job=~".*se-exporter.*"}


@dataclass
class Stack:
    workdir: Path
    sim: SimulatorServer
    exporter: ExporterProcess
    prometheus: Prometheus
    alertmanager: Alertmanager
    webhook: WebhookReceiver
    scene: scene_mod.Scene
    override_rules: Path
    started_at: float  # wall time Prometheus started scraping

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.exporter.port}"

    def diagnostics(self) -> str:
        return diagnostics(self.exporter, self.prometheus, self.alertmanager)


def diagnostics(exporter: ExporterProcess, prometheus: Prometheus, alertmanager: Alertmanager) -> str:
    """Log tails of the three processes, for failure messages."""
    return (
        f"\n--- exporter log (tail) ---\n{exporter.logs()[-2500:]}"
        f"\n--- prometheus log (tail) ---\n{prometheus.logs(2500)}"
        f"\n--- alertmanager log (tail) ---\n{alertmanager.logs(2500)}"
    )


def approval_policy(workdir: Path) -> tuple[Path, Path]:
    """A policy approving User-initiated events through a hook that always fails (hook_failed)."""
    marker = workdir / "hook-ran"
    hook = workdir / "failing-hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\necho 'e2e: refusing to drain' >&2\nexit 1\n")
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    policy = {
        "dry_run": False,
        "leader": "first_resource",
        "rules": [{"name": "user-initiated", "event_sources": ["User"]}],
        "hook": {"command": [str(hook)], "timeout_seconds": 10},
    }
    return write_yaml(workdir / "approval.yml", policy), marker


def actions_file(workdir: Path) -> Path:
    """An action on every scheduled and started transition; the stack checks that its runs are counted
    (tests/actions/ checks what actions see)."""
    action = {"name": "e2e-note", "transitions": ["scheduled", "started"], "command": ["/bin/true"]}
    return write_yaml(workdir / "actions.yml", {"actions": [action]})


@contextlib.contextmanager
def running_stack(workdir: Path, prometheus_bin: str, alertmanager_bin: str) -> Iterator[Stack]:
    """Start the whole stack and build the scene; stop everything on exit (also if start-up fails)."""
    with contextlib.ExitStack() as cleanup:
        world = SimWorld(clock=SimClock(speed=1.0), rng=random.Random(20240611))
        sim = SimulatorServer(world).start()
        cleanup.callback(sim.stop)

        otlp = OTLPHttpReceiver().start()
        cleanup.callback(otlp.stop)
        policy, marker = approval_policy(workdir)
        exporter = ExporterProcess(
            f"--imds.url={sim.url}",
            "--poll.interval=250ms",
            f"--approval.config={policy}",
            f"--actions.config={actions_file(workdir)}",
            f"--state.file={workdir / 'exporter-state.db'}",
            env={**otlp.env, "OTEL_SDK_DISABLED": "false", "OTEL_BSP_SCHEDULE_DELAY": "500"},
            log_path=workdir / "exporter.log",
        )
        cleanup.callback(_stop_exporter, exporter)
        try:
            exporter.wait_ready()
        except AssertionError as error:
            raise AssertionError(f"{error}\n--- exporter log ---\n{exporter.logs()[-4000:]}") from None

        webhook = WebhookReceiver().start()
        cleanup.callback(webhook.stop)
        shipped_am = yaml.safe_load(ALERTMANAGER_YML.read_text(encoding="utf-8"))
        am_config = write_yaml(workdir / "alertmanager.yml", alertmanager_config(shipped_am, webhook.url))
        alertmanager = Alertmanager(alertmanager_bin, am_config, workdir)
        cleanup.callback(alertmanager.close)

        override = write_yaml(
            workdir / "rules-for-override.yml", for_override_rules(yaml.safe_load(RULES.read_text(encoding="utf-8")))
        )
        prom_config = write_yaml(
            workdir / "prometheus.yml",
            prometheus_config(
                job=JOB,
                target=f"127.0.0.1:{exporter.port}",
                rule_files=[RULES, override],
                alertmanager=f"127.0.0.1:{alertmanager.port}",
            ),
        )
        prometheus = Prometheus(prometheus_bin, prom_config, workdir)
        cleanup.callback(prometheus.close)
        alertmanager.wait_ready()
        prometheus.wait_ready()
        started_at = time.time()

        def scraped(expr: str, what: str) -> None:
            wait_for(lambda: prometheus.query(expr), 15, f"Prometheus: {what} ({expr})", interval=0.2)

        try:
            scraped(f'up{{job="{JOB}"}} == 1', "target up")
            scraped(f'count_over_time(up{{job="{JOB}"}}[1m]) >= 3', "three scrapes")

            def between_rounds() -> None:
                scraped(
                    'azure_scheduled_events_started_duration_seconds_count{event_type="Freeze"} >= 1',
                    "history round 1 scraped",
                )
                scraped(
                    'azure_scheduled_events_notice_seconds_count{event_type="Reboot"} >= 1', "history round 1 scraped"
                )

            scene = scene_mod.build(world, exporter, between_rounds)
            scraped(f"count(azure_scheduled_events_event_info) == {len(scene.listed)}", "final state scraped")
            # The User Reboot was listed seconds ago: the approver runs the policy's hook (which fails, by design).
            wait_for(marker.exists, 20, "the approval policy's hook to run for the User Reboot", interval=0.1)
        except AssertionError as error:
            raise AssertionError(f"{error}{diagnostics(exporter, prometheus, alertmanager)}") from None

        yield Stack(workdir, sim, exporter, prometheus, alertmanager, webhook, scene, override, started_at)


def _stop_exporter(exporter: ExporterProcess) -> None:
    try:
        exporter.stop(timeout=10)
    except subprocess.TimeoutExpired:
        exporter.proc.kill()
        exporter.proc.wait(10)
