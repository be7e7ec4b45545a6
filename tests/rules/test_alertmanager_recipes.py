"""The shipped Alertmanager recipes, on a real Alertmanager: the messages its templates write (which VM,
what the event will do, why, and when), and the inhibit rules that silence node-down alerts while a node is
in Azure maintenance. Only the receivers' URLs are changed (to a local webhook) and the timers shortened."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.processes import Alertmanager, WebhookReceiver
from tests.support.wait import wait_for

from .recipes import firing

pytestmark = pytest.mark.debian

MAINTENANCE = "AzureScheduledEventMaintenanceWindow"
DESCRIPTION = (
    "Reboot event R1 (impact reboot, cause platform) on 10.0.0.5:10160 can start in 9m 0s (NotBefore; negative "
    "means already due), is still Scheduled and this exporter has not approved it. The VM will restart: memory "
    "is lost, disks are kept. Drain the VM now and approve the event, or accept the impact."
)


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
    # Severity warning: routed to chat (Slack), like most node-down alerts of kube-prometheus and node_exporter.
    inhibited = [
        {"alertname": "KubeNodeNotReady", "severity": "warning", "node": "aks-1", "job": "kube-state-metrics"},
        {"alertname": "InstanceDown", "severity": "warning", "instance": "vm-a", "job": "node"},
        {
            "alertname": "AzureScheduledEventsExporterDown",
            "severity": "warning",
            "job": "se-exporter",
            "instance": "10.0.0.4:10160",
        },
    ]
    delivered = [
        {"alertname": "KubeNodeNotReady", "severity": "warning", "node": "aks-2", "job": "kube-state-metrics"},
        {"alertname": "InstanceDown", "severity": "warning", "instance": "vm-b", "job": "node"},
        {"alertname": "KubeletDown", "severity": "warning", "job": "kubelet"},  # no node label: not "equal"
    ]
    targets = [
        firing(labels, f"{labels['alertname']} of {labels.get('node', labels.get('instance', 'all'))}")
        for labels in inhibited + delivered
    ]
    response = manager.http.post("/api/v2/alerts", json=[*sources, *targets])
    assert response.status_code == 200, response.text

    def processed() -> dict[tuple[tuple[str, str], ...], dict[str, Any]]:
        """Each alert's status once the notification pipeline has seen every one ("unprocessed" before) and
        the inhibitor every source: its cache is fed by a goroutine of its own, so until then an alert it
        will mute reads active."""
        states = {tuple(sorted(a["labels"].items())): a["status"] for a in manager.alerts()}
        done = len(states) == len(sources) + len(inhibited) + len(delivered)
        done = done and all(s["state"] != "unprocessed" for s in states.values())
        muted = done and all(states[tuple(sorted(labels.items()))]["inhibitedBy"] for labels in inhibited)
        return states if muted else {}

    states = wait_for(processed, 20, "every alert through the notification pipeline, the inhibited muted")
    for labels in inhibited:
        status = states[tuple(sorted(labels.items()))]
        assert status["state"] == "suppressed" and status["inhibitedBy"], (labels, status)
    for labels in delivered:
        status = states[tuple(sorted(labels.items()))]
        assert status["state"] == "active" and status["inhibitedBy"] == [], (labels, status)

    def slack_text() -> str:
        texts = [a["text"] for d in webhook.deliveries if d.path == "/chat/slack" for a in d.payload["attachments"]]
        joined = "\n".join(texts)
        return joined if all(f"of {name}" in joined for name in ("aks-2", "vm-b", "all")) else ""

    text = wait_for(slack_text, 20, "the node-down alerts that are not inhibited, in chat")
    assert not [name for name in ("aks-1", "vm-a", "10.0.0.4") if f"of {name}" in text], (
        "an inhibited alert reached chat"
    )
    assert not [d for d in webhook.deliveries if MAINTENANCE in str(d.payload)], "the source is notified to nobody"


def test_the_messages_say_which_vm_what_it_does_why_and_when(
    alertmanager: tuple[Alertmanager, WebhookReceiver],
) -> None:
    manager, webhook = alertmanager
    page = event_labels("AzureScheduledEventNotBeforeImminent", "critical")
    chat = event_labels(
        "AzureScheduledEventImpactfulScheduled",
        "warning",
        event_id="F1",
        event_type="Redeploy",
        impact="redeploy",
        node="aks-3",
    )
    response = manager.http.post("/api/v2/alerts", json=[firing(page, DESCRIPTION), firing(chat, "Redeploy F1 soon.")])
    assert response.status_code == 200, response.text

    def body(path: str) -> dict[str, Any]:
        found = wait_for(lambda: [d.payload for d in webhook.deliveries if d.path == path], 20, f"a POST to {path}")
        return found[0]

    pager = body("/pager/pagerduty")
    assert pager["payload"]["summary"] == "[FIRING:1] AzureScheduledEventNotBeforeImminent on 10.0.0.5:10160"
    events = pager["payload"]["custom_details"]["events"]
    assert events.startswith("10.0.0.5:10160: Reboot R1, impact reboot, cause platform.\n" + DESCRIPTION)
    slack = body("/chat/slack")["attachments"][0]
    assert slack["title"] == "[FIRING:1] AzureScheduledEventImpactfulScheduled on 10.0.0.5:10160"
    assert slack["text"].startswith(
        "10.0.0.5:10160 (node aks-3): Redeploy F1, impact redeploy, cause platform.\nRedeploy F1 soon."
    )


def test_slack_messages_escape_what_imds_supplies_and_show_every_event(
    alertmanager: tuple[Alertmanager, WebhookReceiver],
) -> None:
    """Issue 29, point 10: an EventId of ``<!channel> <https://...|Approve now>`` pinged the channel."""
    manager, webhook = alertmanager
    hostile = "<!channel> <https://example.invalid/x|Approve now> & more"
    alerts = [
        event_labels(
            "AzureScheduledEventImpactfulScheduled",
            "warning",
            instance="10.0.0.7:10160",
            event_id=hostile,
            event_type="Freeze",
            impact="pause",
        ),
        event_labels(
            "AzureScheduledEventImpactfulScheduled",
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
