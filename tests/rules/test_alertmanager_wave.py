"""A maintenance wave on a real Alertmanager with the shipped configuration: 200 VMs of one job get a
platform Reboot, each unapproved within the lead time. The on-call engineer gets one page listing the 200,
and chat one message for the wave, not 200 of each (issue 40: the pager route grouped by instance)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.processes import Alertmanager, WebhookReceiver
from tests.support.wait import wait_for

from .recipes import ALERTS, firing, running

pytestmark = pytest.mark.debian

VMS = 200
PAGER, CHAT = "/pager/pagerduty", "/chat/slack"


def wave_alerts(vms: int = VMS) -> list[dict[str, Any]]:
    """The alerts the shipped rules fire for the wave (labels as the rules make them, target labels kept)."""
    alerts = []
    for n in range(vms):
        event = {
            "job": "se-exporter",
            "instance": f"vm-{n:03}:10160",
            "node": f"aks-{n:03}",
            "cluster": "prod",
            "event_id": f"R{n:03}",
            "event_type": "Reboot",
            "event_status": "Scheduled",
            "impact": "reboot",
            "cause": "platform",
            "affects_this_vm": "true",
        }
        where = f"Reboot R{n:03} of vm-{n:03}"
        alerts.append(
            firing({"alertname": "AzureScheduledEventNotBeforeImminent", "severity": "critical", **event}, where)
        )
        alerts.append(
            firing({"alertname": "AzureScheduledEventImpactfulScheduled", "severity": "warning", **event}, where)
        )
    wave = {"alertname": "AzureScheduledEventsMaintenanceWave", "severity": "warning", "job": "se-exporter"}
    alerts.append(firing({**wave, "cluster": "prod"}, f"{vms} VMs of job se-exporter in cluster prod"))
    return alerts


def deliver_wave(manager: Alertmanager, webhook: WebhookReceiver, vms: int = VMS) -> tuple[int, int]:
    """Post the wave; once every VM has been paged and every alert has been through the pipeline, the number
    of notifications to the pager and to chat."""
    response = manager.http.post("/api/v2/alerts", json=wave_alerts(vms))
    assert response.status_code == 200, response.text

    def paged_everyone() -> bool:
        text = "\n".join(str(d.payload) for d in webhook.deliveries if d.path == PAGER)
        return all(f"of vm-{n:03}" in text for n in range(vms))

    wait_for(paged_everyone, 60, f"a page naming each of the {vms} VMs")
    wait_for(
        lambda: all(a["status"]["state"] != "unprocessed" for a in manager.alerts()),
        60,
        "every alert through the notification pipeline",
    )
    wait_for(lambda: any(d.path == CHAT for d in webhook.deliveries), 60, "a message in chat")
    paths = [d.path for d in webhook.deliveries]
    return paths.count(PAGER), paths.count(CHAT)


def test_a_wave_of_200_vms_is_one_page_and_one_chat_message(
    alertmanager: tuple[Alertmanager, WebhookReceiver],
) -> None:
    manager, webhook = alertmanager
    assert deliver_wave(manager, webhook) == (1, 1)
    page = next(d.payload for d in webhook.deliveries if d.path == PAGER)
    assert page["payload"]["summary"] == f"[FIRING:{VMS}] AzureScheduledEventNotBeforeImminent"
    chat = next(d.payload for d in webhook.deliveries if d.path == CHAT)["attachments"][0]
    assert chat["title"] == "[FIRING:1] AzureScheduledEventsMaintenanceWave"
    assert chat["text"].startswith(f"{VMS} VMs of job se-exporter in cluster prod")
    warnings = [a for a in manager.alerts() if a["labels"]["alertname"] == "AzureScheduledEventImpactfulScheduled"]
    assert len(warnings) == VMS and all(a["status"]["inhibitedBy"] for a in warnings), "per-VM warnings in chat"


def test_spot_eviction_risk_routed_to_chat_as_the_runbook_says_is_one_message_per_cluster(tmp_path: Path) -> None:
    """A region short of Spot capacity: 30 Spot VMs in each of two clusters get an eviction-risk notice. With
    the runbook's route (its YAML, taken from the runbook), chat gets one message per cluster, naming its VMs."""
    runbook = (ALERTS / "runbook.md").read_text(encoding="utf-8")
    section = runbook[runbook.index("## AzureScheduledEventSpotEvictionRisk") :]
    snippet = section[section.index("```yaml\n") + len("```yaml\n") : section.index("```\n", section.index("```yaml"))]
    (route,) = yaml.safe_load(snippet)
    config = yaml.safe_load((ALERTS / "alertmanager.yml").read_text(encoding="utf-8"))
    routes = config["route"]["routes"]
    routes.insert(next(i for i, r in enumerate(routes) if r.get("matchers") == ['severity="info"']), route)
    notices = [
        firing(
            {
                "alertname": "AzureScheduledEventSpotEvictionRisk",
                "severity": "info",
                "job": "se-exporter",
                "cluster": cluster,
                "instance": f"{cluster}-vm-{n:02}:10160",
                "event_id": f"S-{cluster}-{n:02}",
                "event_type": "SpotRebalanceRecommendation",
                "event_status": "Advisory",
                "impact": "eviction_risk",
                "cause": "platform",
                "affects_this_vm": "true",
            },
            f"notice of {cluster}-vm-{n:02}",
        )
        for cluster in ("east", "west")
        for n in range(30)
    ]
    with running(tmp_path, yaml.safe_dump(config)) as (manager, webhook):
        response = manager.http.post("/api/v2/alerts", json=notices)
        assert response.status_code == 200, response.text

        def told_of_every_vm() -> list[str]:
            titles = [d.payload["attachments"][0]["title"] for d in webhook.deliveries if d.path == CHAT]
            text = "\n".join(str(d.payload) for d in webhook.deliveries if d.path == CHAT)
            return titles if all(f"notice of {a['labels']['instance'][:-6]}" in text for a in notices) else []

        titles = wait_for(told_of_every_vm, 60, "chat told of every VM at risk")
        wait_for(
            lambda: all(a["status"]["state"] != "unprocessed" for a in manager.alerts()),
            60,
            "every alert through the notification pipeline",
        )
    assert sorted(titles) == ["[FIRING:30] AzureScheduledEventSpotEvictionRisk"] * 2, titles
    assert not [d for d in webhook.deliveries if d.path == PAGER], "an eviction-risk notice never pages"
