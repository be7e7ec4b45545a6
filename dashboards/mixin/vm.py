"""The VM detail dashboard: one VM's events, from notice to completion, and its IMDS health.

One function per row, in the order Grafana shows them; the notice and IMDS rows are in vm_history.py.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import common as cm

from dashboards.mixin.config import SEL, VM_UID, m
from dashboards.mixin.events_table import events_table
from dashboards.mixin.frame import dashboard
from dashboards.mixin.grafana import Layout, target, thresholds
from dashboards.mixin.kinds import stat, timeseries
from dashboards.mixin.mappings import UP_MAPPINGS, up_expr
from dashboards.mixin.panels import (
    event_timeline,
    impact_timeline,
    soonest_not_before,
)
from dashboards.mixin.recording import increase_with_births
from dashboards.mixin.vm_history import imds_row, notice_row


def vm_detail(job_selector: str) -> db.Dashboard:
    lay = Layout()
    now_row(lay, job_selector)
    events_row(lay)
    notice_row(lay)
    imds_row(lay)
    return dashboard(
        VM_UID,
        "Azure Scheduled Events / VM detail",
        "One VM's Azure maintenance events over time, the notice it got, and its exporter's IMDS health.",
        lay,
        instance_all_default=False,
    )


def now_row(lay: Layout, job_selector: str) -> None:
    lay.row("Now")
    lay.add(
        stat(
            "IMDS",
            "Whether the exporter's last IMDS Scheduled Events poll succeeded.",
            f"min({m('imds_up')}{{{SEL}}})",
            "none",
            steps=thresholds((None, "red"), (1, "green")),
            mappings=UP_MAPPINGS,
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
            "Time until the earliest NotBefore of this VM's events that reboot, move or remove it (pauses, live "
            "migrations and other VMs' events are left out; negative: passed, not yet Started).",
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
            mappings=UP_MAPPINGS,
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


def events_row(lay: Layout) -> None:
    lay.row("Events")
    lay.add(
        events_table(
            "Events now",
            "Every event this VM lists right now, with 'Affects this VM' (false: a neighbour's event of the same "
            "availability set or scale set). 'NotBefore' is the earliest start as a date and time, 'NotBefore "
            "in' the time left (empty once Started); 'Approved at' is when this exporter's approval was accepted.",
            SEL,
        ),
        24,
        6,
    )
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
            line_interpolation=cm.LineInterpolation.STEP_AFTER,
        ),
        12,
        8,
    )
    lay.add(
        timeseries(
            "Transitions",
            "Lifecycle transitions of this VM's events over $__rate_interval windows (a transition's series "
            "appears with its first count, which is counted). A `completed` without a `started` before it is a "
            "maintenance that ran while the exporter could not look (stopped, restarting, or the VM paused): its "
            "NotBefore passed then, and it was gone at the next look (its log record says "
            "scheduled_event.started_observed=false). A `cancelled` is one removed before its NotBefore, or "
            "after it while the exporter watched.",
            [
                target(
                    increase_with_births(
                        m("transitions_total"), SEL, "by (instance, event_type, transition)", "$__rate_interval"
                    ),
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
