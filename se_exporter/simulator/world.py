"""The simulated Scheduled Events service: the thread-safe facade tests, the server and the demo use.

See :mod:`se_exporter.simulator.lifecycle` for the lifecycle rules and how DocumentIncarnation
moves. With ``enablement`` the service is enabled by a request and disabled by 24 h without one, as Azure
documents it (:mod:`se_exporter.simulator.enablement`): an enabling request's answer waits, the events are
listed later, and the incarnation drops back to ``reset_incarnation_to``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from se_exporter.simulator.clock import Clock, SimClock
from se_exporter.simulator.enablement import Enablement, EnablementTimes, Enabling
from se_exporter.simulator.lifecycle import Action, Lifecycle
from se_exporter.simulator.model import SCHEDULED, STARTED, EventPlan, SimulatedVM, Snapshot, new_guid
from se_exporter.simulator.scenario import Scenario
from se_exporter.simulator.truth import ApprovalRecord, Change, GroundTruth, RequestRecord


@dataclass
class _Playback:
    pending: set[str]  # EventIds not yet removed
    looping: bool


class SimWorld:
    """Thread-safe simulated IMDS state. All durations are simulated seconds."""

    def __init__(
        self,
        *,
        vm: SimulatedVM | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        initial_incarnation: int = 0,
        enablement: EnablementTimes | None = None,  # None: always enabled, answered at once
        start_enabled: bool = True,  # False: a VM that never asked (the first request enables)
        reset_incarnation_to: int = 1,
    ) -> None:
        self._vm = vm or SimulatedVM()
        self._clock: Clock = clock or SimClock()
        self._rng = rng or random.Random()  # noqa: S311 - GUIDs for a simulator, not secrets
        self._truth = GroundTruth()
        self._lock = threading.RLock()
        self._life = Lifecycle(self._vm.name, self._clock, self._truth, initial_incarnation, self._removed)
        self._enablement = (
            None if enablement is None else Enablement(enablement, enabled=start_enabled, now=self._clock.now())
        )
        self._hiding = False  # the last document hid the events of an enabling
        self._reset_to = reset_incarnation_to
        self._owner: dict[str, _Playback] = {}
        self._loop: list[Scenario] = []
        self._loop_index = 0
        self._loop_gap = 0.0
        self._loop_repeat = True

    @property
    def vm(self) -> SimulatedVM:
        return self._vm

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def truth(self) -> GroundTruth:
        return self._truth

    @property
    def enabling(self) -> Enabling | None:
        """The latest enabling of Scheduled Events by a request (None: none yet, or not modelled)."""
        return None if self._enablement is None else self._enablement.current

    # ----- reading -----------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The document as it is now (applies due changes first)."""
        with self._lock:
            self._advance()
            return self._snapshot()

    def begin_request(self) -> float | None:
        """A client's request arrives: it enables a disabled service (the incarnation starts over). Returns the
        simulated time before which it may not be answered, or None."""
        with self._lock:
            if self._enablement is None:
                return None
            self._advance()
            now = self._clock.now()
            if self._enablement.on_request(now) is not None and self._life.incarnation != self._reset_to:
                self._life.reset_incarnation(self._reset_to, "enabled", now)
            return self._enablement.answer_at(now)

    def serve_snapshot(self) -> Snapshot:
        """Like :meth:`snapshot`, for a client request: no event while an enabling hides them."""
        with self._lock:
            self._advance()
            now = self._clock.now()
            if self._enablement is not None and self._enablement.hides_events(now):
                self._hiding = True
                return Snapshot(now, self._life.incarnation, ())
            if self._hiding:  # the enabling's events are listed from now on: a new document
                self._hiding = False
                self._life.record("listed", "enabled", None, None, now)
                self._life.new_batch()
            return self._snapshot()

    def _snapshot(self) -> Snapshot:
        events = tuple(e.copy() for e in self._life.events.values())
        return Snapshot(self._clock.now(), self._life.incarnation, events)

    def tick(self) -> list[Change]:
        """Apply every change due by now and return them (the server's ticker calls this)."""
        with self._lock:
            return self._advance()

    def _advance(self) -> list[Change]:
        changes = self._life.advance(self._clock.now())
        self._life.new_batch()  # whatever the caller does next is a new document
        return changes

    # ----- scripting ---------------------------------------------------------------------------

    def add_event(self, plan: EventPlan, *, event_id: str | None = None) -> str:
        """Make an event appear now; return its EventId."""
        with self._lock:
            self._advance()
            event_id = event_id or self._guid()
            self._life.apply(Action(self._clock.now(), 0, "appear", event_id, "manual", plan))
            return event_id

    def play(self, scenario: Scenario, *, delay: float = 0.0) -> dict[str, str]:
        """Schedule ``scenario`` to start ``delay`` seconds from now; return alias → EventId."""
        scenario.validate()
        with self._lock:
            self._advance()
            ids = self._schedule(scenario, self._clock.now() + delay, looping=False)
            self._advance()
            return ids

    def loop(self, scenarios: Sequence[Scenario], *, gap: float = 10.0, repeat: bool = True) -> None:
        """Play ``scenarios`` one after the other, ``gap`` seconds apart; forever unless not ``repeat``.

        Each scenario starts ``gap`` seconds after the previous one's last event disappeared.
        """
        if not scenarios:
            raise ValueError("loop needs at least one scenario")
        for scenario in scenarios:
            scenario.validate()
        with self._lock:
            self._advance()
            self._loop, self._loop_index, self._loop_gap = list(scenarios), 0, gap
            self._loop_repeat = repeat
            self._play_next_in_loop(self._clock.now())
            self._advance()

    def stop_loop(self) -> None:
        """Let the current scenario of the loop finish, then play no more."""
        with self._lock:
            self._loop = []

    def start_event(self, event_id: str) -> bool:
        """Start a Scheduled event now (as the platform would); False if not Scheduled."""
        return self._act_now("start", event_id)

    def cancel_event(self, event_id: str) -> bool:
        """Remove a Scheduled event now (cancelled); False if not Scheduled."""
        return self._act_now("cancel", event_id)

    def complete_event(self, event_id: str) -> bool:
        """Remove a Started event now (completed); False if not Started."""
        return self._act_now("complete", event_id)

    def reschedule(self, event_id: str, notice: float) -> bool:
        """Move NotBefore of a Scheduled event to now + ``notice``; False if not Scheduled."""
        with self._lock:
            self._advance()
            now = self._clock.now()
            event = self._life.events.get(event_id)
            if event is None or event.status != SCHEDULED:
                return False
            return self._life.reschedule(event, now, now + notice, "manual") is not None

    def reset_incarnation(self, value: int | None = None) -> None:
        """Set DocumentIncarnation to a low value (default ``reset_incarnation_to``), as IMDS may after 24 h idle."""
        with self._lock:
            self._advance()
            self._life.reset_incarnation(self._reset_to if value is None else value, "manual", self._clock.now())

    def _act_now(self, kind: str, event_id: str) -> bool:
        with self._lock:
            self._advance()
            return self._life.apply(Action(self._clock.now(), 0, kind, event_id, "manual")) is not None

    # ----- approvals and requests (called by the HTTP server) ---------------------------------

    def approve(self, event_ids: Iterable[str], *, body: str = "") -> dict[str, str]:
        """Handle a valid StartRequests POST: start every listed Scheduled event now.

        Returns EventId → ``started``, ``already_started``, ``ignored`` (an Advisory: acknowledging a Spot
        eviction-risk notice does nothing) or ``unknown`` (IMDS answers 200 to all).
        """
        with self._lock:
            self._advance()
            now = self._clock.now()
            outcomes: dict[str, str] = {}
            for event_id in event_ids:
                event = self._life.events.get(event_id)
                if event is None:
                    outcomes[event_id] = "unknown"
                elif event.status == STARTED:
                    outcomes[event_id] = "already_started"
                elif event.status != SCHEDULED:
                    outcomes[event_id] = "ignored"
                else:
                    self._life.start(event, now, "approval")
                    outcomes[event_id] = "started"
            self._add_approval(True, body, outcomes)
            return outcomes

    def record_invalid_approval(self, body: str) -> None:
        self._add_approval(False, body, {})

    def record_request(self, method: str, path: str, status: int, fault: str | None) -> None:
        clock = self._clock
        self._truth.add(
            lambda seq: RequestRecord(
                seq, method, path, status, fault, clock.now(), clock.real_time(), clock.real_monotonic()
            )
        )

    def _add_approval(self, valid: bool, body: str, outcomes: dict[str, str]) -> None:
        clock = self._clock
        self._truth.add(
            lambda seq: ApprovalRecord(
                seq, valid, body, outcomes, clock.now(), clock.real_time(), clock.real_monotonic()
            )
        )

    # ----- scenarios ---------------------------------------------------------------------------

    def _guid(self) -> str:
        return new_guid(self._rng.getrandbits(128))

    def _schedule(self, scenario: Scenario, start: float, *, looping: bool) -> dict[str, str]:
        ids = {item.alias: self._guid() for item in scenario.events}
        playback = _Playback(set(ids.values()), looping)
        push = self._life.push
        for item in scenario.events:
            event_id = ids[item.alias]
            self._owner[event_id] = playback
            push(start + item.at, "appear", event_id, plan=item.plan)
            if item.start_at is not None:
                push(start + item.start_at, "start", event_id)
            if item.cancel_at is not None:
                push(start + item.cancel_at, "cancel", event_id)
            for step in item.reschedules:
                push(start + step.at, "reschedule", event_id, marker=start + step.at + step.notice)
        return ids

    def _play_next_in_loop(self, start: float) -> None:
        scenario = self._loop[self._loop_index % len(self._loop)]
        self._loop_index += 1
        self._schedule(scenario, start, looping=True)

    def _removed(self, event_id: str, at: float) -> None:
        """Lifecycle callback: when a looping scenario's last event goes, queue the next one."""
        playback = self._owner.pop(event_id, None)
        if playback is None:
            return
        playback.pending.discard(event_id)
        more = self._loop_repeat or self._loop_index < len(self._loop)
        if not playback.pending and playback.looping and self._loop and more:
            self._play_next_in_loop(at + self._loop_gap)
