"""The VM detail's lower rows: notice and time in Started of completed events, then IMDS health."""

from __future__ import annotations

from dashboards.mixin.config import SEL, m
from dashboards.mixin.grafana import Layout, right_axis, target
from dashboards.mixin.kinds import bargauge, timeseries
from dashboards.mixin.panels import (
    approvals_by_result,
    poll_errors_by_reason,
)


def notice_row(lay: Layout) -> None:
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


def imds_row(lay: Layout) -> None:
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
            overrides=[right_axis("B", "s")],
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "Durable writes (state file, log spool)",
            "How long the writes of the state file and the OTLP log spool take, fsync included (p50, p90; over "
            "$__rate_interval). Seconds mean a disk at its IOPS cap: what the exporter shows is not held up, but "
            "approvals, action runs and log records wait for their writes.",
            [
                target(
                    f"histogram_quantile({q}, sum by (le, file) "
                    f"(rate({m('state_write_seconds_bucket')}{{{SEL}}}[$__rate_interval])))",
                    f"p{int(q * 100)} {{{{file}}}}",
                )
                for q in (0.5, 0.9)
            ],
            "s",
        ),
        12,
        8,
    )
