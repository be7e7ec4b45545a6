"""Alerting rules, each with a summary, a description naming the instance and a runbook link."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import DISRUPTIVE, IMMINENT, PAUSES, RUNBOOK_BASE, m
from dashboards.mixin.recording import (
    APPROVALS_FAILED,
    EXPORTER_UP,
    PERSISTENCE_ERRORS,
    POLL_ERRORS_RATIO,
    SPOOL_DROPPED,
)

INFO_LABELS = "event_status, event_source, resource_type, affects_this_vm, impact, cause"
EVENT_MATCH = "on (job, instance, event_id)"
SCHEDULED = 'event_status="Scheduled"'
STARTED = 'event_status="Started"'
# Anything but a pause: the four disruptive impacts, and "unknown" (a new EventType is worth a look).
NOT_PAUSE = f'impact!~"{PAUSES}"'
DISRUPTIVE_IMPACTS = f'impact=~"{DISRUPTIVE}"'
REDEPLOY = 'event_type="Redeploy"'
IMMINENT_IMPACTS = f'impact=~"{IMMINENT}"'
NOT_USER = 'cause!="user"'
# What each impact means for the workload, in the words of the runbook (a Go template).
MEANING = (
    '{{ if eq $labels.impact "reboot" }}The VM will restart: memory is lost, disks are kept.'
    '{{ else if eq $labels.impact "redeploy" }}The VM moves to another host: memory and the temporary disk are lost.'
    '{{ else if eq $labels.impact "eviction" }}The Spot VM will be evicted (deallocated or deleted).'
    '{{ else if eq $labels.impact "termination" }}The VM will be deleted (scale-in or delete).'
    '{{ else if eq $labels.impact "live_migration" }}The VM pauses for seconds while its memory moves host.'
    '{{ else if eq $labels.impact "pause" }}The VM pauses; nothing is lost.'
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


def info(selectors: str) -> str:
    return f"{m('event_info')}{{{selectors}}}"


def scheduled(selectors: str) -> str:
    """Seconds until NotBefore of the Scheduled events ``selectors`` picks, with the event's labels."""
    events = info(f"{SCHEDULED}, {selectors}, {THIS_VM}")
    return (
        f"{m('event_seconds_until_not_before')}\n"
        f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
        f"    {events}\n"
        f"or {EVENT_MATCH}\n"
        f"  # Should never happen (Scheduled events carry a NotBefore), but never miss the event.\n"
        f'  label_replace({events}, "not_before", "unknown", "", "")'
    )


def _when(what: str) -> str:
    return (
        f"{what} {{{{ if $labels.not_before }}}}its NotBefore is unknown{{{{ else }}}}NotBefore is in "
        "{{ $value | humanizeDuration }}{{ end }}."
    )


def alerting_rules(job_selector: str) -> list[dict[str, Any]]:
    return [
        alert(
            "AzureScheduledEventImpactfulScheduled",
            scheduled(NOT_PAUSE),
            "0m",
            "critical",
            "Azure maintenance that reboots, moves or removes a VM is scheduled.",
            _when(
                "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}, cause "
                "{{ $labels.cause }}) is scheduled for {{ $labels.instance }};"
            )
            + f" {MEANING} Drain the VM and approve the event, or let it start at NotBefore.",
        ),
        alert(
            "AzureScheduledEventPauseScheduled",
            scheduled('impact="pause"'),
            "0m",
            "warning",
            "Azure will pause a VM for maintenance.",
            _when(
                "{{ $labels.event_type }} event {{ $labels.event_id }} (impact pause, cause {{ $labels.cause }}) "
                "will pause {{ $labels.instance }};"
            )
            + " The VM pauses (DurationInSeconds says for how long); nothing is lost. Latency-sensitive "
            "workloads may want to fail over first.",
        ),
        alert(
            "AzureScheduledEventLiveMigrationScheduled",
            scheduled('impact="live_migration"'),
            "0m",
            "info",
            "Azure will live-migrate a VM: a pause of seconds.",
            _when(
                "{{ $labels.event_type }} event {{ $labels.event_id }} (impact live_migration, cause "
                "{{ $labels.cause }}) will live-migrate {{ $labels.instance }};"
            )
            + " The VM pauses for seconds while its memory moves to another host; nothing is lost. Nothing to "
            "do for most workloads.",
        ),
        alert(
            "AzureScheduledEventNotBeforeImminent",
            f"({m('event_seconds_until_not_before')} < 300)\n"
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{SCHEDULED}, {NOT_USER}, {IMMINENT_IMPACTS}, {THIS_VM}')}",
            "0m",
            "critical",
            "Azure maintenance starts within 5 minutes and has been neither approved nor started.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}) on "
            "{{ $labels.instance }} can start in {{ $value | humanizeDuration }} (NotBefore; negative means "
            f"already due) and is still Scheduled. {MEANING} Drain the VM now and approve the event, or accept "
            "the impact.",
        ),
        alert(
            "AzureScheduledEventStarted",
            f"{m('event_started_seconds')}\n"
            f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
            f"    {info(f'{STARTED}, {NOT_PAUSE}, {THIS_VM}')}",
            "0m",
            "info",
            "Azure maintenance is in progress on a VM.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}, cause "
            "{{ $labels.cause }}) on {{ $labels.instance }} has been Started for {{ $value | humanizeDuration }}. "
            f"{MEANING}",
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
            f"  max_over_time({info(f'{DISRUPTIVE_IMPACTS}, {THIS_VM}')}[30m])",
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
            "AzureScheduledEventsPersistenceFailing",
            f"{PERSISTENCE_ERRORS} > 0",
            "0m",
            "warning",
            "se-exporter cannot write its state file or its log spool.",
            "{{ $value | humanize }} write(s) of the {{ $labels.file }} file failed on {{ $labels.instance }} in "
            "the last 15 minutes (a full or read-only disk?). While the state file cannot be saved, approvals "
            "wait; log records are kept in memory and written once the disk works again, but a restart "
            "meanwhile loses them.",
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
