"""Whether Scheduled Events are enabled for the simulated VM, as Azure documents it.

The first request enables them: "expect a delayed response in your first call of up to two minutes", and
events follow within 5 minutes. 24 hours without a request disable them again, and the next request
enables them anew (DocumentIncarnation may start over then). The simulator takes the documented upper
bounds, in simulated seconds: at ``--speed 60`` the first answer of an enabling takes 2 real seconds.
Every request of the enabling's first answer window waits for that answer; until the events' moment the
document lists no event.
"""

from __future__ import annotations

from dataclasses import dataclass

DISABLE_AFTER_SECONDS = 24 * 3600.0
ANSWER_DELAY_SECONDS = 120.0
EVENTS_DELAY_SECONDS = 300.0


@dataclass(frozen=True)
class EnablementTimes:
    disable_after: float | None = DISABLE_AFTER_SECONDS  # None: never disabled
    answer_delay: float = ANSWER_DELAY_SECONDS  # of the answers to the requests of an enabling
    events_delay: float = EVENTS_DELAY_SECONDS  # from the enabling request to the first listed event

    def __post_init__(self) -> None:
        for name in ("disable_after", "answer_delay", "events_delay"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")


@dataclass(frozen=True)
class Enabling:
    """The service enabled by a request at ``at`` (simulated time)."""

    at: float
    answer_at: float  # no request is answered before
    events_at: float  # no event is listed before


class Enablement:
    """The service's state, driven by the requests' simulated times (not thread-safe: the world locks)."""

    def __init__(self, times: EnablementTimes, *, enabled: bool, now: float) -> None:
        self.times = times
        self._last_request: float | None = now if enabled else None
        self.current: Enabling | None = None  # the latest enabling; None if the service was enabled from the start

    def on_request(self, now: float) -> Enabling | None:
        """A request arrives at ``now``: the enabling it starts (the service was disabled), or None."""
        last, self._last_request = self._last_request, now
        idle = self.times.disable_after
        if last is not None and (idle is None or now - last < idle):
            return None
        self.current = Enabling(now, now + self.times.answer_delay, now + self.times.events_delay)
        return self.current

    def answer_at(self, now: float) -> float | None:
        """When a request arriving at ``now`` may be answered, or None: at once."""
        current = self.current
        return current.answer_at if current is not None and now < current.answer_at else None

    def hides_events(self, now: float) -> bool:
        current = self.current
        return current is not None and now < current.events_at
