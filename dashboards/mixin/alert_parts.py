"""The pieces every alerting rule is made of: selectors, the meaning of each impact, the rule's shape."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import DISRUPTIVE, PAGED_CAUSES, PAGED_IMPACTS, RUNBOOK_BASE, UNDISRUPTIVE, m

INFO_LABELS = "event_status, event_source, resource_type, affects_this_vm, impact, cause"
# With ``cluster``: in a central engine two clusters may have the same job and instance (pod IPs of the same
# range), and a join that merges them fails or matches the wrong VM. Without a cluster label it is "" on both sides.
EVENT_MATCH = "on (cluster, job, instance, event_id)"
SCHEDULED = 'event_status="Scheduled"'
STARTED = 'event_status="Started"'
# Anything but a pause or an event of no impact: the four disruptive impacts, and "unknown" (a new EventType
# is worth a look).
NOT_PAUSE = f'impact!~"{UNDISRUPTIVE}"'
DISRUPTIVE_IMPACTS = f'impact=~"{DISRUPTIVE}"'
REDEPLOY = 'event_type="Redeploy"'
NOT_USER = 'cause!="user"'
# The events that page within the lead time, unless approved (alerts/runbook.md, "Paging policy").
PAGED = f'impact=~"{PAGED_IMPACTS}", cause=~"{PAGED_CAUSES}"'
# The events whose notice is a warning to chat: anything that is not a pause, an event of no impact, a Spot
# eviction (30 s of notice: nothing a human can do), a Spot eviction-risk notice or an event the user caused.
NOTICE = f'impact!~"{UNDISRUPTIVE}|eviction|eviction_risk", {NOT_USER}'
# The labels of one event, dropped where a rule speaks of the VM rather than of its events.
EVENT_LABELS = f"event_id, event_type, {INFO_LABELS}"
# How long after a disruptive event was last seen Started its VM may still be down (a reboot, a redeploy):
# the inhibition source of the shipped Alertmanager configuration fires that long after the last sample.
MAINTENANCE_WINDOW = "30m"
# What each impact means for the workload, in the words of the runbook (a Go template).
MEANING = (
    '{{ if eq $labels.impact "reboot" }}The VM will restart: memory is lost, disks are kept.'
    '{{ else if eq $labels.impact "redeploy" }}The VM moves to another host: memory and the temporary disk are lost.'
    '{{ else if eq $labels.impact "eviction" }}The Spot VM will be evicted (deallocated or deleted).'
    '{{ else if eq $labels.impact "termination" }}The VM will be deleted (scale-in or delete).'
    '{{ else if eq $labels.impact "live_migration" }}The VM pauses for seconds while its memory moves host.'
    '{{ else if eq $labels.impact "pause" }}The VM pauses; nothing is lost.'
    '{{ else if eq $labels.impact "none" }}Azure says the event does not interrupt the VM.'
    '{{ else if eq $labels.impact "eviction_risk" }}Nothing is lost yet: Azure may evict this Spot VM soon.'
    "{{ else }}se-exporter does not know what this event type does.{{ end }}"
)
# Events for this VM; "unknown" (the exporter could not learn the VM name) counts as this VM.
THIS_VM = 'affects_this_vm!="false"'


def anchor(alertname: str) -> str:
    """The anchor GitHub generates for a Markdown heading made of the alert name."""
    return alertname.lower()


def alert(  # noqa: PLR0917 - reads like the rule it builds
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": f"{RUNBOOK_BASE}#{anchor(name)}",
        },
    }


def approved(expr: str, *, by_us: bool) -> str:
    """``expr`` for the events this exporter approved (``by_us``), or for the others."""
    return f"{expr}\n{'and' if by_us else 'unless'} {EVENT_MATCH} {m('event_approved_timestamp_seconds')}"


def joined(value: str, selectors: str) -> str:
    """A per-event gauge's ``value`` expression with the labels of the events ``selectors`` picks."""
    return f"{value}\n  * {EVENT_MATCH} group_left ({INFO_LABELS})\n    {info(selectors)}"


def info(selectors: str) -> str:
    return f"{m('event_info')}{{{selectors}}}"


def scheduled(selectors: str) -> str:
    """Seconds until NotBefore of the Scheduled events ``selectors`` picks, with the event's labels."""
    picked = f"{SCHEDULED}, {selectors}, {THIS_VM}"
    return (
        f"{joined(m('event_seconds_until_not_before'), picked)}\n"
        f"or {EVENT_MATCH}\n"
        f"  # Should never happen (Scheduled events carry a NotBefore), but never miss the event.\n"
        f'  label_replace({info(picked)}, "not_before", "unknown", "", "")'
    )


def when(what: str) -> str:
    return (
        f"{what} {{{{ if $labels.not_before }}}}its NotBefore is unknown{{{{ else }}}}NotBefore is in "
        "{{ $value | humanizeDuration }}{{ end }}."
    )
