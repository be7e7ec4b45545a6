"""One run of one action for one transition: what is queued, what it became, and its row in the state file.

A run is keyed by the transition's uid and the action's name, so a transition runs each action at most
once; a run not yet reported is a row of ``action_runs``. ``queued``: never started, runs after a restart.
``released``: handed to the workers, so it may have started: after a crash it is reported ``failed`` and
never run again (at most once; a clean stop puts the runs that had not started back to ``queued``).
``finished``: its outcome is saved until reported. The outcome types are the sinks' too, so this module is
imported without the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

import msgspec

from se_exporter.durable.persistence import Tables, decode_row
from se_exporter.imds.impact import DISRUPTIVE_IMPACTS
from se_exporter.lifecycle.transitions import Transition


class RunState(StrEnum):
    QUEUED = "queued"
    RELEASED = "released"
    FINISHED = "finished"


class ActionResult(StrEnum):
    SUCCEEDED = "succeeded"  # exit status 0 within its timeout
    FAILED = "failed"  # another status, killed, could not start, or cut short by a crash or a stop
    TIMED_OUT = "timed_out"  # stopped (with its children) at timeout_seconds
    SKIPPED = "skipped"  # never run: too many runs waiting, or the action is no longer configured


ACTION_RESULTS: tuple[str, ...] = tuple(ActionResult)


class ActionOutcome(msgspec.Struct, frozen=True):
    """How one run ended: what the sinks count, log and send as a ``scheduled_event.action`` record."""

    action: str
    transition: Transition
    vm_name: str | None
    result: ActionResult
    summary: str  # "exited with status 0", "timed out after 30 s; ...", "not run: ..."
    duration_seconds: float
    at: float  # Unix time it ended (or was skipped)
    last_output: str = ""

    @property
    def uid(self) -> str:
        """Stable: the same if this outcome is ever reported again after a crash."""
        return f"{self.transition.uid}/{self.action}"


@dataclass(slots=True)
class Run:
    action: str
    transition: Transition
    vm_name: str | None
    state: RunState = RunState.QUEUED
    outcome: ActionOutcome | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.transition.uid, self.action)

    @property
    def urgent(self) -> bool:
        """A disruptive event of this VM (its reboot, eviction...): such runs start before the others."""
        event = self.transition.event
        return (
            self.transition.impact in DISRUPTIVE_IMPACTS
            and self.vm_name is not None
            and self.vm_name in event.resources
        )

    def size(self) -> int:
        """Roughly what the run holds, in bytes (its event dominates): the queue is bounded by it."""
        event = self.transition.event
        return 400 + len(event.description) + sum(len(name) + 4 for name in event.resources) + len(event.event_id)


class _SavedRun(msgspec.Struct, forbid_unknown_fields=True):
    action: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    state: RunState
    transition: Transition
    vm_name: str | None
    outcome: ActionOutcome | None


def runs_to_rows(runs: list[Run]) -> dict[str, _SavedRun]:
    """A row per run, keyed by its transition's uid and its action."""
    return {
        f"{run.transition.uid}/{run.action}": _SavedRun(run.action, run.state, run.transition, run.vm_name, run.outcome)
        for run in runs
    }


def runs_from_rows(tables: Tables) -> list[Run]:
    """The saved runs, in the order their transitions were observed (a msgspec error when a row is not one
    this version wrote)."""
    saved = [decode_row(body, _SavedRun) for body in tables.get("action_runs", {}).values()]
    saved.sort(key=lambda run: run.transition.observed_at)
    return [Run(run.action, run.transition, run.vm_name, run.state, run.outcome) for run in saved]
