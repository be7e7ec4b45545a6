"""The fleet overview's lower rows: lifecycle and approvals, then the exporters' and IMDS's health."""

from __future__ import annotations

from grafana_foundation_sdk.builders import table as table_panel

from dashboards.mixin.config import JOB, SEL, m
from dashboards.mixin.grafana import Layout, override, right_axis, target, thresholds, vm_link
from dashboards.mixin.kinds import stat, table, timeseries, transformation
from dashboards.mixin.mappings import up_expr
from dashboards.mixin.panels import actions_by_result, approvals_by_result, poll_errors_by_reason
from dashboards.mixin.recording import JOB_POLL_AGE, JOB_TRANSITIONS, PERSISTENCE_ERRORS


def lifecycle_row(lay: Layout) -> None:
    lay.row("Lifecycle and approvals")
    lay.add(
        timeseries(
            "Transitions",
            "Event lifecycle transitions (scheduled, started, completed, cancelled, rescheduled, updated) counted over "
            "5-minute windows. Each VM that lists an event counts its transitions. From the recording rule "
            + JOB_TRANSITIONS
            + ": the selected jobs, every instance (VM detail shows one VM's).",
            [
                target(
                    f"sum by (event_type, transition) ({JOB_TRANSITIONS}{{{JOB}}})",
                    "{{event_type}} {{transition}}",
                )
            ],
            "short",
            bars=True,
            stacked=True,
        ),
        12,
        8,
    )
    lay.add(
        approvals_by_result(
            "Approval decisions (POST StartRequests) by result over $__rate_interval windows: approved, "
            "dry_run (decided, not sent), failed (IMDS refused or unreachable), hook_failed (the pre-approval "
            "hook, e.g. a drain, failed: the event was not approved).",
        ),
        8,
        8,
    )
    lay.add(
        stat(
            "Approval failures (time range)",
            "Approvals that failed, whose hook failed, or that NotBefore overtook (expired) during the "
            "dashboard's time range.",
            f'sum(increase({m("approvals_total")}{{{SEL}, result=~"failed|hook_failed|expired|unknown"}}[$__range]))'
            " or vector(0)",
            "short",
            steps=thresholds((None, "green"), (0.5, "red")),
            decimals=0,
        ),
        4,
        8,
    )
    lay.add(
        actions_by_result(
            "Runs of the actions on transitions (--actions.config) by result over $__rate_interval windows: "
            "succeeded, failed (a non-zero status, a signal, or cut short by a crash or a stop), timed_out "
            "(stopped with its children), skipped (too many waiting). Empty when no action is configured.",
        ),
        12,
        8,
    )


def health_row(lay: Layout, job_selector: str) -> None:
    lay.row("Exporter and IMDS health")
    lay.add(
        timeseries(
            "Exporters with IMDS down",
            "Number of exporters whose last IMDS poll failed (imds_up == 0), next to the number of exporters "
            "reporting.",
            [
                target(f"count({m('imds_up')}{{{SEL}}} == 0) or vector(0)", "IMDS down"),
                target(f"count({m('imds_up')}{{{SEL}}})", "exporters reporting"),
            ],
            "short",
            decimals=0,
        ),
        8,
        8,
    )
    lay.add(
        poll_errors_by_reason(
            "Failed IMDS polls per second by reason (timeout, connection, http_4xx, http_5xx, throttled, "
            "invalid_document), summed over every exporter of the selected jobs (recording rule, 5-minute "
            "rate).",
            fleet=True,
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "IMDS requests by code",
            "IMDS HTTP requests per second by method and response code ('error': no HTTP response).",
            [
                target(
                    f"sum by (method, code) (rate({m('imds_requests_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{method}} {{code}}",
                )
            ],
            "reqps",
            stacked=True,
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Time since last successful poll",
            "The oldest of the selected jobs' exporters: max of time() - "
            "azure_scheduled_events_last_successful_poll_timestamp_seconds (recording rule "
            + JOB_POLL_AGE
            + "). An exporter no longer scraped drops out; see 'Targets up / down'. Red: the alert threshold.",
            [
                target(
                    f"max by (job) ({JOB_POLL_AGE}{{{JOB}}})",
                    "{{job}}",
                )
            ],
            "s",
            steps=thresholds((None, "green"), (300, "red")),
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Targets up / down",
            "se-exporter scrape targets by Prometheus' up metric, per job.",
            [
                # up is 0 or 1: its sum counts the targets up. "== 1" took 2.6 s over 6 h at 10,000 VMs,
                # the sum 0.4 s (a comparison builds a new vector at every step).
                target(f"sum by (job) ({up_expr(job_selector)})", "{{job}} up"),
                target(f"count by (job) ({up_expr(job_selector)} == 0)", "{{job}} down"),
            ],
            "short",
            decimals=0,
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Transition-log spool",
            "OTLP transition-log spool: records waiting to be sent (depth, left axis) and records dropped per "
            "second (right axis; lost: the audit trail has gaps).",
            [
                target(f"sum by (instance) ({m('log_spool_depth')}{{{SEL}}})", "{{instance}} depth"),
                target(
                    f"sum by (instance) (rate({m('log_spool_dropped_total')}{{{SEL}}}[$__rate_interval]))",
                    "{{instance}} dropped/s",
                ),
            ],
            "short",
            overrides=[right_axis("B", "ops")],
        ),
        8,
        8,
    )
    lay.add(
        timeseries(
            "Failed durable writes",
            "Exporters whose state file or log spool failed to be written in the last 15 minutes (a full or "
            "read-only disk: approvals wait meanwhile), and how many writes failed.",
            [
                target(  # only the exporters with failed writes: the recorded 15-minute increase, above 0
                    f"sum by (instance, file) ({PERSISTENCE_ERRORS}{{{SEL}}}) > 0",
                    "{{instance}} {{file}} failed writes (15 min)",
                ),
            ],
            "short",
            decimals=0,
        ),
        8,
        8,
    )
    lay.add(
        stat(
            "Web configs not in force",
            "Exporters whose --web.config.file changed and no longer parses "
            "(azure_scheduled_events_web_config_last_reload_successful == 0): they refuse every request but "
            "/-/healthy and /-/traffic until it is mended, so over HTTP this shows in 'Targets up / down'; a "
            "textfile or a scrape just after the fix shows it here.",
            f"count({m('web_config_last_reload_successful')}{{{SEL}}} == 0) or vector(0)",
            "short",
            steps=thresholds((None, "green"), (1, "red")),
        ),
        4,
        8,
    )
    lay.add(
        table(
            "Unhealthy exporters",
            "Exporters that are down, fail to poll IMDS or have not polled successfully for over a minute, "
            "with the value of each check. Empty is good. Click an instance for its VM detail.",
            [
                target(f"{up_expr(job_selector)} == 0", instant=True, fmt="table"),
                target(f"{m('imds_up')}{{{SEL}}} == 0", instant=True, fmt="table"),
                target(
                    f"time() - {m('last_successful_poll_timestamp_seconds')}{{{SEL}}} > 60",
                    instant=True,
                    fmt="table",
                ),
            ],
            "none",
            transformations=[
                transformation("merge"),
                transformation(
                    "organize",
                    excludeByName={"Time": True, "__name__": True},
                    renameByName={"Value #A": "up", "Value #B": "imds_up", "Value #C": "Since last good poll"},
                ),
            ],
            overrides=[override("instance", links=vm_link()), override("Since last good poll", unit="s")],
        ),
        12,
        8,
    )
    lay.add(
        _exporters_by(
            "Exporter versions",
            "Number of exporters per se-exporter and Python version (azure_scheduled_events_exporter_build_info).",
            "version, python_version",
            "exporter_build_info",
        ),
        12,
        8,
    )
    lay.add(
        _exporters_by(
            "IMDS api-versions in use",
            "Number of exporters per Scheduled Events api-version in use: the first of --imds.api-version that "
            "their VM's IMDS accepts (azure_scheduled_events_imds_api_version_info). VMs on a fallback version "
            "(e.g. 2020-07-01 where 2024-07-09 was preferred) see no Spot eviction-risk notices.",
            "api_version",
            "imds_api_version_info",
        ),
        12,
        8,
    )


def _exporters_by(title: str, description: str, labels: str, info_metric: str) -> table_panel.Panel:
    """A table of how many exporters show each value of ``labels`` of an info gauge."""
    return table(
        title,
        description,
        [target(f"count by ({labels}) ({m(info_metric)}{{{SEL}}})", instant=True, fmt="table")],
        "short",
        transformations=[transformation("organize", excludeByName={"Time": True}, renameByName={"Value": "Exporters"})],
    )
