"""The README's static scrape example on a real Prometheus, its targets' labels on a real Alertmanager: a VM
in maintenance silences node_exporter's InstanceDown of the same VM (issue 40: the example kept :10160 in
instance, and the inhibition's `equal: [instance]` never matched node_exporter's :9100)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.processes import Alertmanager, Prometheus, WebhookReceiver
from tests.support.readme import README, code_blocks
from tests.support.tools import require
from tests.support.wait import wait_for

from .recipes import firing


def readme_scrape_configs() -> list[dict[str, Any]]:
    text = README.read_text(encoding="utf-8")
    marked = text[text.index("<!-- static-scrape -->") : text.index("<!-- /static-scrape -->")]
    (block,) = code_blocks(marked, "yaml")
    return list(yaml.safe_load(block)["scrape_configs"])


def targets(tmp_path: Path) -> dict[str, dict[str, str]]:
    """job/address -> the target's labels after relabeling, as the README's configuration makes them."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": readme_scrape_configs()}), encoding="utf-8")
    prometheus = Prometheus(require("prometheus"), config, tmp_path)
    try:
        prometheus.wait_ready()
        configured = sum(len(group["targets"]) for job in readme_scrape_configs() for group in job["static_configs"])

        def every_target() -> list[dict[str, Any]] | None:  # discovery adds them a job at a time
            active = list(prometheus.api("targets")["activeTargets"])
            return active if len(active) >= configured else None

        active = wait_for(every_target, 30, "every target of the README's configuration")
        return {f"{t['labels']['job']}/{t['discoveredLabels']['__address__']}": t["labels"] for t in active}
    finally:
        prometheus.stop()


@pytest.mark.debian
def test_both_jobs_name_each_vm_alike(tmp_path: Path) -> None:
    labels = targets(tmp_path)
    for vm in ("vm-1", "vm-2"):
        ours, node = labels[f"se-exporter/{vm}.example.internal:10160"], labels[f"node/{vm}.example.internal:9100"]
        assert ours["instance"] == node["instance"] == f"{vm}.example.internal"


@pytest.mark.debian
def test_a_vm_in_maintenance_silences_node_exporters_instance_down_of_that_vm(
    tmp_path: Path, alertmanager: tuple[Alertmanager, WebhookReceiver]
) -> None:
    labels = targets(tmp_path / "prometheus")
    manager, _webhook = alertmanager
    window = {
        "alertname": "AzureScheduledEventMaintenanceWindow",
        "severity": "info",
        **labels["se-exporter/vm-1.example.internal:10160"],
        "event_id": "R1",
        "impact": "reboot",
    }
    down = [
        {"alertname": "InstanceDown", "severity": "critical", **labels[f"node/{vm}.example.internal:9100"]}
        for vm in ("vm-1", "vm-2")
    ]
    response = manager.http.post("/api/v2/alerts", json=[firing(window), *(firing(d) for d in down)])
    assert response.status_code == 200, response.text

    def states() -> dict[str, str] | None:
        seen = {a["labels"]["instance"]: a["status"]["state"] for a in manager.alerts() if a["labels"]["job"] == "node"}
        processed = len(seen) == 2 and "unprocessed" not in seen.values()
        # Alertmanager's inhibitor learns of the window alert on a goroutine of its own: until it has, vm-1's
        # InstanceDown reads active (seen once on a loaded machine), so the test waits for the inhibition.
        return seen if processed and seen["vm-1.example.internal"] == "suppressed" else None

    assert wait_for(states, 20, "vm-1's InstanceDown inhibited by its maintenance window") == {
        "vm-1.example.internal": "suppressed",
        "vm-2.example.internal": "active",
    }
    assert re.fullmatch(r"[\w.-]+", window["instance"]), "no port left in instance"
