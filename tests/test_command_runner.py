"""The command runner that hooks and actions share: a close that comes while a command is starting stops it.

Found by the full suite beside a CPU hog: SIGTERM landed 4 ms after the approval hook started; the runner's
close ran before the new process was registered, saw nothing to stop, and the exporter waited on a hook
that ignores SIGTERM for its 300 s timeout instead of stopping within seconds."""

from __future__ import annotations

import logging
import os
import signal

import pytest

from se_exporter.process.command import CommandRunner

pytestmark = pytest.mark.posix

IGNORES_SIGTERM = ["/bin/sh", "-c", "trap '' TERM; sleep 100 & wait"]


@pytest.mark.timeout(60)  # without the fix it waits for the 300 s limit: the timeout fails it
def test_a_command_that_starts_after_close_is_stopped_at_once_not_left_to_its_limit() -> None:
    runner = CommandRunner(logging.getLogger("se_exporter.test"), "approval hook", kill_grace_seconds=0.5)
    runner.close()  # what SIGTERM does while the command is starting: close cannot see it yet
    result = runner.run(IGNORES_SIGTERM, dict(os.environ), limit=300, about="event_id=E1")
    # SIGTERM if it came before the shell's trap, else SIGKILL after the grace: stopped either way, not timed out.
    assert result.exit_code in (-signal.SIGTERM, -signal.SIGKILL) and not result.timed_out
    assert result.summary == f"killed by signal {-result.exit_code}"


def test_a_command_running_at_close_is_asked_then_killed() -> None:
    runner = CommandRunner(logging.getLogger("se_exporter.test"), "approval hook", kill_grace_seconds=0.5)
    result = runner.run(["/bin/sh", "-c", "exit 3"], dict(os.environ), limit=30, about="event_id=E2")
    assert (result.exit_code, result.summary) == (3, "exited with status 3")
