"""Runs the actions a poll's transitions call for, in the background; never blocks a poll.

Each poll queues a run per (transition, matching action) and reports the runs that ended since the last
poll. Runs start only once the state file says they may have started (``release``: when the commit that
carries it succeeded, up to twice ``concurrency`` at a time): so a transition runs each action **at most once**, across
restarts and crashes alike. While runs wait, the poll loop asks ``startable`` between polls and releases more
as soon as a worker frees, whatever IMDS answers; runs of a disruptive event of this VM go first, the
rest in the order their transitions happened. Every failure of a run, even to write its event file, ends
it ``failed``: no run can hold a worker or a slot for good. A run released when the exporter crashed is
reported ``failed`` after the restart, never run again; a clean stop puts the runs that had not started
back in the queue, and they run after the restart. Commands run as the hook's do
(``command.CommandRunner``: their own process tree, a time limit, stopped with their children), at most
``concurrency`` at once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor

from se_exporter.actions.config import Action, Actions
from se_exporter.actions.runs import ActionOutcome, ActionResult, Run, RunState, runs_to_rows
from se_exporter.common.times import time_left
from se_exporter.durable.persistence import done
from se_exporter.imds.document import VMIdentity
from se_exporter.imds.impact import Classification
from se_exporter.lifecycle.transitions import Transition
from se_exporter.platform import Platform, current
from se_exporter.process.command import CommandResult, CommandRunner, event_environment, event_file, event_json

log = logging.getLogger("se_exporter.actions")
TABLES = ("action_runs",)
MAX_RUNS = 10_000  # waiting, running or not yet reported
MAX_RUN_BYTES = 8 << 20  # what they hold (their events), so the state file stays far under its bound
INTERRUPTED = "not run again: the exporter stopped while this run was started or about to start (at most once)"


class ActionRunner:
    def __init__(
        self,
        actions: Actions,
        *,
        save: Callable[[], Future[None]] | None = None,  # the future of the commit carrying what changed so far
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
        platform: Platform | None = None,
        runs: Sequence[Run] = (),
    ) -> None:
        self.actions = actions
        self.state_version = 0  # moves whenever to_state() would save something new (durable.persistence)
        # done: without a state file, there is nothing to wait for
        self._save, self._clock, self._environ = save or done, clock, environ
        self._closed = False
        self._platform = platform or current()
        self._commands = CommandRunner(log, "action", platform=self._platform)
        self._executor = ThreadPoolExecutor(max_workers=actions.concurrency, thread_name_prefix="se-action")
        self._lock = threading.Lock()
        self._runs: dict[tuple[str, str], Run] = {}
        self._futures: dict[tuple[str, str], Future[None]] = {}
        self._bytes = 0
        for run in runs:
            self._restore(run)

    def rows(self) -> dict[str, Mapping[str, object]]:
        """A row per run waiting, running or not yet reported (``action_runs``)."""
        with self._lock:
            return {"action_runs": runs_to_rows(list(self._runs.values()))}

    def on_poll(self, transitions: Sequence[Transition], identity: VMIdentity) -> list[ActionOutcome]:
        """Queue the runs ``transitions`` call for; return the outcomes to report now (runs that ended since
        the last poll, and runs refused because too many wait)."""
        refused = [refusal for t in transitions for refusal in self._queue(t, identity)]
        with self._lock:
            finished = [run for run in self._runs.values() if run.state is RunState.FINISHED]
            for run in finished:
                del self._runs[run.key]
                self._futures.pop(run.key, None)
                self._bytes -= run.size()
            if finished:
                self.state_version += 1
        return [*(run.outcome for run in finished if run.outcome is not None), *refused]

    def waiting(self) -> bool:
        """Whether runs wait for a release (the loop then looks at ``startable`` often, else not at all)."""
        with self._lock:
            return any(run.state is RunState.QUEUED for run in self._runs.values())

    def startable(self) -> bool:
        """Whether a release now would start a run: runs wait and the released ones leave room."""
        with self._lock:
            return self._budget() > 0 and any(run.state is RunState.QUEUED for run in self._runs.values())

    def _budget(self) -> int:
        # Enough to keep every worker busy until the loop releases more, and no more: a crash turns each
        # released run that had not started yet into a "failed" one (never run again).
        return 2 * self.actions.concurrency - sum(run.state is RunState.RELEASED for run in self._runs.values())

    def release(self) -> None:
        """Mark queued runs as possibly started and save: they start once the commit carrying that succeeded
        (on the state writer's thread), so a slow or full disk delays runs, never a poll."""
        with self._lock:
            waiting = [run for run in self._runs.values() if run.state is RunState.QUEUED]
            waiting.sort(key=lambda run: not run.urgent)  # stable: in order within each kind
            queued = waiting[: max(0, self._budget())]
            for run in queued:
                run.state = RunState.RELEASED
            self.state_version += bool(queued)
        if queued:
            self._save().add_done_callback(lambda saved: self._start(queued, saved))

    def _start(self, runs: list[Run], saved: Future[None]) -> None:
        """The commit saying ``runs`` may have started succeeded: they start (unless the exporter stopped)."""
        with self._lock:
            if self._closed or saved.cancelled():
                return
            for run in runs:
                if run.state is RunState.RELEASED and run.key not in self._futures:
                    self._futures[run.key] = self._executor.submit(self._run, run)

    def close(self, timeout: float) -> list[ActionOutcome]:
        """Stop (the exporter stops): running commands are stopped, runs not started wait for the restart; a run
        whose command has not ended within ``timeout`` is reported after the restart, as interrupted."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._closed = True  # a save reaching the disk from now on starts nothing
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._commands.close()
        for future in list(self._futures.values()):
            with contextlib.suppress(TimeoutError, CancelledError):  # ends within the grace: its command was stopped
                future.exception(timeout=time_left(deadline))
        with self._lock:
            for key, run in self._runs.items():  # released, never started: they run after the restart
                started = self._futures.get(key)
                if run.state is RunState.RELEASED and (started is None or started.cancelled()):
                    run.state = RunState.QUEUED
            self.state_version += 1
        return self.on_poll((), VMIdentity())

    def _queue(self, transition: Transition, identity: VMIdentity) -> list[ActionOutcome]:
        affects = identity.affects(transition.event.resources)
        refused = []
        for action in self.actions.actions:
            if not action.matches(transition, affects):
                continue
            run = Run(action.name, transition, identity.name)
            with self._lock:
                if run.key in self._runs:
                    continue
                if len(self._runs) >= MAX_RUNS or self._bytes + run.size() > MAX_RUN_BYTES:
                    refused.append(self._skipped(run, f"not run: {len(self._runs)} runs are waiting already"))
                    continue
                self._runs[run.key] = run
                self._bytes += run.size()
                self.state_version += 1
        return refused

    def _restore(self, run: Run) -> None:
        if self.actions.by_name(run.action) is None:
            run.outcome = self._skipped(run, "not run: the action is no longer in the actions file")
            run.state = RunState.FINISHED
        elif run.state is RunState.RELEASED:
            run.outcome = self._outcome(run, ActionResult.FAILED, INTERRUPTED, 0.0)
            run.state = RunState.FINISHED
        self._runs[run.key] = run
        self._bytes += run.size()

    def _run(self, run: Run) -> None:
        try:
            outcome = self._ran(run)
        except Exception as error:  # whatever failed, the run ends and its worker frees
            log.warning("action could not start: %s event_id=%s %s", run.action, run.transition.event.event_id, error)
            outcome = self._outcome(run, ActionResult.FAILED, f"could not start: {error}", 0.0)
        with self._lock:
            run.outcome, run.state = outcome, RunState.FINISHED
            self.state_version += 1

    def _ran(self, run: Run) -> ActionOutcome:
        action = self.actions.by_name(run.action)
        if action is None:  # the file is read once: only a restored run can name an action gone since
            return self._skipped(run, "not run: the action is no longer in the actions file")
        ran = self._command(action, run)
        result = ActionResult.SUCCEEDED if ran.ok else ActionResult.TIMED_OUT if ran.timed_out else ActionResult.FAILED
        return self._outcome(run, result, ran.summary, ran.duration_seconds, ran.last_output)

    def _command(self, action: Action, run: Run) -> CommandResult:
        transition = run.transition
        event = transition.event
        classification = Classification(transition.impact, transition.cause)
        left = event.not_before.timestamp() - self._clock() if event.not_before is not None else None
        extra = {"SE_VM_NAME": run.vm_name or "", "SE_EVENT_TRANSITION": str(transition.kind), "SE_ACTION": run.action}
        with event_file(event_json(event, classification)) as path:
            env = event_environment(
                event,
                extra,
                action.inherit_env,
                base=self._environ,
                platform=self._platform,
                classification=classification,
                seconds_left=left,
                event_file=path,
            )
            about = f"{run.action} event_id={event.event_id} transition={transition.kind}"
            return self._commands.run(action.command, env, action.timeout_seconds, about)

    def _skipped(self, run: Run, summary: str) -> ActionOutcome:
        return self._outcome(run, ActionResult.SKIPPED, summary, 0.0)

    def _outcome(
        self, run: Run, result: ActionResult, summary: str, duration: float, last_output: str = ""
    ) -> ActionOutcome:
        return ActionOutcome(
            run.action, run.transition, run.vm_name, result, summary, duration, self._clock(), last_output
        )
