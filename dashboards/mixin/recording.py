"""Recording rules: the expressions several alerts and panels share, computed once."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import GROUP_LABELS, Settings, m
from se_exporter.metrics.counters import PREFIX

# level:metric:operations, as the Prometheus naming conventions have it.
EXPORTER_UP = f"instance:{PREFIX}exporter_up:max"
# Exporters scraped, per cluster and job: what a central engine's per-cluster absence compares with its past.
CLUSTER_EXPORTERS = f"cluster_job:{PREFIX}exporter_up:count"
POLL_ERRORS_RATE = f"instance:{PREFIX}poll_errors:rate5m"
POLL_ERRORS_RATIO = f"instance:{PREFIX}poll_errors:ratio_rate5m"
APPROVALS_FAILED = f"instance_event_type:{PREFIX}approvals_failed:increase15m"
ACTIONS_FAILED = f"instance_action:{PREFIX}actions_failed:increase15m"
SPOOL_DROPPED = f"instance:{PREFIX}log_spool_dropped:increase15m"
PERSISTENCE_ERRORS = f"instance:{PREFIX}persistence_errors:increase15m"
# These four count failures: recorded only where there were some (> 0), as their alerts ask. Every VM
# has zero series of them; recorded too, at 10,000 VMs they made the fleet's "Transition-log spool" panel
# take 4 s over 6 h (BENCHMARKS.md, "Fleet scale"). The alerts and panels read them with "> 0" anyway.
# Fleet panels read these job-level aggregates instead of every VM's raw series: at 2,000 VMs the raw
# queries took up to 3.5 s over 6 h (BENCHMARKS.md, "Fleet scale"); the recorded ones take milliseconds.
JOB_TRANSITIONS = f"job:{PREFIX}transitions:increase5m"
JOB_POLL_ERRORS = f"job:{PREFIX}poll_errors_by_reason:rate5m"
JOB_VMS_PENDING = f"job:{PREFIX}vms_with_pending_events:count"
JOB_POLL_AGE = f"job:{PREFIX}last_successful_poll_age_seconds:max"


def increase_with_births(metric: str, selector: str, keep: str, window: str) -> str:
    """increase() over ``window`` in which a series' birth counts its value. A labelled counter's series
    appears with its first count (a failed approval, a transition): increase() alone would miss it, above
    all on a new VM whose exporter has just started. The price: a Prometheus that discovers a long-running
    exporter counts its past counts once. ``keep``: the aggregation's clause, e.g. ``without (reason)``."""
    sel = f"{metric}{{{selector}}}" if selector else metric
    return (
        f"sum {keep} (\n    (increase({sel}[{window}]) and {sel} offset {window})\n  or\n"
        f"    ({sel} unless {sel} offset {window})\n)"
    )


def job_level(*labels: str) -> str:
    """The clause of a job-level aggregation: the job, the group labels users add, and ``labels``."""
    return f"by ({', '.join(('job', *GROUP_LABELS, *labels))})"


def recording_rules(settings: Settings) -> list[dict[str, Any]]:
    """Per-instance rules aggregate "without" what they sum over, so every target label (node, cluster,
    resource_group, vmss, ...) reaches the alerts; job-level ones keep the group labels."""
    failures = 'result=~"failed|hook_failed|expired|unknown"'
    return [
        {
            # The only place a job selector is needed: Prometheus' synthetic up series.
            "record": EXPORTER_UP,
            "expr": (
                f"max without () (up{{{settings.job_selector}}} and on (job, instance) "
                f"max_over_time({m('exporter_build_info')}[1d]))"
                if settings.textfile
                else f"max without () (up{{{settings.job_selector}}})"
            ),
        },
        {
            "record": CLUSTER_EXPORTERS,
            "expr": f"count by (cluster, job) ({EXPORTER_UP})",
        },
        {
            "record": POLL_ERRORS_RATE,
            "expr": f"sum without (reason) (rate({m('poll_errors_total')}[5m]))",
        },
        {
            "record": POLL_ERRORS_RATIO,
            "expr": (
                f"{POLL_ERRORS_RATE}\n"
                f"/\n"
                f"(\n"
                f"    {POLL_ERRORS_RATE}\n"
                f"  + sum without (method, code) "
                f'(rate({m("imds_requests_total")}{{method="GET", code=~"2.."}}[5m]))\n'
                f")"
            ),
        },
        {
            "record": APPROVALS_FAILED,
            "expr": increase_with_births(m("approvals_total"), failures, "without ()", "15m") + " > 0",
        },
        {
            "record": ACTIONS_FAILED,
            "expr": increase_with_births(m("actions_total"), 'result=~"failed|timed_out"', "without ()", "15m")
            + " > 0",
        },
        {
            "record": SPOOL_DROPPED,
            "expr": increase_with_births(m("log_spool_dropped_total"), "", "without ()", "15m") + " > 0",
        },
        {
            "record": PERSISTENCE_ERRORS,
            "expr": increase_with_births(m("persistence_errors_total"), "", "without ()", "15m") + " > 0",
        },
        {
            "record": JOB_TRANSITIONS,
            "expr": increase_with_births(m("transitions_total"), "", job_level("event_type", "transition"), "5m"),
        },
        {
            "record": JOB_POLL_ERRORS,
            "expr": f"sum {job_level('reason')} (rate({m('poll_errors_total')}[5m]))",
        },
        {
            # VMs with an event for themselves: every VM of a set lists the set's events.
            "record": JOB_VMS_PENDING,
            "expr": f"count {job_level('event_type', 'event_status')} (\n"
            f"  max by (job, {', '.join(GROUP_LABELS)}, instance, event_type, event_status) "
            f'({m("event_info")}{{affects_this_vm!="false"}})\n)',
        },
        {
            "record": JOB_POLL_AGE,
            "expr": f"max {job_level()} (time() - {m('last_successful_poll_timestamp_seconds')})",
        },
    ]
