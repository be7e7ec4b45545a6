"""No loss: transition records survive a collector outage longer than the SDK's retry window and an
exporter restart in the middle of it, and arrive exactly once, in order, when the collector is back."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from se_exporter.simulator import EventPlan, SimWorld
from tests.otel.conftest import StartOTel
from tests.otlp import OTLPReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

TRANSITION = "scheduled_event.transition"


def spool_depth(exporter: ExporterProcess) -> float | None:
    return value(exporter.metrics(), "azure_scheduled_events_log_spool_depth")


def test_outage_and_restart_lose_nothing_and_duplicate_nothing(
    simulator: tuple[SimWorld, str], otlp_receiver: OTLPReceiver, start_otel: StartOTel
) -> None:
    world, url = simulator
    first = start_otel(url, otlp_receiver)
    first.wait_ready()
    reboot = world.add_event(EventPlan("Reboot", notice=900))
    scheduled = otlp_receiver.wait_for_logs(event_name=TRANSITION, timeout=15)[0]

    otlp_receiver.set_unavailable()  # 503 / UNAVAILABLE
    world.start_event(reboot)
    # One poll at a time: two changes seen by the same poll are emitted in the document's order,
    # which is the simulator's, not the order this test made them in.
    wait_for(lambda: spool_depth(first) == 1, 15, "the start spooled during the outage")
    freeze = world.add_event(EventPlan("Freeze", notice=600))
    wait_for(lambda: spool_depth(first) == 2, 15, "two records spooled during the outage")
    # Rejected more than once: the SDK exporter's own retry window (1 s here) has run out and retried.
    otlp_receiver.wait_for_requests(signal="logs", accepted=False, count=3, timeout=20)

    otlp_receiver.stop()  # the port is closed now, and the exporter restarts meanwhile
    began = time.monotonic()
    assert first.stop() == 0
    assert time.monotonic() - began < 10, "SIGTERM flush is bounded"
    # The first process's 1 s export timeout made the outage outlast the SDK's retry window; the second
    # delivers with a longer one, so a loaded machine cannot make a request the receiver took look
    # refused (it would be sent again: a duplicate the receiver drops by uid, but a duplicate).
    second = start_otel(url, otlp_receiver, env={"OTEL_EXPORTER_OTLP_TIMEOUT": "10000"})
    second.wait_ready()
    wait_for(lambda: spool_depth(second) == 2, 15, "the spool survived the restart")
    world.cancel_event(freeze)
    wait_for(lambda: spool_depth(second) == 3, 15, "the cancellation is spooled too")
    wait_for(lambda: "OTLP log export failing" in second.logs(), 15, "the closed port is noticed")

    otlp_receiver.set_unavailable(False)
    otlp_receiver.start()  # same port
    logs = otlp_receiver.wait_for_logs(event_name=TRANSITION, count=4, timeout=30)
    wait_for(lambda: spool_depth(second) == 0, 15, "everything acknowledged")
    world.complete_event(reboot)
    otlp_receiver.wait_for_logs(event_name=TRANSITION, count=5, timeout=15)
    wait_for(lambda: spool_depth(second) == 0, 15, "the completion acknowledged")

    logs = otlp_receiver.store.find_logs(event_name=TRANSITION)
    kinds = [(log["scheduled_event.id"], log[TRANSITION]) for log in logs]
    assert kinds == [
        (reboot, "scheduled"),
        (reboot, "started"),
        (freeze, "scheduled"),
        (freeze, "cancelled"),
        (reboot, "completed"),
    ], "every record exactly once, in order"
    assert max(Counter(log["log.record.uid"] for log in logs).values()) == 1
    assert value(second.metrics(), "azure_scheduled_events_log_spool_dropped_total") == 0

    # The lifecycle span of the event that outlived the restart starts at its first sighting.
    span = otlp_receiver.wait_for_spans(
        name="scheduled_event.lifecycle", attributes={"scheduled_event.id": reboot}, timeout=15
    )[0]
    assert span.start_time_unix_nano == scheduled.time_unix_nano
    assert [e.name for e in span.events] == ["scheduled", "started", "completed"]
    assert second.stop() == 0
