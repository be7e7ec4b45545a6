"""Event alerts, by the paging policy of alerts/runbook.md: a page only for what a human must act on soon.

Each event has one alert for each situation. A platform Reboot or Redeploy of this VM: its notice is a
warning (ImpactfulScheduled, or LongNoticeRedeploy for a Redeploy announced days ahead); within the lead time
it pages once (NotBeforeImminent) unless this exporter approved it (ApprovedWaiting, info). Spot evictions,
user-caused events, pauses and live migrations are info, which the shipped routes send nowhere, and so are
Spot eviction-risk notices (SpotEvictionRisk), which no approval answers.
"""

from __future__ import annotations

from typing import Any

from dashboards.mixin.alert_parts import (
    DISRUPTIVE_IMPACTS,
    EVENT_LABELS,
    EVENT_MATCH,
    MAINTENANCE_WINDOW,
    MEANING,
    NOT_PAUSE,
    NOT_USER,
    NOTICE,
    PAGED,
    REDEPLOY,
    SCHEDULED,
    STARTED,
    THIS_VM,
    alert,
    approved,
    info,
    joined,
    scheduled,
    when,
)
from dashboards.mixin.config import Settings, m
from dashboards.mixin.health_alerts import health_alerts

UNTIL = m("event_seconds_until_not_before")
REDEPLOY_UNTIL = f'{UNTIL}{{event_type="Redeploy"}}'
FAILURE = 'cause="failure"'
UNKNOWN_VM = 'affects_this_vm="unknown"'
# A Redeploy announced at least an hour ahead (its normal notice is about 10 minutes): degraded hardware.
LONG_NOTICE = (
    f"{EVENT_MATCH}\n"
    f"  # Announced at least an hour ahead (normal Redeploy notice is about 10 minutes).\n"
    f'  (max_over_time({UNTIL}{{event_type="Redeploy"}}[1d]) > 3600)'
)


def paged_within_lead(settings: Settings) -> str:
    """Seconds until NotBefore of the events that page within the lead time, approved or not."""
    return joined(f"({UNTIL} < {settings.page_lead_seconds})", f"{SCHEDULED}, {PAGED}, {THIS_VM}")


def alerting_rules(settings: Settings) -> list[dict[str, Any]]:
    return [*notice_alerts(settings), wave_alert(settings), *info_alerts(), *started_alerts(), *health_alerts(settings)]


def wave_alert(settings: Settings) -> dict[str, Any]:
    """Many VMs of a job with disruptive maintenance ahead: one message for the fleet, not one per VM (the
    shipped Alertmanager configuration lets it stand for their ImpactfulScheduled warnings)."""
    vms = f"max by (job, cluster, instance) ({info(f'{SCHEDULED}, {NOTICE}, {THIS_VM}')})"
    return alert(
        "AzureScheduledEventsMaintenanceWave",
        f"count by (job, cluster) (\n  {vms}\n) >= {settings.wave_min_vms}",
        "0m",
        "warning",
        "Azure maintenance is scheduled for many VMs of a job at once: a maintenance wave.",
        "{{ $value }} VMs of job {{ $labels.job }}{{ if $labels.cluster }} in cluster {{ $labels.cluster }}"
        "{{ end }} have Azure maintenance that reboots, moves or removes them scheduled. Check that the "
        "workload tolerates them going one after another (spread, PodDisruptionBudgets, spare capacity); the "
        "Fleet overview dashboard lists them with their NotBefore. Unapproved platform Reboots and Redeploys "
        "still page, as one notification per wave.",
    )


def notice_alerts(settings: Settings) -> list[dict[str, Any]]:
    """What a human may have to act on: the warning first, then, within the lead time, one page."""
    lead = settings.lead_words
    return [
        alert(
            "AzureScheduledEventImpactfulScheduled",
            f"(\n{scheduled(NOTICE)}\n)\nunless {LONG_NOTICE}",
            "0m",
            "warning",
            "Azure maintenance that reboots, moves or removes a VM is scheduled.",
            when(
                "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}, cause "
                "{{ $labels.cause }}) is scheduled for {{ $labels.instance }};"
            )
            + f" {MEANING} Drain the VM and approve the event, or let it start at NotBefore. Unless it is "
            f"approved, a platform Reboot or Redeploy pages {lead} before NotBefore.",
        ),
        alert(
            "AzureScheduledEventLongNoticeRedeploy",
            f"{joined(REDEPLOY_UNTIL, f'{REDEPLOY}, {SCHEDULED}, {NOT_USER}, {THIS_VM}')}\nand {LONG_NOTICE}",
            "0m",
            "warning",
            "Azure announced a Redeploy days ahead: the VM's host hardware is probably degraded.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} was announced well "
            "ahead; NotBefore is in {{ $value | humanizeDuration }}. Redeploy the VM yourself at a convenient "
            "time (drain, then approve the event or run az vm redeploy) instead of waiting for NotBefore.",
        ),
        alert(
            "AzureScheduledEventNotBeforeImminent",
            approved(paged_within_lead(settings), by_us=False),
            "0m",
            "critical",
            f"Azure will reboot or redeploy a VM within {lead} and nobody has approved it.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}, cause "
            "{{ $labels.cause }}) on {{ $labels.instance }} can start in {{ $value | humanizeDuration }} "
            "(NotBefore; negative means already due), is still Scheduled and this exporter has not approved it. "
            f"{MEANING} Drain the VM now and approve the event, or accept the impact.",
        ),
        alert(
            "AzureScheduledEventApprovedWaiting",
            approved(paged_within_lead(settings), by_us=True),
            "0m",
            "info",
            "Approved Azure maintenance is waiting for NotBefore or the host's other tenants.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}) on "
            "{{ $labels.instance }} was approved by se-exporter and is still Scheduled; it can start in "
            "{{ $value | humanizeDuration }} (NotBefore; negative means already due). Azure may start an "
            "approved event later than asked: on shared hardware it waits for every VM on the host to approve, "
            f"or for NotBefore. {MEANING} Nothing to approve; make sure the VM is drained.",
        ),
    ]


def info_alerts() -> list[dict[str, Any]]:
    """What nobody must act on: recorded, routed to no one by the shipped Alertmanager configuration."""
    return [
        alert(
            "AzureScheduledEventSpotEvictionScheduled",
            scheduled('impact="eviction"'),
            "0m",
            "info",
            "Azure will evict a Spot VM within seconds.",
            when(
                "{{ $labels.event_type }} event {{ $labels.event_id }} (impact eviction, cause {{ $labels.cause }}) "
                "will evict {{ $labels.instance }};"
            )
            + " The Spot VM is deallocated or deleted about 30 seconds after the notice: too soon for a human. "
            "Let an action or a pre-approval hook drain it.",
        ),
        alert(
            "AzureScheduledEventSpotEvictionRisk",
            # Whatever its status (Advisory today): nothing will start, and it is shown while it is listed.
            info(f'impact="eviction_risk", {THIS_VM}'),
            "0m",
            "info",
            "Azure warns that a Spot VM is at risk of eviction.",
            "{{ $labels.event_type }} notice {{ $labels.event_id }} (impact eviction_risk, status "
            "{{ $labels.event_status }}) for {{ $labels.instance }}: Azure recommends moving work off this Spot VM "
            "before capacity is reclaimed. Nothing is lost yet and nothing needs approving; a Preempt (about 30 "
            "seconds of notice) may follow. Move work to other nodes and check the scale set's Spot capacity.",
        ),
        alert(
            "AzureScheduledEventUserInitiatedScheduled",
            scheduled(f'cause="user", {NOT_PAUSE}, impact!="eviction"'),
            "0m",
            "info",
            "A user or an autoscaler asked for maintenance of a VM.",
            when(
                "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}, cause user) is "
                "scheduled for {{ $labels.instance }};"
            )
            + f" {MEANING} Someone chose it (a restart, a redeploy, a scale-in): nothing to do.",
        ),
        alert(
            "AzureScheduledEventPauseScheduled",
            scheduled('impact="pause"'),
            "0m",
            "info",
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
    ]


def started_alerts() -> list[dict[str, Any]]:
    """Maintenance in progress: the inhibition source for node-down alerts, and what went wrong."""
    return [
        alert(
            "AzureScheduledEventStarted",
            joined(m("event_started_seconds"), f"{STARTED}, {NOT_PAUSE}, {THIS_VM}"),
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
            "AzureScheduledEventHardwareFailure",
            f"max_over_time({info(f'{STARTED}, {FAILURE}, {THIS_VM}')}[{MAINTENANCE_WINDOW}])",
            "0m",
            "warning",
            "A VM's host failed: Azure is rebooting or redeploying it without the usual notice.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} (impact {{ $labels.impact }}, cause failure) "
            "was Started on {{ $labels.instance }} within the last "
            f"{MAINTENANCE_WINDOW}: Azure reports a hardware failure (the event appeared already Started, or its "
            f"Description says so). {MEANING} The VM's node-down alerts are inhibited meanwhile: check that the "
            "VM and its workload come back.",
        ),
        alert(
            "AzureScheduledEventStartedTooLong",
            joined(f"({m('event_started_seconds')} > 600)", f"{STARTED}, {THIS_VM}"),
            "5m",
            "warning",
            "Azure maintenance has been in progress far longer than its documented window.",
            "{{ $labels.event_type }} event {{ $labels.event_id }} on {{ $labels.instance }} has been Started "
            "for {{ $value | humanizeDuration }}; maintenance normally completes within about 10 minutes.",
        ),
        alert(
            "AzureScheduledEventsVMIdentityUnknown",
            f"max without ({EVENT_LABELS}) ({info(UNKNOWN_VM)})",
            "10m",
            "warning",
            "se-exporter does not know which VM it runs on: it alerts for its neighbours' events.",
            "se-exporter on {{ $labels.instance }} lists events but could not learn its VM's name from IMDS "
            "compute metadata, so every event counts as this VM's: each VM of the availability set or scale set "
            "alerts for the others' maintenance. Set --vm.name, or check that the exporter can reach "
            "/metadata/instance/compute.",
        ),
    ]
