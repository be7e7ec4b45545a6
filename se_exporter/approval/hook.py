"""The pre-approval hook: one command per event, in the background; approval follows only its exit status 0.

The command runs as ``command.CommandRunner`` runs any operator command (its own process group, a time
limit, its output logged to ``se_exporter.approval``), with the event's ``SE_EVENT_*`` variables and the
whole event in ``SE_EVENT_FILE`` (``process/command.py``), plus ``SE_VM_NAME`` and ``SE_APPROVAL_RULE``.

A hook never runs past the event's NotBefore (Azure starts the event then, approved or not): its
time limit is the smaller of ``timeout_seconds`` and the time left, which it reads in
``SE_EVENT_SECONDS_LEFT``; one still running at NotBefore is stopped and its result is ``expired``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from se_exporter.approval.policy import Hook
from se_exporter.imds.document import ScheduledEvent
from se_exporter.imds.impact import Classification
from se_exporter.platform import Platform, current
from se_exporter.process.command import CommandResult, CommandRunner, event_environment, event_file, event_json

log = logging.getLogger("se_exporter.approval")


class HookSubmitter(Protocol):
    """What the approver needs from a hook runner (tests may wrap the real one)."""

    def submit(
        self,
        event: ScheduledEvent,
        vm_name: str,
        rule: str,
        *,
        classification: Classification | None = None,
        seconds_left: float | None = None,
    ) -> Future[CommandResult]: ...

    def close(self) -> None: ...


class HookRunner:
    """Runs ``hook`` for one event at a time on a background thread; ``submit`` never blocks."""

    def __init__(
        self,
        hook: Hook,
        *,
        kill_grace_seconds: float = 5.0,
        environ: Mapping[str, str] | None = None,
        platform: Platform | None = None,
    ) -> None:
        self._hook = hook
        self._platform = platform or current()
        self._environ = environ
        self._commands = CommandRunner(
            log, "approval hook", kill_grace_seconds=kill_grace_seconds, platform=self._platform
        )
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="se-approval-hook")

    def submit(
        self,
        event: ScheduledEvent,
        vm_name: str,
        rule: str,
        *,
        classification: Classification | None = None,
        seconds_left: float | None = None,
    ) -> Future[CommandResult]:
        """Queue a run; ``seconds_left`` (until NotBefore, on the caller's clock) bounds it, however long it
        waits behind another event's hook."""
        deadline = None if seconds_left is None else time.monotonic() + seconds_left
        return self._executor.submit(self.run, event, vm_name, rule, classification, deadline)

    def close(self) -> None:
        """Cancel queued runs and stop running ones (the exporter is stopping): each process group is asked
        to stop, and whatever still runs after the grace period (a hook that ignores SIGTERM) is killed."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._commands.close()

    def run(
        self,
        event: ScheduledEvent,
        vm_name: str,
        rule: str,
        classification: Classification | None = None,
        deadline: float | None = None,
    ) -> CommandResult:
        """Run the hook synchronously (the worker calls this); ``deadline``: NotBefore on ``time.monotonic``."""
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return CommandResult(
                exit_code=None,
                timed_out=False,
                duration_seconds=0.0,
                expired=True,
                summary="was not started: NotBefore had passed",
            )
        limit = self._hook.timeout_seconds if left is None else min(self._hook.timeout_seconds, left)
        with event_file(event_json(event, classification)) as path:
            env = event_environment(  # the event's variables, this VM's name and the rule that matched
                event,
                {"SE_VM_NAME": vm_name, "SE_APPROVAL_RULE": rule},
                self._hook.inherit_env,
                base=self._environ,
                platform=self._platform,
                classification=classification,
                seconds_left=left,
                event_file=path,
            )
            ran = self._commands.run(self._hook.command, env, limit, f"event_id={event.event_id}")
        result = _hook_result(ran, expired=ran.timed_out and limit < self._hook.timeout_seconds, limit=limit)
        level = logging.INFO if result.ok else logging.WARNING
        log.log(
            level,
            "approval hook %s: event_id=%s duration=%.3fs",
            result.summary,
            event.event_id,
            result.duration_seconds,
        )
        return result


def _hook_result(ran: CommandResult, *, expired: bool, limit: float) -> CommandResult:
    """The run as the approver reads it: ``expired`` when the time limit was NotBefore's."""
    summary = (
        f"was still running at NotBefore ({limit:.1f} s after it started); its processes were stopped"
        if expired
        else ran.summary
    )
    return dataclasses.replace(ran, summary=summary, expired=expired)
