"""Randomised, documented-legal histories for the soak test, and the transitions they imply.

A history is one :class:`~se_exporter.simulator.Scenario` (validated by the simulator's own rules,
so every step is legal per Microsoft's documentation) plus the real-time offsets of
DocumentIncarnation resets. It covers every event type and source, events for this VM, for a
peer it leads, led by a peer, and not for this VM at all, hardware failures (appear Started),
early starts (another VM approved), cancellations, one or two reschedules, and bursts of many
events appearing and finishing at the same instant.

The observability rule
----------------------
Any poller can miss a state shorter than its blind window (a poll interval, plus an injected
fault burst, plus a restart). So every *state* of every event (Scheduled with a given NotBefore,
Started) lasts at least ``tmin`` real seconds, and the chaos driver keeps every blind window
well below that (see ``chaos.py``). With that the expectation is exact: every change of the
simulator's ground truth must show up as exactly one transition. The soak checks the premise
too (``checks.check_observable``): each state was covered by a good answer actually served.

Times here are *real* seconds; the scenario is written in simulated seconds (real seconds x ``speed``).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime

from se_exporter.simulator import EVENT_SOURCES, EVENT_TYPES, SELF, EventPlan, Reschedule, Scenario, ScenarioEvent
from se_exporter.simulator.truth import Change

PEER = "peer-vm-1"
OTHER = "peer-vm-2"
# (resources, weight): this VM alone; this VM leading a peer; a peer leading this VM; not this VM.
RESOURCE_SHAPES: tuple[tuple[tuple[str, ...], int], ...] = (
    ((SELF,), 6),
    ((SELF, PEER), 1),
    ((PEER, SELF), 2),
    ((OTHER,), 1),
)
FREEZE_DURATIONS = (-1, 0, 5, 8, 9, 30)  # around the policy's 8 s bound
OTHER_DURATIONS = (-1, 0, 120, 900)


@dataclass(frozen=True)
class HistoryPlan:
    scenario: Scenario
    reset_at: tuple[float, ...]  # real seconds after play() at which DocumentIncarnation resets
    end: float  # real seconds after play() by which every event is gone
    shapes: dict[str, int] = field(default_factory=dict)  # what was generated, for the report


def plan_history(
    rng: random.Random, *, active: float, speed: float, tmin: float, tmax: float, mean_gap: float, burst_every: float
) -> HistoryPlan:
    """Events appearing over ``[1, active - 2*tmin]`` real seconds, all gone by ``active``."""
    events: list[ScenarioEvent] = []
    shapes: dict[str, int] = {}
    at, next_burst, index = 1.0, burst_every / 2, 0
    while at < active - 2 * tmin - 1:
        group = 1
        if at >= next_burst:  # many events at once: same instant, same lifetime
            group, next_burst = rng.randint(6, 12), next_burst + burst_every
        lifetime = None
        for _ in range(group):
            item, kind, lifetime = _event(
                rng, f"e{index}", at, active - at, speed=speed, tmin=tmin, tmax=tmax, lifetime=lifetime
            )
            events.append(item)
            shapes[kind] = shapes.get(kind, 0) + 1
            index += 1
        shapes["burst" if group > 1 else "single"] = shapes.get("burst" if group > 1 else "single", 0) + 1
        at += rng.expovariate(1 / mean_gap) + 0.2
    scenario = Scenario("soak", tuple(events), "randomised soak history")
    scenario.validate()
    resets = tuple(sorted(rng.uniform(tmin, active - tmin) for _ in range(max(1, int(active // 120) + 1))))
    return HistoryPlan(scenario, resets, active, shapes)


def _event(
    rng: random.Random,
    alias: str,
    at: float,
    room: float,
    *,
    speed: float,
    tmin: float,
    tmax: float,
    lifetime: tuple[float, float] | None,
) -> tuple[ScenarioEvent, str, tuple[float, float]]:
    """One event appearing at ``at`` (real s) and gone within ``room`` real seconds."""
    event_type = rng.choice(EVENT_TYPES)
    source = rng.choice(EVENT_SOURCES)
    resources = rng.choices([s for s, _ in RESOURCE_SHAPES], [w for _, w in RESOURCE_SHAPES])[0]
    duration = rng.choice(FREEZE_DURATIONS if event_type == "Freeze" else OTHER_DURATIONS)
    span = min(tmax, (room - 0.5) / 2)  # the longest a state may last and still fit

    def length() -> float:
        return rng.uniform(tmin, max(tmin, span))

    notice, started_for = lifetime or (length(), length())
    description = f"soak {alias}: {event_type} from {source}"
    s = speed
    if lifetime is None and rng.random() < 0.12:  # hardware failure: appears directly as Started Reboot
        plan = EventPlan("Reboot", "Platform", None, -1, started_for * s, resources, description + " (hardware)")
        return ScenarioEvent(alias, plan, at * s), "hardware_failure", (notice, started_for)
    plan = EventPlan(event_type, source, notice * s, duration, started_for * s, resources, description)
    roll = rng.random()
    kind = "platform_start"
    start_at = cancel_at = None
    reschedules: tuple[Reschedule, ...] = ()
    left = room - notice - started_for  # spare time for a reschedule
    if lifetime is None and notice >= 2 * tmin and roll < 0.2:
        kind, cancel_at = "cancelled", (at + rng.uniform(tmin, notice - tmin)) * s
    elif lifetime is None and notice >= 2 * tmin and roll < 0.35:
        kind, start_at = "early_start", (at + rng.uniform(tmin, notice - tmin)) * s
    elif lifetime is None and roll < 0.6 and left >= tmin + 1 and notice >= tmin + 1:
        # Move NotBefore later, at a moment >= tmin after the last change: each state still lasts >= tmin.
        kind = "rescheduled"
        step = at + rng.uniform(tmin, notice - 0.5)
        new_not_before = at + notice + rng.uniform(tmin, min(tmax, left - 0.5))
        moves = [Reschedule(step * s, (new_not_before - step) * s)]
        left -= new_not_before - (at + notice)
        if left >= tmin + 1 and rng.random() < 0.4:
            second = step + rng.uniform(tmin, new_not_before - step)
            later = new_not_before + rng.uniform(tmin, min(tmax, left - 0.5))
            if later - second >= tmin and second < new_not_before:
                moves.append(Reschedule(second * s, (later - second) * s))
                kind = "rescheduled_twice"
        reschedules = tuple(moves)
    item = ScenarioEvent(alias, plan, at * s, start_at=start_at, cancel_at=cancel_at, reschedules=reschedules)
    return item, kind, (notice, started_for)


@dataclass(frozen=True)
class Expected:
    """One transition the exporter must report, derived from the ground truth."""

    event_id: str
    kind: str  # scheduled | started | completed | cancelled | rescheduled
    event_type: str
    not_before: datetime | None  # for scheduled/rescheduled: the NotBefore clients saw
    real_time: float  # when the simulator made the change (wall clock)
    real_monotonic: float
    seq: int


Blind = tuple[float, float, float, float]  # a window the exporter could not look: monotonic and wall, start and end


def expected_transitions(
    changes: tuple[Change, ...] | list[Change], blind: tuple[Blind, ...] | list[Blind] = ()
) -> list[Expected]:
    """docs/design.md's transitions, as the exporter can know them, in the order it can see them.

    Outside ``blind`` windows (the exporter paused, as a Freeze pauses the VM) it sees every change as it
    happens. What changes inside one it sees at the window's end, all at once, by comparing what it saw last
    with what is true then: an event last seen Scheduled and gone is ``completed``, its start unseen, when its
    NotBefore passed inside the window (``cancelled`` otherwise), and a state that came and went unseen makes no
    transition at all (docs/design.md, What was not seen).
    """
    seen: dict[str, tuple[str, str]] = {}  # event -> (status, NotBefore) as the exporter last saw it
    truth: dict[str, tuple[str, str]] = {}
    types: dict[str, str] = {}
    dirty: set[str] = set()
    out: list[Expected] = []
    timeline = sorted(
        [(change.real_monotonic, 0, change) for change in changes if change.event_id is not None]
        + [(window[1], 1, window) for window in blind],
        key=lambda item: (item[0], item[1]),
    )
    for moment, what, item in timeline:
        if what == 1:  # a window ends: the exporter looks again
            window = item
            assert isinstance(window, tuple)
            for event_id in sorted(dirty):
                out += _seen(event_id, seen, truth, types, window[1], window[3], unseen_since=window[2])
            dirty.clear()
            continue
        change = item
        assert isinstance(change, Change) and change.event_id is not None
        types[change.event_id] = change.event_type or ""
        if change.kind == "removed":
            truth.pop(change.event_id, None)
        else:
            truth[change.event_id] = (change.status or truth.get(change.event_id, ("", ""))[0], change.not_before)
        if any(start <= moment < end for start, end, _, _ in blind):
            dirty.add(change.event_id)
        else:
            out += _seen(change.event_id, seen, truth, types, moment, change.real_time, unseen_since=None)
    for seq, expected in enumerate(out):
        out[seq] = dataclasses.replace(expected, seq=seq)
    return out


def _seen(  # noqa: PLR0917 - the fold's state, handed over whole
    event_id: str,
    seen: dict[str, tuple[str, str]],
    truth: dict[str, tuple[str, str]],
    types: dict[str, str],
    monotonic: float,
    wall: float,
    *,
    unseen_since: float | None,
) -> list[Expected]:
    """What the exporter reports when it looks at ``event_id`` at ``wall`` after its last look."""
    before, now = seen.get(event_id), truth.get(event_id)
    kind: str | None = None
    if before is None and now is not None:
        kind = "scheduled" if now[0] == "Scheduled" else "started"
    elif before is not None and now is None:
        due = parsedate_to_datetime(before[1]).timestamp() if before[1] else None
        passed_unseen = unseen_since is not None and due is not None and unseen_since < due <= wall
        kind = "completed" if before[0] == "Started" or passed_unseen else "cancelled"
    elif before is not None and now is not None:
        if before[0] == "Scheduled" and now[0] == "Started":
            kind = "started"
        elif now[0] == "Scheduled" and now[1] != before[1] and now[1]:
            kind = "rescheduled"
    if now is None:
        seen.pop(event_id, None)
    else:
        seen[event_id] = now
    if kind is None:
        return []
    shown = now[1] if now is not None and kind in ("scheduled", "rescheduled") and now[1] else ""
    not_before = parsedate_to_datetime(shown) if shown else None
    return [Expected(event_id, kind, types.get(event_id, ""), not_before, wall, monotonic, 0)]
