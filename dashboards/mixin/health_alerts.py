"""Exporter-health alerts: the exporter, its IMDS polls, approvals, actions and disk. Warnings, for chat."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.alert_parts import DISRUPTIVE_IMPACTS, THIS_VM, alert, info
from dashboards.mixin.config import Settings, m
from dashboards.mixin.recording import (
    ACTIONS_FAILED,
    APPROVALS_FAILED,
    CLUSTER_EXPORTERS,
    EXPORTER_UP,
    PERSISTENCE_ERRORS,
    POLL_ERRORS_RATIO,
    SPOOL_DROPPED,
)


def health_alerts(settings: Settings) -> list[dict[str, Any]]:
    job_selector = settings.job_selector
    return [
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
            f"unless on (cluster, job, instance)\n"
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
            (
                f"Prometheus has had no node_exporter target matching {{{job_selector}}} serving se-exporter's "
                "textfile for 15 minutes: no Azure scheduled events are being monitored. Check node_exporter's "
                "--collector.textfile.directory, the link to se-exporter's --textfile.path, and the job name."
                if settings.textfile
                else f"Prometheus has had no scrape target matching {{{job_selector}}} for 15 minutes: no Azure "
                "scheduled events are being monitored. Check service discovery and the exporter deployment."
            ),
        ),
        alert(
            "AzureScheduledEventsExporterAbsentInCluster",
            f"max_over_time({CLUSTER_EXPORTERS}[1d])\nunless on (cluster, job) {CLUSTER_EXPORTERS}",
            "15m",
            "warning",
            "Every se-exporter of a cluster (or job) has vanished.",
            "{{ $value }} se-exporter target(s) of job {{ $labels.job }}{{ if $labels.cluster }} in cluster "
            "{{ $labels.cluster }}{{ end }} were scraped within the last day and none is now, for 15 minutes: "
            "that cluster's Azure maintenance is not being seen (its DaemonSet, its Prometheus, or its remote "
            "write is gone). AzureScheduledEventsExporterAbsent cannot tell while other clusters report. A "
            "cluster removed on purpose alerts for a day: silence it.",
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
            "ended with result {{ $labels.result }} in the last 15 minutes: the event was not approved (with "
            "result unknown, the exporter died while approving: maybe not) and will start at its NotBefore.",
        ),
        alert(
            "AzureScheduledEventsActionFailing",
            f"{ACTIONS_FAILED} > 0",
            "0m",
            "warning",
            "An se-exporter action on a maintenance transition failed.",
            "{{ $value | humanize }} run(s) of action {{ $labels.action }} on {{ $labels.instance }} ended "
            "{{ $labels.result }} in the last 15 minutes ({{ $labels.transition }} transitions): whatever it does "
            "(notify, drain, tag) did not happen. Its log line and OTLP record scheduled_event.action carry its "
            "last output.",
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
