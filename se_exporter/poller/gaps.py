"""Gaps in the poll loop's view of IMDS, and what they mean for the store (docs/design.md, What was not seen).

A gap is a stretch without a successful poll longer than max(3 intervals, GAP_FLOOR_SECONDS): a paused
VM, a stopped exporter, a restart (a store restored from the state file starts with one). The store judges
what went missing during it by when the view went blind.

After a gap of 24 h or more there is more: Azure disables Scheduled Events after 24 h without a request,
and the request that enables them again is answered "within 2 minutes" with events following "within 5
minutes". The first answers may then list nothing that is still coming (a Redeploy off degraded hardware
is announced days ahead), so for LISTED_WITHIN_SECONDS after the first good poll a restored event that IMDS
does not list is held, not removed, and the gap stays open until the hold ends.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import NamedTuple

# The view had a gap when no poll succeeded for longer than max(3 intervals, this): an IMDS hiccup of a few
# polls is not one, a paused VM, a stopped exporter or a restart is (docs/design.md, What was not seen).
GAP_FLOOR_SECONDS = 10.0
DISABLED_AFTER_SECONDS = 24 * 3600.0
LISTED_WITHIN_SECONDS = 300.0

log = logging.getLogger("se_exporter.poller")


class Look(NamedTuple):
    blind_since: float | None  # the wall time of the last good poll before a gap that ends now, or None
    holding: bool  # events IMDS does not list are kept: Scheduled Events were disabled and list them soon


class ViewGaps:
    def __init__(self, interval: float, blind_since: float | None) -> None:
        self._gap_after = max(3 * interval, GAP_FLOOR_SECONDS)
        self._blind_since = blind_since  # a restored store: blind since its last look (unknown: since ever)
        self._last_good: tuple[float, float] | None = None  # wall and monotonic time of the last good poll
        self._held_for: float | None = None  # the blind_since of the last hold
        self._hold_until = 0.0

    def look(self, now: float, mono: float) -> Look:
        """A good poll at ``now``: the gap it ends, and whether a hold is on."""
        blind = self._gap(now, mono)
        holding = self._holding(now, blind)
        self._last_good = (now, mono)
        self._blind_since = blind if holding else None
        return Look(blind, holding)

    def _gap(self, now: float, mono: float) -> float | None:
        """The larger of the two clocks' intervals counts: a paused VM's monotonic clock may not have moved."""
        blind = self._blind_since
        if self._last_good is not None:
            wall, last_mono = self._last_good
            if (unseen := max(now - wall, mono - last_mono)) > self._gap_after:
                log.info("no poll succeeded for %.0f s (a paused VM, a stopped exporter, IMDS down)", unseen)
                blind = wall if blind is None else min(blind, wall)
        return blind

    def _holding(self, now: float, blind: float | None) -> bool:
        if blind is None or now - blind < DISABLED_AFTER_SECONDS:
            return False
        if self._held_for != blind:  # a new gap of a day or more
            self._held_for, self._hold_until = blind, now + LISTED_WITHIN_SECONDS
            until = datetime.fromtimestamp(self._hold_until, UTC).isoformat(timespec="seconds")
            log.info(
                "no look at IMDS for %.1f h: Azure disables Scheduled Events after 24 h without requests and lists "
                "events within 5 minutes of the request that enables them again; until %s an event IMDS does "
                "not list is held, not removed",
                (now - blind) / 3600,
                until,
            )
        return now < self._hold_until
