"""The files the release before the state database wrote (``tests/testdata/earlier_release/``: E1 Started
and E2 Scheduled in its state file, three records in its log spool's journal), for the upgrade tests.

The files hold the wall-clock times of the day they were written. An exporter that starts on them a day
later rightly reads the gap as longer than IMDS keeps events, so :func:`copy_earlier_files` moves every
saved time by the same amount: the earlier release stopped a few seconds before ``now`` (the exporter's
wall clock, which a test may set ahead), as after an upgrade, whatever the day the test runs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.support.fake_imds import scheduled_event

EARLIER = Path(__file__).resolve().parents[1] / "testdata" / "earlier_release"
E2 = scheduled_event("E2", EventType="Freeze", DurationInSeconds=9)  # as the earlier release saw it
TRANSITION = "scheduled_event.transition"
SECONDS = frozenset({"first_seen", "started_at", "last_look", "at"})  # the state file's wall-clock times
NANOSECONDS = frozenset({"timestamp_ns"})  # the journal's
STOPPED_BEFORE_NOW = 5.0  # seconds between the earlier release's last look and the upgraded start


def _shifted(value: Any, by: float, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _shifted(v, by, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_shifted(v, by, key) for v in value]
    if key in SECONDS and isinstance(value, float):
        return value + by
    if key in NANOSECONDS and isinstance(value, int):
        return value + round(by * 1e9)
    return value


def _last_look() -> float:
    return float(json.loads((EARLIER / "state.json").read_text())["sections"]["store"]["last_look"])


def copy_earlier_files(folder: Path, now: float | None = None) -> Path:
    """The earlier release's state file and journal written into ``folder``, every saved time moved so that
    it stopped :data:`STOPPED_BEFORE_NOW` seconds before ``now`` (default: this process's wall clock);
    returns the state file."""
    now = time.time() if now is None else now
    by = now - STOPPED_BEFORE_NOW - _last_look()
    state = folder / "state.json"
    state.write_text(json.dumps(_shifted(json.loads((EARLIER / "state.json").read_text()), by), separators=(",", ":")))
    lines = (EARLIER / "state.json.spool").read_text().splitlines()
    journal = [json.dumps(_shifted(json.loads(line), by), separators=(",", ":")) for line in lines]
    (folder / "state.json.spool").write_text("".join(line + "\n" for line in journal))
    return state


def journal_uids() -> dict[str, str]:
    """uid -> transition of the records the earlier release left in its journal."""
    entries = [json.loads(line)["add"] for line in (EARLIER / "state.json.spool").read_text().splitlines()]
    return {entry["uid"]: entry["attributes"][TRANSITION] for entry in entries}
