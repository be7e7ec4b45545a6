"""Alerting rules, each with a summary, a description naming the instance and a runbook link."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.alert_parts import (
    DISRUPTIVE_IMPACTS,
    EVENT_MATCH,
    IMMINENT_IMPACTS,
    INFO_LABELS,
    MAINTENANCE_WINDOW,
    MEANING,
    NOT_PAUSE,
    NOT_USER,
    REDEPLOY,
    SCHEDULED,
    STARTED,
    THIS_VM,
    alert,
    approved,
    info,
    scheduled,
    when,
)
from dashboards.mixin.config import m
from dashboards.mixin.recording import (
    APPROVALS_FAILED,
    EXPORTER_UP,
    PERSISTENCE_ERRORS,
    POLL_ERRORS_RATIO,
    SPOOL_DROPPED,
)

# A disruptive event of this VM that the platform (or a failure) brings, still Scheduled, within 5 minutes.
IMMINENT_EXPR = (
    f"({m('event_seconds_until_not_before')} < 300)\n"
    f"  * {EVENT_MATCH} group_left ({INFO_LABELS})\n"
    f"    {info(f'{SCHEDULED}, {NOT_USER}, {IMMINENT_IMPACTS}, {THIS_VM}')}"
)


def alerting_rules(job_selector: str) -> list[dict[str, Any]]:
    return [
        alert(
            "AzureScheduledEventImpactfulScheduled",
            scheduled(NOT_PAUSE),
            "0m",
            "critical",
            "Azure maintenance that reboots, moves or removes a VM is scheduled.",
            when(
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
            when(
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
            when(
                "{{ $labels.event_type }} event {{ $labels.event_id }} (impact live_migration, cause "
                "{{ $labels.cause }}) will live-migrate {{ $labels.instance }};"
            )
            + " The VM pauses for seconds while its memory moves to another host; nothing is lost. Nothing to "
            "do for most workloads.",
        ),
        alert(
            "AzureScheduledEventNotBeforeImminent",
            approved(IMMINENT_EXPR, by_us=False),
            "0m",
            "critical",
            "Azure maintenance starts within 5 minutes and nobody has approved it.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}) on "
            "{{ $labels.instance }} can start in {{ $value | humanizeDuration }} (NotBefore; negative means "
            "already due), is still Scheduled and this exporter has not approved it. "
            f"{MEANING} Drain the VM now and approve the event, or accept the impact.",
        ),
        alert(
            "AzureScheduledEventApprovedWaiting",
            approved(IMMINENT_EXPR, by_us=True),
            "0m",
            "warning",
            "Approved Azure maintenance is waiting for NotBefore or the host's other tenants.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}) on "
            "{{ $labels.instance }} was approved by se-exporter and is still Scheduled; it can start in "
            "{{ $value | humanizeDuration }} (NotBefore; negative means already due). Azure may start an "
            "approved event later than asked: on shared hardware it waits for every VM on the host to approve, "
            f"or for NotBefore. {MEANING} Nothing to approve; make sure the VM is drained.",
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
            "AzureScheduledEventMaintenanceWindow",
            f"max_over_time({info(f'{STARTED}, {DISRUPTIVE_IMPACTS}, {THIS_VM}')}[{MAINTENANCE_WINDOW}])",
            "0m",
            "info",
            "A VM is in, or just out of, Azure maintenance: its node-down alerts are expected.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}, cause "
            "{{ $labels.cause }}) was Started on {{ $labels.instance }} within the last "
            f"{MAINTENANCE_WINDOW}, and the VM may be down for it. This alert keeps firing {MAINTENANCE_WINDOW} "
            "after the exporter's last sample (a rebooting VM's exporter is down too): the shipped Alertmanager "
            "configuration inhibits node-down alerts of the same node or instance while it fires.",
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
            "AzureScheduledEventsStateWritesSlow",
            f"histogram_quantile(0.9, rate({m('state_write_seconds_bucket')}[10m])) > 2",
            "15m",
            "warning",
            "se-exporter's disk is slow: its durable writes take seconds.",
            "90% of the writes of the {{ $labels.file }} file on {{ $labels.instance }} took up to "
            "{{ $value | humanizeDuration }} (fsync included) over the last 10 minutes: the disk is at its IOPS "
            "or throughput cap. What the exporter shows is not held up, but approvals, action runs and log "
            "records wait for their writes.",
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
