"""Poll health: what the poll loop last achieved, read by /metrics and /-/ready."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PollHealth:
    up: bool = False  # the last poll succeeded
    last_success: float | None = None  # Unix time of the last good poll

    @property
    def ready(self) -> bool:
        return self.last_success is not None
