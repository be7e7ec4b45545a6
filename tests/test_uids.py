"""A uid never changes: a transition's ``log.record.uid`` is the one every version so far gave it (a receiver
may hold it already)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from se_exporter.imds.document import ScheduledEvent
from se_exporter.lifecycle.transitions import Transition, TransitionKind

pytestmark = pytest.mark.pure


def test_a_known_transition_uid() -> None:
    event = ScheduledEvent(
        event_id="EV-1",
        event_type="Reboot",
        event_status="Scheduled",
        resources=("vm-a",),
        not_before=datetime(2099, 4, 11, 22, 26, 58, tzinfo=UTC),
    )
    transition = Transition(TransitionKind.SCHEDULED, event, "", 0.0, 1, 0.0, "Scheduled")
    assert transition.uid == "f7bef77e-ed40-54e8-a514-9f817cef2398"
