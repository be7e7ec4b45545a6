"""``/-/traffic``: whether a load balancer should send this VM traffic, read from the store at request time.

503 from ``lead`` seconds before the NotBefore of an event that affects this VM and whose impact is one of
``impacts``, while such an event is Started, and until it is gone (a Scheduled one without a NotBefore may
start at any moment: 503 too); 200 otherwise. In a status Azure may add (a Reboot ``Paused``), such an event
counts as a Scheduled one: its NotBefore and the lead time decide, and with no NotBefore it keeps the VM out,
because nothing says it is not under way (docs/actions.md). A Spot eviction-risk notice (impact
``eviction_risk``) is not one of the default impacts: nothing is lost yet. The body says why. Only an event
known to list this VM counts: while the VM's name is unknown no event does, because every VM of an
availability set or scale set sees the same events, and taking them all out of the load balancer at once
would be the outage the probe is there to avoid. The same holds before the first IMDS answer: nothing is
known, so traffic flows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass

from se_exporter.imds.document import SCHEDULED, STARTED
from se_exporter.imds.identity import VMIdentity
from se_exporter.lifecycle import EventStore
from se_exporter.lifecycle.transitions import EventState


@dataclass(frozen=True, slots=True)
class TrafficVerdict:
    takes_traffic: bool
    reason: str  # one line per event that keeps the VM out, or why traffic flows


class TrafficGate:
    def __init__(
        self,
        store: EventStore,
        identity: Callable[[], VMIdentity],
        *,
        lead_seconds: float,
        impacts: Collection[str],
        clock: Callable[[], float],
    ) -> None:
        self._store, self._identity, self._clock = store, identity, clock
        self._lead, self._impacts = lead_seconds, frozenset(impacts)

    def verdict(self) -> TrafficVerdict:
        now, identity = self._clock(), self._identity()
        reasons = [
            reason
            for state in self._store.events.values()  # an immutable snapshot: no lock
            if (reason := self._keeps_out(state, identity, now)) is not None
        ]
        if reasons:
            return TrafficVerdict(False, "\n".join(reasons))
        who = f"{identity.name}" if identity.name else "this VM (its name is not known yet)"
        if self._store.last_look is None:  # a first start: Azure may take up to 2 minutes to answer at all
            return TrafficVerdict(True, f"{who} may take traffic: IMDS has not answered yet")
        return TrafficVerdict(True, f"{who} may take traffic: no {'/'.join(sorted(self._impacts))} event due")

    def _keeps_out(self, state: EventState, identity: VMIdentity, now: float) -> str | None:
        event = state.event
        if state.impact not in self._impacts or identity.affects(event.resources) is not True:
            return None
        what = f"{event.event_type} {event.event_id} (impact {state.impact}, cause {state.cause})"
        if event.event_status == STARTED:
            return f"{what} is Started"
        if event.not_before is None and event.event_status == SCHEDULED:
            return f"{what} is {event.event_status} with no NotBefore: it may start at any moment"
        if event.not_before is None:
            return (
                f"{what} is {event.event_status}, a status se-exporter does not know, with no NotBefore: "
                "it may be under way or start at any moment"
            )
        left = event.not_before.timestamp() - now
        if left <= self._lead:
            return f"{what} starts in {max(0, round(left))} s (NotBefore {event.not_before.isoformat()})"
        return None
