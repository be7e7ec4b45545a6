"""Ground truth: everything the simulator changed, served and received, with timestamps.

A soak test compares the exporter's output with these records. Every record carries the
simulated time (``sim_time``) and the real wall and monotonic times at which it was recorded.
For a change applied late (a tick that jumped over several due instants) ``sim_time`` is the
instant the change was due, which is also the instant a client polling at that moment would
have seen it.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar


@dataclass(frozen=True)
class Change:
    """One change of the document.

    ``kind``: ``appeared``, ``started``, ``rescheduled``, ``removed``, ``incarnation_reset`` or ``listed``
    (an enabling's events listed at last). ``reason`` says why: ``scenario``, ``not_before`` (NotBefore
    passed), ``approval``, ``cancelled``, ``completed``, ``manual``, ``enabled`` (a request enabled the
    service). ``not_before`` is the NotBefore string a client sees (RFC 1123 on the real clock, ``""``
    when none); ``not_before_sim`` the simulated instant.
    """

    seq: int
    kind: str
    reason: str
    event_id: str | None
    event_type: str | None
    status: str | None
    previous_status: str | None
    not_before: str
    not_before_sim: float | None
    incarnation: int
    sim_time: float
    real_time: float
    real_monotonic: float


@dataclass(frozen=True)
class RequestRecord:
    """One IMDS request served (``/_sim/*`` debug requests are not recorded).

    ``status`` is 0 when the connection was reset without an answer; ``fault`` names the injected
    fault, if any.
    """

    seq: int
    method: str
    path: str
    status: int
    fault: str | None
    sim_time: float
    real_time: float
    real_monotonic: float


@dataclass(frozen=True)
class ApprovalRecord:
    """One approval POST received (also malformed ones: ``valid`` is then False).

    ``outcomes`` maps each EventId to ``started``, ``already_started`` or ``unknown``.
    """

    seq: int
    valid: bool
    body: str
    outcomes: dict[str, str]
    sim_time: float
    real_time: float
    real_monotonic: float


TruthEntry = Change | RequestRecord | ApprovalRecord
R = TypeVar("R", Change, RequestRecord, ApprovalRecord)


class GroundTruth:
    """Thread-safe, append-only record store; waiters wake up on every new record."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._changes: list[Change] = []
        self._requests: list[RequestRecord] = []
        self._approvals: list[ApprovalRecord] = []
        self._listeners: list[Callable[[TruthEntry], None]] = []
        self._seq = 0

    def add_listener(self, listener: Callable[[TruthEntry], None]) -> None:
        """Call ``listener`` with every new record (from the recording thread)."""
        with self._cond:
            self._listeners.append(listener)

    def add(self, make: Callable[[int], R]) -> R:
        """Number a new record (``make(seq)``) and store it under one lock, so stored order is seq order."""
        with self._cond:
            self._seq += 1
            record = make(self._seq)
            if isinstance(record, Change):
                self._changes.append(record)
            elif isinstance(record, RequestRecord):
                self._requests.append(record)
            else:
                self._approvals.append(record)
            listeners = list(self._listeners)
            self._cond.notify_all()
        for listener in listeners:
            listener(record)
        return record

    def changes(self) -> tuple[Change, ...]:
        with self._cond:
            return tuple(self._changes)

    def requests(self) -> tuple[RequestRecord, ...]:
        with self._cond:
            return tuple(self._requests)

    def approvals(self) -> tuple[ApprovalRecord, ...]:
        with self._cond:
            return tuple(self._approvals)

    def wait_for(self, predicate: Callable[[GroundTruth], bool], timeout: float) -> bool:
        """Block until ``predicate(self)`` holds or ``timeout`` real seconds pass; return the result."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def to_json(self) -> dict[str, Any]:
        with self._cond:
            return {
                "changes": [dataclasses.asdict(c) for c in self._changes],
                "approvals": [dataclasses.asdict(a) for a in self._approvals],
            }

    def requests_json(self) -> list[dict[str, Any]]:
        with self._cond:
            return [dataclasses.asdict(r) for r in self._requests]
