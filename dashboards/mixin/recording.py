"""Recording rules: the expressions several alerts and panels share, computed once."""

from __future__ import annotations

from typing import Any

from dashboards.mixin.config import m
from se_exporter.metrics.names import PREFIX

# level:metric:operations, as the Prometheus naming conventions have it.
EXPORTER_UP = f"instance:{PREFIX}exporter_up:max"
POLL_ERRORS_RATE = f"instance:{PREFIX}poll_errors:rate5m"
POLL_ERRORS_RATIO = f"instance:{PREFIX}poll_errors:ratio_rate5m"
APPROVALS_FAILED = f"instance_event_type:{PREFIX}approvals_failed:increase15m"
SPOOL_DROPPED = f"instance:{PREFIX}log_spool_dropped:increase15m"
PERSISTENCE_ERRORS = f"instance:{PREFIX}persistence_errors:increase15m"
# These three count failures: recorded only where there were some (> 0), as their alerts ask. Every VM
# has zero series of them; recorded too, at 10,000 VMs they made the fleet's "Transition-log spool" panel
# take 4 s over 6 h (BENCHMARKS.md, "Fleet scale"). The alerts and panels read them with "> 0" anyway.
# Fleet panels read these job-level aggregates instead of every VM's raw series: at 2,000 VMs the raw
# queries took up to 3.5 s over 6 h (BENCHMARKS.md, "Fleet scale"); the recorded ones take milliseconds.
JOB_TRANSITIONS = f"job:{PREFIX}transitions:increase5m"
JOB_POLL_ERRORS = f"job:{PREFIX}poll_errors_by_reason:rate5m"
JOB_VMS_PENDING = f"job:{PREFIX}vms_with_pending_events:count"
JOB_POLL_AGE = f"job:{PREFIX}last_successful_poll_age_seconds:max"


def robust_increase(metric: str, selector: str, by: str) -> str:
    """increase() over 15m that also counts a counter series born after its first increment.

    A labelled counter that the exporter creates on first use appears with value 1; increase()
    would report 0 for it. Series that already existed 15 minutes ago use increase(); younger
    series count their whole value, but only on exporters that were already scraped 15 minutes
    ago (a newly discovered target's old counts are not news).
    """
    sel = f"{metric}{{{selector}}}" if selector else metric
    births = (
        f"    (\n"
        f"      ({sel} unless {sel} offset 15m)\n"
        f"      and on (job, instance) {m('exporter_build_info')} offset 15m\n"
        f"    )"
    )
    return _increase_or_births(sel, by, "15m", births)


def increase_with_births(metric: str, selector: str, by: str, window: str) -> str:
    """increase() over ``window`` in which a series' birth counts its value: for a counter with a series
    from its first count (transitions), every count of a process. Unlike ``robust_increase``, a birth
    counts also on an exporter that has just started (transitions come with the reboots that restart
    it); the price: a Prometheus that discovers a long-running exporter counts its past transitions once.
    """
    sel = f"{metric}{{{selector}}}" if selector else metric
    return _increase_or_births(sel, by, window, f"    ({sel} unless {sel} offset {window})")


def _increase_or_births(sel: str, by: str, window: str, births: str) -> str:
    """increase() of the series that existed ``window`` ago, or else what ``births`` counts."""
    return f"sum by ({by}) (\n    (increase({sel}[{window}]) and {sel} offset {window})\n  or\n{births}\n)"


def recording_rules(job_selector: str) -> list[dict[str, Any]]:
    return [
        {
            # The only place a job selector is needed: Prometheus' synthetic up series.
            "record": EXPORTER_UP,
            "expr": f"max by (job, instance) (up{{{job_selector}}})",
        },
        {
            "record": POLL_ERRORS_RATE,
            "expr": f"sum by (job, instance) (rate({m('poll_errors_total')}[5m]))",
        },
        {
            "record": POLL_ERRORS_RATIO,
            "expr": (
                f"{POLL_ERRORS_RATE}\n"
                f"/\n"
                f"(\n"
                f"    {POLL_ERRORS_RATE}\n"
                f"  + sum by (job, instance) "
                f'(rate({m("imds_requests_total")}{{method="GET", code=~"2.."}}[5m]))\n'
                f")"
            ),
        },
        {
            "record": APPROVALS_FAILED,
            "expr": robust_increase(
                m("approvals_total"), 'result=~"failed|hook_failed|expired"', "job, instance, event_type, result"
            )
            + " > 0",
        },
        {
            "record": SPOOL_DROPPED,
            "expr": robust_increase(m("log_spool_dropped_total"), "", "job, instance") + " > 0",
        },
        {
            "record": JOB_TRANSITIONS,
            "expr": increase_with_births(m("transitions_total"), "", "job, event_type, transition", "5m"),
        },
        {
            "record": JOB_POLL_ERRORS,
            "expr": f"sum by (job, reason) (rate({m('poll_errors_total')}[5m]))",
        },
        {
            "record": JOB_VMS_PENDING,
            "expr": f"count by (job, event_type, event_status) ({m('pending')} > 0)",
        },
        {
            "record": JOB_POLL_AGE,
            "expr": f"max by (job) (time() - {m('last_successful_poll_timestamp_seconds')})",
        },
        {
            "record": PERSISTENCE_ERRORS,
            "expr": robust_increase(m("persistence_errors_total"), "", "job, instance, file") + " > 0",
        },
    ]
