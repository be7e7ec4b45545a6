"""Alerting rules, each with a summary, a description naming the instance and a runbook link."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import IMPACTFUL, RUNBOOK_BASE, m
from dashboards.mixin.recording import APPROVALS_FAILED, EXPORTER_UP, POLL_ERRORS_RATIO, SPOOL_DROPPED

INFO_LABELS = "event_status, event_source, resource_type, affects_this_vm"
EVENT_MATCH = "on (job, instance, event_id)"
SCHEDULED = 'event_status="Scheduled"'
STARTED = 'event_status="Started"'
IMPACTFUL_TYPES = f'event_type=~"{IMPACTFUL}"'
REDEPLOY = 'event_type="Redeploy"'
NOT_FREEZE = 'event_type!="Freeze"'
NOT_USER = 'event_source!="User"'
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


def info(selectors: str) -> str:
    return f"{m('event_info')}{{{selectors}}}"


def alerting_rules(job_selector: str) -> list[dict[str, Any]]:
    impactful_scheduled = info(f"{SCHEDULED}, {IMPACTFUL_TYPES}, {THIS_VM}")
    return [
        alert(
            "AzureScheduledEventImpactfulScheduled",
            f"{m('event_seconds_until_not_before')}\n"
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {impactful_scheduled}\n"
            f"or {EVENT_MATCH}\n"
            f"  # Should never happen (Scheduled events carry a NotBefore), but never miss the event.\n"
            f'  label_replace({impactful_scheduled}, "not_before", "unknown", "", "")',
            "0m",
            "warning",
            "An impactful Azure maintenance event is scheduled for a VM.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (source: {{ $labels.event_source }}) is "
            "scheduled for {{ $labels.instance }}; "
            "{{ if $labels.not_before }}its NotBefore is unknown{{ else }}NotBefore is in "
            "{{ $value | humanizeDuration }}{{ end }}. Drain the VM and approve the event, or let it start "
            "at NotBefore.",
        ),
        alert(
            "AzureScheduledEventNotBeforeImminent",
            f'({m("event_seconds_until_not_before")}{{event_type=~"Reboot|Redeploy|Terminate"}} < 300)\n'
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{SCHEDULED}, {NOT_USER}, {THIS_VM}')}",
            "0m",
            "critical",
            "Azure maintenance starts within 5 minutes and has been neither approved nor started.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} can start in "
            "{{ $value | humanizeDuration }} (NotBefore; negative means already due) and is still Scheduled. "
            "Drain the VM now and approve the event, or accept the impact.",
        ),
        alert(
            "AzureScheduledEventStarted",
            f"{m('event_started_seconds')}\n"
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{STARTED}, {NOT_FREEZE}, {THIS_VM}')}",
            "0m",
            "info",
            "Azure maintenance is in progress on a VM.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} has been Started "
            "for {{ $value | humanizeDuration }}: the VM is being (or is about to be) rebooted, redeployed, "
            "preempted or terminated.",
        ),
        alert(
            "AzureScheduledEventStartedTooLong",
            f"({m('event_started_seconds')} > 600)\n"
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{STARTED}, {THIS_VM}')}",
            "5m",
            "warning",
            "Azure maintenance has been in progress far longer than its documented window.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} has been Started "
            "for {{ $value | humanizeDuration }}; maintenance normally completes within about 10 minutes.",
        ),
        alert(
            "AzureScheduledEventLongNoticeRedeploy",
            f'{m("event_seconds_until_not_before")}{{event_type="Redeploy"}}\n'
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{REDEPLOY}, {SCHEDULED}, {THIS_VM}')}\n"
            f"and {EVENT_MATCH}\n"
            f"  # Announced at least an hour ahead (normal Redeploy notice is about 10 minutes).\n"
            f'  (max_over_time({m("event_seconds_until_not_before")}{{event_type="Redeploy"}}[1d]) > 3600)',
            "5m",
            "warning",
            "Azure announced a Redeploy days ahead: the VM's host hardware is probably degraded.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} was announced well "
            "ahead; NotBefore is in {{ $value | humanizeDuration }}. Redeploy the VM yourself at a convenient "
            "time (drain, then approve the event or run az vm redeploy) instead of waiting for NotBefore.",
        ),
        alert(
            "AzureScheduledEventsIMDSDown",
            f"{m('imds_up')} == 0",
            "5m",
            "warning",
            "se-exporter cannot poll the Azure Instance Metadata Service.",
            "IMDS Scheduled Events polls from {{ $labels.instance }} have been failing for more than 5 minutes "
            "(imds_up = {{ $value }}): maintenance events for this VM are not being seen.",
        ),
        alert(
            "AzureScheduledEventsIMDSPollErrors",
            f"{POLL_ERRORS_RATIO} > 0.1",
            "15m",
            "warning",
            "Many se-exporter polls of the Azure Instance Metadata Service fail.",
            "{{ $value | humanizePercentage }} of the IMDS Scheduled Events polls from {{ $labels.instance }} "
            "failed over the last 5 minutes, for 15 minutes; events may be seen late.",
        ),
        alert(
            "AzureScheduledEventsExporterDown",
            f"{EXPORTER_UP} == 0\n"
            f"# A VM being rebooted or redeployed takes its exporter down: expected for 30 minutes.\n"
            f"unless on (job, instance)\n"
            f"  max_over_time({info(f'{IMPACTFUL_TYPES}, {THIS_VM}')}[30m])",
            "5m",
            "warning",
            "Prometheus cannot scrape se-exporter.",
            "se-exporter on {{ $labels.instance }} (job {{ $labels.job }}) has been unreachable for Prometheus "
            "for more than 5 minutes (up = {{ $value }}) and the VM had no impactful maintenance event in the "
            "last 30 minutes.",
        ),
        alert(
            "AzureScheduledEventsExporterAbsent",
            f"absent({EXPORTER_UP})",
            "15m",
            "warning",
            "No se-exporter target is being scraped.",
            f"Prometheus has had no scrape target matching {{{job_selector}}} for 15 minutes: no Azure "
            "scheduled events are being monitored. Check service discovery and the exporter deployment.",
        ),
        alert(
            "AzureScheduledEventsExporterStale",
            f"time() - {m('last_successful_poll_timestamp_seconds')} > 300",
            "2m",
            "warning",
            "se-exporter has not polled IMDS successfully for a long time.",
            "The last successful IMDS poll on {{ $labels.instance }} was {{ $value | humanizeDuration }} ago: "
            "its metrics are stale and new events are not being seen.",
        ),
        alert(
            "AzureScheduledEventsApprovalFailed",
            f"{APPROVALS_FAILED} > 0",
            "0m",
            "warning",
            "se-exporter failed to approve an Azure maintenance event.",
            "{{ $value | humanize }} approval(s) of {{ $labels.event_type }} events on {{ $labels.instance }} "
            "ended with result {{ $labels.result }} in the last 15 minutes: the event was not approved and "
            "will start at its NotBefore.",
        ),
        alert(
            "AzureScheduledEventsLogSpoolDropping",
            f"{SPOOL_DROPPED} > 0",
            "0m",
            "warning",
            "se-exporter is dropping transition log records.",
            "{{ $value | humanize }} transition log records were dropped from the OTLP spool on "
            "{{ $labels.instance }} in the last 15 minutes: the OTLP receiver is unreachable or too slow and "
            "the maintenance audit trail has gaps.",
        ),
    ]
