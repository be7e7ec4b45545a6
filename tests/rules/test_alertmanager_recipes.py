"""The shipped Alertmanager recipes, on a real Alertmanager: the messages its templates write (which VM,
what the event will do, why, and when), and the inhibit rules that silence node-down alerts while a node is
in Azure maintenance. Only the receivers' URLs are changed (to a local webhook) and the timers shortened."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.processes import Alertmanager, WebhookReceiver
from tests.support.tools import require
from tests.support.wait import wait_for

from .promql import REPO_ROOT

ALERTS = REPO_ROOT / "alerts"
MAINTENANCE = "AzureScheduledEventMaintenanceWindow"
DESCRIPTION = (
    "Reboot event R1 (impact reboot, cause platform) is scheduled for 10.0.0.5:10160; NotBefore is in 9m 0s. "
    "The VM will restart: memory is lost, disks are kept."
)


def local(shipped: dict[str, Any], webhook: str) -> dict[str, Any]:
    """The shipped configuration with every receiver's URL on ``webhook`` and timers of a second."""
    config = copy.deepcopy(shipped)
    routes = [config["route"], *config["route"]["routes"]]
    for route in routes:
        route.update({"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"})
    for receiver in config["receivers"]:
        for slack in receiver.get("slack_configs", []):
            slack["api_url"] = f"{webhook}/{receiver['name']}/slack"
        for pager in receiver.get("pagerduty_configs", []):
            pager["url"] = f"{webhook}/{receiver['name']}/pagerduty"
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{webhook}/{receiver['name']}/webhook"
    return config


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[tuple[Alertmanager, WebhookReceiver]]:
    binary = require("prometheus-alertmanager", "alertmanager")
    webhook = WebhookReceiver().start()
    shipped = yaml.safe_load((ALERTS / "alertmanager.yml").read_text(encoding="utf-8"))
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(local(shipped, webhook.url), sort_keys=False))
    shutil.copy(ALERTS / "se-exporter.tmpl", tmp_path / "se-exporter.tmpl")  # templates: relative to the config
    manager = Alertmanager(binary, config, tmp_path)
    try:
        manager.wait_ready()
        yield manager, webhook
    finally:
        manager.close()
        webhook.stop()


def firing(labels: dict[str, str], description: str = "") -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "labels": labels,
        "annotations": {"summary": "s", "description": description or f"{labels['alertname']} for the test"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
    }


def _labelled(labels: dict[str, str]) -> Callable[[str, dict[str, Any]], bool]:
    """A webhook match: an alert delivered with exactly these labels."""
    return lambda _path, alert: bool(alert["labels"] == labels)


def event_labels(alertname: str, severity: str, **more: str) -> dict[str, str]:
    return {
        "alertname": alertname,
        "severity": severity,
        "job": "se-exporter",
        "instance": "10.0.0.5:10160",
        "event_id": "R1",
        "event_type": "Reboot",
        "event_status": "Scheduled",
        "impact": "reboot",
        "cause": "platform",
        **more,
    }


def test_node_down_alerts_of_a_node_in_maintenance_are_inhibited_and_the_others_are_not(
    alertmanager: tuple[Alertmanager, WebhookReceiver],
) -> None:
    manager, webhook = alertmanager
    sources = [
        firing(event_labels(MAINTENANCE, "info", node="aks-1", instance="10.0.0.4:10160", event_status="Started")),
        firing(event_labels(MAINTENANCE, "info", instance="vm-a", event_status="Started")),  # a VM: no node label
    ]
    # Severity info: routed to the webhook receiver, whose JSON carries every label (Slack's text does not).
    inhibited = [
        {"alertname": "KubeNodeNotReady", "severity": "info", "node": "aks-1", "job": "kube-state-metrics"},
        {"alertname": "InstanceDown", "severity": "info", "instance": "vm-a", "job": "node"},
        {
            "alertname": "AzureScheduledEventsExporterDown",
            "severity": "info",
            "job": "se-exporter",
            "instance": "10.0.0.4:10160",
        },
    ]
    delivered = [
        {"alertname": "KubeNodeNotReady", "severity": "info", "node": "aks-2", "job": "kube-state-metrics"},
        {"alertname": "InstanceDown", "severity": "info", "instance": "vm-b", "job": "node"},
        {"alertname": "KubeletDown", "severity": "info", "job": "kubelet"},  # no node label: not "equal"
    ]
    response = manager.http.post(
        "/api/v2/alerts", json=[*sources, *(firing(labels) for labels in inhibited + delivered)]
    )
    assert response.status_code == 200, response.text

    for labels in delivered:
        webhook.wait_alert(_labelled(labels), 20, f"{labels} delivered")
    states = {tuple(sorted(a["labels"].items())): a["status"] for a in manager.alerts()}
    for labels in inhibited:
        status = states[tuple(sorted(labels.items()))]
        assert status["state"] == "suppressed" and status["inhibitedBy"], (labels, status)
    for labels in delivered:
        assert states[tuple(sorted(labels.items()))]["inhibitedBy"] == [], labels
    sent = [alert["labels"] for _path, alert in webhook.alerts()]
    assert not [labels for labels in inhibited if labels in sent], "an inhibited alert reached a receiver"
    assert not [labels for labels in sent if labels["alertname"] == MAINTENANCE], "the source is notified to nobody"


def test_the_messages_say_which_vm_what_it_does_why_and_when(
    alertmanager: tuple[Alertmanager, WebhookReceiver],
) -> None:
    manager, webhook = alertmanager
    page = event_labels("AzureScheduledEventImpactfulScheduled", "critical")
    chat = event_labels(
        "AzureScheduledEventPauseScheduled", "warning", event_id="F1", event_type="Freeze", impact="pause", node="aks-3"
    )
    response = manager.http.post("/api/v2/alerts", json=[firing(page, DESCRIPTION), firing(chat, "Freeze F1 soon.")])
    assert response.status_code == 200, response.text

    def body(path: str) -> dict[str, Any]:
        found = wait_for(lambda: [d.payload for d in webhook.deliveries if d.path == path], 20, f"a POST to {path}")
        return found[0]

    pager = body("/pager/pagerduty")
    assert pager["payload"]["summary"] == "[FIRING:1] AzureScheduledEventImpactfulScheduled on 10.0.0.5:10160"
    events = pager["payload"]["custom_details"]["events"]
    assert events.startswith("10.0.0.5:10160: Reboot R1, impact reboot, cause platform.\n" + DESCRIPTION)
    slack = body("/chat/slack")["attachments"][0]
    assert slack["title"] == "[FIRING:1] AzureScheduledEventPauseScheduled on 10.0.0.5:10160"
    assert slack["text"].startswith(
        "10.0.0.5:10160 (node aks-3): Freeze F1, impact pause, cause platform.\nFreeze F1 soon."
    )


def test_slack_messages_escape_what_imds_supplies_and_show_every_event(
    alertmanager: tuple[Alertmanager, WebhookReceiver],
) -> None:
    """Issue 29, point 10: an EventId of ``<!channel> <https://...|Approve now>`` pinged the channel."""
    manager, webhook = alertmanager
    hostile = "<!channel> <https://example.invalid/x|Approve now> & more"
    alerts = [
        event_labels(
            "AzureScheduledEventPauseScheduled",
            "warning",
            instance="10.0.0.7:10160",
            event_id=hostile,
            event_type="Freeze",
            impact="pause",
        ),
        event_labels(
            "AzureScheduledEventPauseScheduled",
            "warning",
            instance="10.0.0.7:10160",
            event_id="F2",
            event_type="Freeze",
            impact="pause",
        ),
    ]
    response = manager.http.post("/api/v2/alerts", json=[firing(alerts[0], "<b>soon</b>"), firing(alerts[1])])
    assert response.status_code == 200, response.text

    def slack_texts() -> list[str]:
        bodies = [d.payload for d in webhook.deliveries if d.path == "/chat/slack"]
        texts = [a["text"] for body in bodies for a in body["attachments"]]
        return texts if any("F2" in text for text in texts) and any("channel" in text for text in texts) else []

    text = "\n".join(wait_for(slack_texts, 20, "both events in Slack messages"))
    assert "<!channel>" not in text and "<https://" not in text and "<b>" not in text
    assert "&lt;!channel&gt; &lt;https://example.invalid/x|Approve now&gt; &amp; more" in text
    assert "&lt;b&gt;soon&lt;/b&gt;" in text
    assert "10.0.0.7:10160: Freeze F2, impact pause, cause platform." in text
