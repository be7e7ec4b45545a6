"""/-/traffic: 200 while this VM may take traffic, 503 from the lead time before a disruptive event's
NotBefore, while it is Started, until it is gone; the body says why. The gate reads the store at request
time with an injected clock; the endpoint is checked on the real exporter over loopback, basic auth on."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import bcrypt
import httpx
import pytest

from se_exporter.imds.document import Document, ScheduledEvent, VMIdentity
from se_exporter.imds.impact import DISRUPTIVE_IMPACTS
from se_exporter.lifecycle import EventStore
from se_exporter.web.endpoints import TrafficGate
from tests.support.exporter_process import ExporterProcess
from tests.support.fake_imds import FakeIMDS, document
from tests.support.wait import wait_for

pytestmark = pytest.mark.posix

T0 = 1_750_000_000.0
LEAD = 300.0


def scheduled(
    event_type: str = "Reboot",
    *,
    in_seconds: float | None = 900,
    resources: tuple[str, ...] = ("vm-a",),
    status: str = "Scheduled",
    description: str = "",
) -> ScheduledEvent:
    not_before = None if in_seconds is None else datetime.fromtimestamp(T0 + in_seconds, UTC)
    return ScheduledEvent(
        "E1",
        event_type,
        status,
        resources=resources,
        not_before=not_before,
        event_source="Platform",
        description=description,
    )


def gate_for(event: ScheduledEvent | None, *, now: float = T0, vm: str = "vm-a") -> TrafficGate:
    store = EventStore()
    store.reconcile(Document(1, (event,) if event else ()), T0)
    return TrafficGate(
        store, lambda: VMIdentity(name=vm), lead_seconds=LEAD, impacts=DISRUPTIVE_IMPACTS, clock=lambda: now
    )


@pytest.mark.parametrize(
    "case",
    [
        ("no event", None, T0, "vm-a", True, "vm-a may take traffic"),
        ("reboot far away", scheduled(), T0, "vm-a", True, "may take traffic"),
        (
            "reboot within the lead",
            scheduled(),
            T0 + 600,
            "vm-a",
            False,
            "Reboot E1 (impact reboot, cause platform) starts in 300 s",
        ),
        ("reboot past NotBefore", scheduled(), T0 + 1000, "vm-a", False, "starts in 0 s"),
        (
            "reboot started",
            scheduled(status="Started", in_seconds=None),
            T0,
            "vm-a",
            False,
            "Reboot E1 (impact reboot, cause platform) is Started",
        ),
        (
            "no NotBefore yet",
            scheduled(in_seconds=None),
            T0,
            "vm-a",
            False,
            "with no NotBefore: it may start at any moment",
        ),
        ("another VM's reboot", scheduled(resources=("vm-b",)), T0 + 800, "vm-a", True, "may take traffic"),
        ("name unknown", scheduled(), T0 + 800, "", True, "its name is not known yet"),
        ("names are case-insensitive", scheduled(resources=("VM-A",)), T0 + 800, "vm-a", False, "starts in"),
        ("a freeze pauses only", scheduled("Freeze"), T0 + 800, "vm-a", True, "may take traffic"),
        ("a spot eviction", scheduled("Preempt", in_seconds=30), T0, "vm-a", False, "impact eviction"),
        ("a scale-in", scheduled("Terminate", in_seconds=600), T0 + 300, "vm-a", False, "impact termination"),
        # Statuses Azure may add (issue 52): a disruptive event in one keeps the VM out unless its NotBefore is
        # beyond the lead time; a Spot eviction-risk notice loses nothing yet, whatever its status.
        (
            "a reboot paused, no NotBefore",
            scheduled(status="Paused", in_seconds=None),
            T0,
            "vm-a",
            False,
            "Reboot E1 (impact reboot, cause platform) is Paused, a status se-exporter does not know, "
            "with no NotBefore: it may be under way or start at any moment",
        ),
        ("a reboot paused, NotBefore far", scheduled(status="Paused"), T0, "vm-a", True, "may take traffic"),
        ("a reboot paused, NotBefore near", scheduled(status="Paused"), T0 + 700, "vm-a", False, "starts in 200 s"),
        (
            "a spot eviction-risk notice",
            scheduled("SpotRebalanceRecommendation", status="Advisory", in_seconds=None),
            T0,
            "vm-a",
            True,
            "may take traffic",
        ),
        ("an unknown type", scheduled("HostUpgrade", status="Pending", in_seconds=None), T0, "vm-a", True, "may take"),
    ],
    ids=lambda case: case[0],
)
def test_the_gate(case: tuple[str, ScheduledEvent | None, float, str, bool, str]) -> None:
    _, event, now, vm, takes_traffic, words = case
    verdict = gate_for(event, now=now, vm=vm).verdict()
    assert (verdict.takes_traffic, words in verdict.reason) == (takes_traffic, True), verdict.reason


def test_before_the_first_answer_of_a_first_start_it_says_so() -> None:
    """Azure: the first request may take up to 2 minutes to answer; meanwhile the VM stays in the pool."""
    gate = TrafficGate(
        EventStore(), lambda: VMIdentity(name="vm-a"), lead_seconds=LEAD, impacts=DISRUPTIVE_IMPACTS, clock=lambda: T0
    )
    assert (gate.verdict().takes_traffic, gate.verdict().reason) == (
        True,
        "vm-a may take traffic: IMDS has not answered yet",
    )


def test_a_freeze_of_no_impact_never_takes_the_vm_out_even_where_pauses_do() -> None:
    """Azure: DurationInSeconds 0 means the event won't interrupt the VM or impact its availability."""
    store = EventStore()
    freeze = ScheduledEvent("F0", "Freeze", "Started", resources=("vm-a",), event_source="Platform", duration_seconds=0)
    store.reconcile(Document(1, (freeze,)), T0)
    gate = TrafficGate(
        store, lambda: VMIdentity(name="vm-a"), lead_seconds=60, impacts=("pause", "live_migration"), clock=lambda: T0
    )
    assert (store.events["F0"].impact, gate.verdict().takes_traffic) == ("none", True)


def test_chosen_impacts_and_lead() -> None:
    store = EventStore()
    store.reconcile(Document(1, (scheduled("Freeze", in_seconds=100),)), T0)
    gate = TrafficGate(store, lambda: VMIdentity(name="vm-a"), lead_seconds=60, impacts=("pause",), clock=lambda: T0)
    assert gate.verdict().takes_traffic, "100 s left, 60 s lead"
    later = TrafficGate(
        store, lambda: VMIdentity(name="vm-a"), lead_seconds=60, impacts=("pause",), clock=lambda: T0 + 50
    )
    assert not later.verdict().takes_traffic


Start = Callable[..., ExporterProcess]


def reboot(status: str, not_before: str) -> dict[str, object]:
    return {
        "EventId": "R1",
        "EventType": "Reboot",
        "EventStatus": status,
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a"],
        "NotBefore": not_before,
        "EventSource": "Platform",
        "Description": "",
        "DurationInSeconds": -1,
    }


def rfc1123(seconds_from_now: float) -> str:
    import time
    from email.utils import formatdate

    return formatdate(time.time() + seconds_from_now, usegmt=True)


def test_the_endpoint_follows_the_lifecycle_without_basic_auth(
    fake_imds: FakeIMDS, start_exporter: Start, tmp_path: Path
) -> None:
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
    answer = [document(1)]
    fake_imds.respond = lambda seen: answer[0]
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
        "--vm.name=vm-a",
        f"--web.config.file={web}",
        "--traffic.lead-time=10m",
    )
    wait_for(lambda: fake_imds.event_requests() and exporter.get("/-/healthy").status_code == 401, 20, "polling")

    def traffic() -> httpx.Response:
        return exporter.get("/-/traffic")  # no credentials, as a load balancer's probe sends none

    assert exporter.get("/metrics").status_code == 401, "basic auth is on for the other paths"
    due = "vm-a may take traffic: no eviction/reboot/redeploy/termination event due\n"
    wait_for(lambda: traffic().text == due, 20, "the first answer taken")
    assert traffic().status_code == 200
    answer[0] = document(2, reboot("Scheduled", rfc1123(3600)))
    wait_for(lambda: exporter.logs().count("scheduled_event.transition=scheduled") == 1, 20, "the reboot seen")
    assert traffic().status_code == 200, "an hour away: beyond the 10-minute lead"
    answer[0] = document(3, reboot("Scheduled", rfc1123(400)))
    wait_for(lambda: traffic().status_code == 503, 20, "503 within the lead")
    assert traffic().text.startswith("Reboot R1 (impact reboot, cause platform) starts in ")
    answer[0] = document(4, reboot("Started", ""))
    wait_for(lambda: "is Started" in traffic().text, 20, "Started")
    assert traffic().status_code == 503
    answer[0] = document(5)
    wait_for(lambda: traffic().status_code == 200, 20, "200 once the reboot is gone")
    assert exporter.stop() == 0
