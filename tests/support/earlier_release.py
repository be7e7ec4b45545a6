"""The files the release before the state database wrote (``tests/testdata/earlier_release/``: E1 Started
and E2 Scheduled in its state file, three records in its log spool's journal), for the upgrade tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.fake_imds import scheduled_event

EARLIER = Path(__file__).resolve().parents[1] / "testdata" / "earlier_release"
E2 = scheduled_event("E2", EventType="Freeze", DurationInSeconds=9)  # as the earlier release saw it
TRANSITION = "scheduled_event.transition"


def copy_earlier_files(folder: Path) -> Path:
    """The earlier release's state file and journal copied into ``folder``; returns the state file."""
    for name in ("state.json", "state.json.spool"):
        shutil.copy(EARLIER / name, folder / name)
    return folder / "state.json"


def journal_uids() -> dict[str, str]:
    """uid -> transition of the records the earlier release left in its journal."""
    entries = [json.loads(line)["add"] for line in (EARLIER / "state.json.spool").read_text().splitlines()]
    return {entry["uid"]: entry["attributes"][TRANSITION] for entry in entries}
