"""The VM detail dashboard: one VM's events, from notice to completion, and its IMDS health."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import SEL, VM_UID, m
from dashboards.mixin.grafana import GREEN, Layout, bargauge, dashboard, stat, target, thresholds, timeseries, up_expr
from dashboards.mixin.panels import (
    approvals_by_result,
    event_timeline,
    impact_timeline,
    poll_errors_by_reason,
    soonest_not_before,
)


def vm_detail(job_selector: str) -> dict[str, Any]:
    lay = Layout()
    lay.row("Now")
    lay.add(
        stat(
            "IMDS",
            "Whether the exporter's last IMDS Scheduled Events poll succeeded.",
            f"min({m('imds_up')}{{{SEL}}})",
            "none",
            steps=thresholds((None, "red"), (1, "green")),
            mappings=[{"type": "value", "options": {"0": {"text": "DOWN"}, "1": {"text": "UP"}}}],
            no_value="exporter not reporting",
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Listed events",
            "Events IMDS lists for this VM right now (all types and statuses, including events for other "
            "VMs of the same availability set or scale set).",
            f"sum({m('pending')}{{{SEL}}})",
            "short",
            steps=thresholds((None, "green"), (1, "orange")),
            decimals=0,
        ),
        4,
        4,
    )
    lay.add(
        soonest_not_before(
            "Time until the earliest NotBefore of the listed events (negative: passed, not yet Started).",
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Longest in Started",
            "Time the longest-running Started event has spent in Started so far. The documented maintenance "
            "window is about 10 minutes.",
            f"max({m('event_started_seconds')}{{{SEL}}})",
            "s",
            steps=thresholds((None, "orange"), (600, "red")),
            no_value="none started",
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Since last good poll",
            "time() - azure_scheduled_events_last_successful_poll_timestamp_seconds.",
            f"max(time() - {m('last_successful_poll_timestamp_seconds')}{{{SEL}}})",
            "s",
            steps=thresholds((None, "green"), (60, "orange"), (300, "red")),
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Scrape",
            "Prometheus' up metric for this exporter.",
            f"min({up_expr(job_selector)})",
            "none",
            steps=thresholds((None, "red"), (1, "green")),
            mappings=[{"type": "value", "options": {"0": {"text": "DOWN"}, "1": {"text": "UP"}}}],
            no_value="no target",
        ),
        4,
        4,
    )
    lay.add(
        stat(
            "Failed writes (time range)",
            "Failed writes of the state file and the log spool in the dashboard's time range (a full or "
            "read-only disk): approvals wait while the state file cannot be saved. Empty without --state.file.",
            f"sum(increase({m('persistence_errors_total')}{{{SEL}}}[$__range]))",
            "short",
            steps=thresholds((None, "green"), (0.5, "red")),
            no_value="no state file",
        ),
        4,
        4,
    )

    lay.row("Events")
    lay.add(
        event_timeline(
            "State of each event over time: yellow Scheduled, red Started; a gap means not listed (not yet "
            "announced, completed or cancelled). Row label: instance, type, event ID.",
        ),
        24,
        7,
    )
    lay.add(
        impact_timeline(
            "Each event over time, coloured by what it does to the VM: green live_migration and blue pause "
            "(seconds of pause), orange reboot (memory lost), dark orange redeploy (memory and temporary disk "
            "lost), red eviction (Spot VM removed), dark red termination (VM deleted), purple unknown.",
        ),
        24,
        5,
    )
    lay.add(
        timeseries(
            "Time until NotBefore",
            "NotBefore minus now for each Scheduled event (negative once passed). Dashed line: 5 minutes.",
            [
                target(
                    f"{m('event_seconds_until_not_before')}{{{SEL}}}",
                    "{{instance}} {{event_type}} {{event_id}}",
                )
            ],
            "s",
            steps=thresholds((None, "red"), (300, "green")),
            min_zero=False,
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "Time in Started",
            "Time each Started event has spent in Started so far. Dashed line: 10 minutes, the documented window.",
            [
                target(
                    f"{m('event_started_seconds')}{{{SEL}}}",
                    "{{instance}} {{event_type}} {{event_id}}",
                )
            ],
            "s",
            steps=thresholds((None, "green"), (600, "red")),
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "DocumentIncarnation",
            "IMDS DocumentIncarnation: increases on every change of the event document; may reset after "
            "24 hours without requests.",
            [target(f"{m('document_incarnation')}{{{SEL}}}", "{{instance}}")],
            "none",
            decimals=0,
            min_zero=False,
            line_interpolation="stepAfter",
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "Transitions",
            "Lifecycle transitions of this VM's events over $__rate_interval windows.",
            [
                target(
                    f"sum by (instance, event_type, transition) "
                    f"(increase({m('transitions_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{instance}} {{event_type}} {{transition}}",
                )
            ],
            "short",
            bars=True,
            stacked=True,
        ),
        12,
        8,
    )

    lay.row("Notice and time in Started (completed events)")
    lay.add(
        bargauge(
            "Notice received (time range)",
            "Distribution of the notice given (NotBefore minus first sighting) for events first seen "
            "Scheduled during the dashboard's time range, by histogram bucket (upper bound).",
            [
                target(
                    f"sum by (le) (increase({m('notice_seconds_bucket')}{{{SEL}}}[$__range]))",
                    "{{le}}",
                    instant=True,
                    fmt="heatmap",
                )
            ],
            "short",
        ),
        8,
        8,
    )
    lay.add(
        bargauge(
            "Mean notice by event type (time range)",
            "Average notice (NotBefore minus first sighting) per event type during the time range.",
            [
                target(
                    f"sum by (event_type) (increase({m('notice_seconds_sum')}{{{SEL}}}[$__range]))\n"
                    f"/ sum by (event_type) (increase({m('notice_seconds_count')}{{{SEL}}}[$__range]))",
                    "{{event_type}}",
                    instant=True,
                )
            ],
            "s",
        ),
        8,
        8,
    )
    lay.add(
        bargauge(
            "Time in Started, p90 by event type (time range)",
            "90th percentile of the total time completed events spent in Started, per event type, during "
            "the time range (histogram estimate). Above 600 s is longer than the documented window.",
            [
                target(
                    f"histogram_quantile(0.9, sum by (le, event_type) "
                    f"(increase({m('started_duration_seconds_bucket')}{{{SEL}}}[$__range])))",
                    "{{event_type}}",
                    instant=True,
                )
            ],
            "s",
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Completed events: mean time in Started",
            "Mean time in Started of the events that completed within each $__rate_interval window.",
            [
                target(
                    f"sum by (event_type) (increase({m('started_duration_seconds_sum')}{{{SEL}}}[$__rate_interval]))\n"
                    f"/ sum by (event_type) (increase({m('started_duration_seconds_count')}{{{SEL}}}"
                    f"[$__rate_interval]))",
                    "{{event_type}}",
                )
            ],
            "s",
            bars=True,
        ),
        12,
        8,
    )
    lay.add(
        approvals_by_result(
            "Approval decisions for this VM's events over $__rate_interval windows (approved, dry_run, failed, "
            "hook_failed).",
        ),
        12,
        8,
    )

    lay.row("IMDS")
    lay.add(
        timeseries(
            "IMDS request latency",
            "IMDS request latency quantiles by method (histogram estimates over $__rate_interval).",
            [
                target(
                    f"histogram_quantile({q}, sum by (le, method) "
                    f"(rate({m('imds_request_duration_seconds_bucket')}{{{SEL}}}[$__rate_interval])))",
                    f"p{int(q * 100)} {{{{method}}}}",
                )
                for q in (0.5, 0.9, 0.99)
            ],
            "s",
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "IMDS requests by code",
            "IMDS requests per second by method and HTTP code ('error': no HTTP response). 410 and 429 are "
            "retried; 400 is a bug (missing Metadata header or malformed approval).",
            [
                target(
                    f"sum by (method, code) (rate({m('imds_requests_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{method}} {{code}}",
                )
            ],
            "reqps",
            stacked=True,
        ),
        12,
        8,
    )
    lay.add(
        poll_errors_by_reason(
            "Failed polls per second by reason.",
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "IMDS up and poll freshness",
            "imds_up (1: last poll succeeded) and the time since the last successful poll (right axis).",
            [
                target(f"{m('imds_up')}{{{SEL}}}", "{{instance}} imds_up"),
                target(
                    f"time() - {m('last_successful_poll_timestamp_seconds')}{{{SEL}}}",
                    "{{instance}} since last good poll",
                ),
            ],
            "none",
        )
        | {
            "fieldConfig": {
                "defaults": {
                    "unit": "none",
                    "min": 0,
                    "color": {"mode": "palette-classic"},
                    "thresholds": GREEN,
                    "custom": {
                        "drawStyle": "line",
                        "fillOpacity": 10,
                        "lineWidth": 1,
                        "showPoints": "never",
                        "spanNulls": False,
                    },
                },
                "overrides": [
                    {
                        "matcher": {"id": "byFrameRefID", "options": "B"},
                        "properties": [
                            {"id": "unit", "value": "s"},
                            {"id": "custom.axisPlacement", "value": "right"},
                        ],
                    }
                ],
            }
        },
        12,
        8,
    )
    return dashboard(
        VM_UID,
        "Azure Scheduled Events / VM detail",
        "One VM's Azure maintenance events over time, the notice it got, and its exporter's IMDS health.",
        lay,
        instance_all_default=False,
    )
