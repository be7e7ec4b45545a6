"""Running an operator's command (the approval hook, an action): bounded in time and output, stopped whole.

The command is an argument list (never a shell) and runs as a tree of its own (``platform``: a process
group, a Job Object on Windows), so a timeout, a stop of the exporter, or a background process it left
holding its output stops its children too: asked first, killed after ``kill_grace_seconds``. No wait is
without a bound: a tree that cannot be killed is reported as such, and the caller goes on. Its output is
logged line by line (at most ``MAX_LOGGED_LINES``, each at most ``MAX_LINE_BYTES``); its last line is kept
for the audit record.

**An event as a command sees it** (``event_environment``, ``event_file``): ``SE_EVENT_*`` variables and the
whole event in a JSON file.

The approval hook and the actions on transitions both run a command for an event: the same variables
(``docs/approval.md``), each bounded (``MAX_VALUE_CHARS``, cut with a marker: an environment string
over 128 KiB would stop the command from starting at all), with the whole event, uncut, in the JSON
file named by ``SE_EVENT_FILE`` (removed when the command ends). The environment is minimal: the
platform's base variables and those the operator names, so secrets such as
``OTEL_EXPORTER_OTLP_HEADERS`` never leak into a command.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from se_exporter.common.times import rfc3339, time_left
from se_exporter.imds.document import ScheduledEvent
from se_exporter.imds.impact import Classification, classify
from se_exporter.platform import Platform, ProcessTree, current

MAX_LINE_BYTES = 4096
MAX_LOGGED_LINES = 200


@dataclass(frozen=True, slots=True)
class CommandResult:
    """How one run (an action's, the approval hook's) ended."""

    exit_code: int | None  # None when it timed out or could not start; negative: killed by that signal
    timed_out: bool
    duration_seconds: float
    summary: str  # "exited with status 3", "timed out after 300 s; ...", "could not start: ..."
    last_output: str = ""  # the last line it printed (bounded), for the audit record
    expired: bool = False  # a hook stopped (or never started) because the event's NotBefore came

    @property
    def ok(self) -> bool:
        """Exit status 0 within the time limit (approval follows only that)."""
        return self.exit_code == 0 and not self.timed_out


class CommandRunner:
    """Runs commands on the caller's thread; ``close`` stops every one still running. Thread-safe."""

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        kill_grace_seconds: float = 5.0,
        platform: Platform | None = None,
    ) -> None:
        self._log = log
        self._what = what  # "approval hook", "action notify-team": how its lines are introduced
        self._platform = platform or current()
        self._grace = kill_grace_seconds
        self._running: dict[subprocess.Popen[bytes], ProcessTree] = {}
        self._closed = False  # set by close: a command started after it is stopped at once
        self._lock = threading.Lock()

    def run(self, command: Sequence[str], env: Mapping[str, str], limit: float, about: str) -> CommandResult:
        """Run ``command`` to its end or ``limit`` seconds; ``about`` names what it runs for in the log."""
        started = time.monotonic()
        self._log.info("%s starting: %s command=%s", self._what, about, list(command))
        try:
            proc = subprocess.Popen(
                list(command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=dict(env),
                **self._platform.hook_popen_options(),
            )
        except (OSError, ValueError) as exc:
            self._log.warning("%s could not start: %s %s", self._what, about, exc)
            return CommandResult(None, False, time.monotonic() - started, f"could not start: {exc}")
        tree = self._platform.track(proc)
        with self._lock:
            self._running[proc] = tree
            closed = self._closed
        tail: deque[str] = deque(maxlen=1)
        if proc.stdout is None:  # stdout=PIPE always gives one: mypy cannot know
            raise RuntimeError("a command started with stdout=PIPE has no stdout")
        reader = threading.Thread(
            target=self._pump, args=(proc.stdout, about, tail), name="se-command-output", daemon=True
        )
        reader.start()
        timed_out = False
        code: int | None
        try:
            # close ran while this one started and could not see it: stopped now, as close stops the others.
            code = self._stop(proc, tree) if closed else proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = self._stop(proc, tree)
        finally:
            with self._lock:
                self._running.pop(proc, None)
        reader.join(timeout=self._grace)
        if reader.is_alive():  # something it started in the background holds its output: it ends with it
            tree.kill()
            reader.join(timeout=self._grace)
        left = tree.remaining()
        tree.close()
        summary = _summary(code, limit if timed_out else None, left)
        if closed and code is None:
            summary = "stopped as the exporter stopped; it could not be stopped and may still run"
        return CommandResult(
            None if timed_out else code, timed_out, time.monotonic() - started, summary, tail[0] if tail else ""
        )

    def close(self) -> None:
        """Stop every command still running (the exporter is stopping): asked, then killed after the grace."""
        with self._lock:
            self._closed = True
            running = list(self._running.items())
        for _, tree in running:
            tree.ask_to_stop()
        deadline = time.monotonic() + self._grace
        for proc, tree in running:
            try:
                proc.wait(timeout=time_left(deadline))
            except subprocess.TimeoutExpired:
                tree.kill()

    def _stop(self, proc: subprocess.Popen[bytes], tree: ProcessTree) -> int | None:
        """Ask the tree to stop, give it ``grace`` seconds to clean up, then kill whatever is left; the
        command's exit code, or None if it still runs ``grace`` seconds after the kill."""
        tree.ask_to_stop()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=self._grace)
        tree.kill()
        try:
            return proc.wait(timeout=self._grace)
        except subprocess.TimeoutExpired:
            return None

    def _pump(self, stream: IO[bytes], about: str, tail: deque[str]) -> None:
        lines = 0
        with stream:
            for raw in iter(lambda: stream.readline(MAX_LINE_BYTES), b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                tail.append(line[:200])
                lines += 1
                if lines <= MAX_LOGGED_LINES:
                    self._log.info("%s output: %s %s", self._what, about, line)
                elif lines == MAX_LOGGED_LINES + 1:
                    self._log.warning("%s output: %s further output not logged", self._what, about)


def _summary(code: int | None, timed_out_after: float | None, left: bool | None) -> str:
    """How a run ended, in the words of the log and the audit record: what was stopped, and what was not."""
    if timed_out_after is None:
        return f"killed by signal {-code}" if code is not None and code < 0 else f"exited with status {code}"
    head = f"timed out after {timed_out_after:g} s"
    if code is None:
        return f"{head}; it could not be stopped and may still run"
    if left:
        return f"{head}; it was stopped, but processes it started still run"
    if left is None:
        return f"{head}; it was stopped (whether processes it started still run cannot be told here)"
    return f"{head}; its processes were stopped"


MAX_VALUE_CHARS = 8192  # per SE_EVENT_* value; Linux refuses any one environment string over 128 KiB

CUT_MARKER = "…[cut: the full event is in $SE_EVENT_FILE]"


def event_environment(
    event: ScheduledEvent,
    extra: Mapping[str, str],
    inherit: tuple[str, ...] = (),
    *,
    base: Mapping[str, str] | None = None,
    platform: Platform | None = None,
    classification: Classification | None = None,
    seconds_left: float | None = None,
    event_file: str = "",
) -> dict[str, str]:
    """The platform's base variables passed through when set, ``inherit``, the event's ``SE_EVENT_*``, and
    ``extra`` (``SE_VM_NAME``, ``SE_APPROVAL_RULE``, ``SE_EVENT_TRANSITION``…), each bounded.

    ``classification`` is the store's (it knows whether the event was first seen Started); without it
    the event is classified as it is now. ``seconds_left`` is the time until NotBefore, if it has one.
    """
    base = os.environ if base is None else base
    platform = platform or current()
    env = {name: base[name] for name in (*platform.hook_base_env, *inherit) if name in base}
    env.setdefault("PATH", platform.default_path)
    impact, cause = classification or classify(event)
    fields = {
        "SE_EVENT_ID": event.event_id,
        "SE_EVENT_TYPE": event.event_type,
        "SE_EVENT_STATUS": event.event_status,
        "SE_EVENT_SOURCE": event.event_source,
        "SE_EVENT_NOT_BEFORE": rfc3339(event.not_before) if event.not_before else "",
        "SE_EVENT_DURATION_SECONDS": str(event.duration_seconds),
        "SE_EVENT_RESOURCES": json.dumps(list(event.resources), ensure_ascii=False),  # names may hold commas
        "SE_EVENT_RESOURCE_TYPE": event.resource_type,
        "SE_EVENT_DESCRIPTION": event.description,
        "SE_EVENT_IMPACT": impact,
        "SE_EVENT_CAUSE": cause,
        "SE_EVENT_SECONDS_LEFT": "" if seconds_left is None else str(max(0, int(seconds_left))),
        "SE_EVENT_FILE": event_file,
        **extra,
    }
    env.update({key: _bounded(value.replace("\0", "")) for key, value in fields.items()})  # NUL cannot be in environ
    return env


def event_json(event: ScheduledEvent, classification: Classification | None = None) -> bytes:
    """The whole event, uncut, with IMDS's field names and its impact and cause (the ``SE_EVENT_FILE``)."""
    impact, cause = classification or classify(event)
    return json.dumps(
        {
            "EventId": event.event_id,
            "EventType": event.event_type,
            "EventStatus": event.event_status,
            "ResourceType": event.resource_type,
            "Resources": list(event.resources),
            "NotBefore": rfc3339(event.not_before) if event.not_before else "",
            "Description": event.description,
            "EventSource": event.event_source,
            "DurationInSeconds": event.duration_seconds,
            "Impact": impact,
            "Cause": cause,
        },
        ensure_ascii=False,
    ).encode()


@contextlib.contextmanager
def event_file(content: bytes) -> Iterator[str]:
    """A private temporary file holding ``content``, removed afterwards (mkstemp makes it 0600)."""
    handle, path = tempfile.mkstemp(prefix="se-event-", suffix=".json")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(content)
        yield path
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _bounded(value: str) -> str:
    return value if len(value) <= MAX_VALUE_CHARS else value[: MAX_VALUE_CHARS - len(CUT_MARKER)] + CUT_MARKER
