"""The simulated VM the end-to-end tests look at: events in every state, plus some history.

BuiltExporter step by step with the SimWorld API on a real-time clock (speed 1: the NotBefore the exporter
sees is real wall time), waiting after each step until the exporter has seen it, so that every
transition (scheduled, started, completed, cancelled, rescheduled) is observed and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from se_exporter.simulator import SELF, EventPlan, SimWorld
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import samples, series
from tests.support.wait import wait_for

LONG = 3600.0  # started_for of events that must stay Started for the whole test


def exporter_events(exporter: ExporterProcess) -> dict[str, dict[str, str]]:
    """event_id -> labels of azure_scheduled_events_event_info, as the exporter exposes them now."""
    return {s["event_id"]: s for s in series(exporter.metrics(), "azure_scheduled_events_event_info")}


def not_before(exporter: ExporterProcess, event_id: str) -> float | None:
    for (name, labels), value in samples(exporter.metrics()).items():
        if name == "azure_scheduled_events_event_not_before_timestamp_seconds" and ("event_id", event_id) in labels:
            return value
    return None


@dataclass
class Scene:
    """EventIds by role. ``listed``: event_id -> expected EventStatus in the final document."""

    ids: dict[str, str] = field(default_factory=dict)
    listed: dict[str, str] = field(default_factory=dict)
    history: dict[str, str] = field(default_factory=dict)  # event_id -> how it ended

    def id(self, role: str) -> str:
        return self.ids[role]


class SceneBuilder:
    def __init__(self, world: SimWorld, exporter: ExporterProcess, timeout: float = 10) -> None:
        self.world = world
        self.exporter = exporter
        self.timeout = timeout
        self.scene = Scene()

    def add(self, role: str, plan: EventPlan, status: str = "Scheduled") -> str:
        event_id = self.world.add_event(plan)
        self.scene.ids[role] = event_id
        self.wait_status(event_id, status, f"{role} ({plan.event_type}) first seen {status}")
        return event_id

    def wait_status(self, event_id: str, status: str | None, what: str) -> None:
        """Until the exporter lists ``event_id`` with ``status`` (None: no longer lists it)."""

        def seen() -> bool:
            labels = exporter_events(self.exporter).get(event_id)
            return labels is None if status is None else labels is not None and labels["event_status"] == status

        wait_for(seen, self.timeout, f"the exporter to see {what}", interval=0.05)

    def start(self, role: str) -> None:
        assert self.world.start_event(self.scene.id(role)), f"could not start {role}"
        self.wait_status(self.scene.id(role), "Started", f"{role} Started")

    def complete(self, role: str) -> None:
        assert self.world.complete_event(self.scene.id(role)), f"could not complete {role}"
        self.wait_status(self.scene.id(role), None, f"{role} completed")
        self.scene.history[self.scene.id(role)] = "completed"

    def cancel(self, role: str) -> None:
        assert self.world.cancel_event(self.scene.id(role)), f"could not cancel {role}"
        self.wait_status(self.scene.id(role), None, f"{role} cancelled")
        self.scene.history[self.scene.id(role)] = "cancelled"

    def reschedule(self, role: str, notice: float) -> None:
        event_id = self.scene.id(role)
        before = not_before(self.exporter, event_id)
        assert self.world.reschedule(event_id, notice), f"could not reschedule {role}"
        wait_for(
            lambda: (nb := not_before(self.exporter, event_id)) is not None and nb != before,
            self.timeout,
            f"the exporter to see {role} rescheduled",
            interval=0.05,
        )


def history_round(b: SceneBuilder, n: int) -> None:
    """A Freeze that starts and completes and a Reboot that is cancelled (fills counters and histograms)."""
    b.add(f"history-freeze-{n}", EventPlan("Freeze", notice=600, duration=5, started_for=LONG))
    b.add(f"history-reboot-{n}", EventPlan("Reboot", notice=600))
    b.start(f"history-freeze-{n}")
    b.complete(f"history-freeze-{n}")
    b.cancel(f"history-reboot-{n}")


def final_state(b: SceneBuilder) -> None:
    """Everything listed at once while the tests run (none of it changes within ~4 minutes)."""
    adds: list[tuple[str, EventPlan, str]] = [
        # Impactful, Platform, NotBefore in 4 minutes: ImpactfulScheduled + NotBeforeImminent.
        ("imminent-reboot", EventPlan("Reboot", notice=240, duration=-1, description="Host OS update"), "Scheduled"),
        # A Freeze (live migration / memory-preserving update), not impactful.
        (
            "scheduled-freeze",
            EventPlan("Freeze", notice=900, duration=5, description="Memory-preserving update"),
            "Scheduled",
        ),
        # Hardware failure: appears directly as Started Reboot.
        (
            "hardware-failure",
            EventPlan("Reboot", notice=None, started_for=LONG, description="Host server hardware failure"),
            "Started",
        ),
        ("started-redeploy", EventPlan("Redeploy", notice=600, started_for=LONG), "Scheduled"),
        ("rescheduled-redeploy", EventPlan("Redeploy", notice=1200, duration=-1), "Scheduled"),
        # Announced two days ahead: AzureScheduledEventLongNoticeRedeploy (for: 5m in the shipped rules).
        ("long-notice-redeploy", EventPlan("Redeploy", notice=2 * 86400), "Scheduled"),
        ("spot-preempt", EventPlan("Preempt", notice=600, duration=-1), "Scheduled"),
        # A Spot eviction-risk notice: listed Advisory for the whole test.
        (
            "spot-eviction-risk",
            EventPlan("SpotRebalanceRecommendation", status="Advisory", listed_for=LONG),
            "Advisory",
        ),
        # Another VM of the availability set: listed here too, affects_this_vm="false".
        ("other-vm-terminate", EventPlan("Terminate", notice=900, resources=("sim-vm-7",)), "Scheduled"),
        # User-initiated: the approval policy's rule matches and its hook fails (if approval is wired).
        ("user-reboot", EventPlan("Reboot", event_source="User", notice=900, resources=(SELF,)), "Scheduled"),
    ]
    for role, plan, status in adds:
        b.add(role, plan, status)
    b.start("started-redeploy")
    b.reschedule("rescheduled-redeploy", 1800)
    final = {
        "imminent-reboot": "Scheduled",
        "scheduled-freeze": "Scheduled",
        "hardware-failure": "Started",
        "started-redeploy": "Started",
        "rescheduled-redeploy": "Scheduled",
        "long-notice-redeploy": "Scheduled",
        "spot-preempt": "Scheduled",
        "spot-eviction-risk": "Advisory",
        "other-vm-terminate": "Scheduled",
        "user-reboot": "Scheduled",
    }
    b.scene.listed = {b.scene.id(role): status for role, status in final.items()}


def build(world: SimWorld, exporter: ExporterProcess, between_rounds: Callable[[], None]) -> Scene:
    """Round 1 of history; ``between_rounds`` (wait until Prometheus has scraped it); round 2 and the
    final state. Two rounds, because Prometheus' increase() ignores a histogram series' first sample:
    the histograms only show data in the dashboards once a series moves after its first scrape."""
    b = SceneBuilder(world, exporter)
    history_round(b, 1)
    between_rounds()
    history_round(b, 2)
    final_state(b)
    wait_for(
        lambda: {k: v["event_status"] for k, v in exporter_events(exporter).items()} == b.scene.listed,
        10,
        "the exporter to list exactly the final state",
    )
    return b.scene
