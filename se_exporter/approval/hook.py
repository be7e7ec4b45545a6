"""The pre-approval hook: one command per event, in the background, bounded in time and output.

The command is an argument list (never a shell). It gets a minimal environment (so secrets such as
``OTEL_EXPORTER_OTLP_HEADERS`` do not leak into it) plus the event's fields as ``SE_EVENT_*``
variables, runs in its own process group (stopped as a whole on timeout, see ``platform``) and its output is logged line
by line to ``se_exporter.approval``. Approval follows only an exit status of 0.

A hook never runs past the event's NotBefore (Azure starts the event then, approved or not): its
time limit is the smaller of ``timeout_seconds`` and the time left, which it reads in
``SE_EVENT_SECONDS_LEFT``; one still running at NotBefore is stopped and its result is ``expired``.

Each variable is bounded (``MAX_VALUE_CHARS``, cut with a marker: an environment string over 128 KiB
would stop the hook from starting at all); the whole event, uncut, is in the JSON file named by
``SE_EVENT_FILE``, removed when the hook ends.
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
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Protocol

from se_exporter.approval.policy import Hook
from se_exporter.imds.document import ScheduledEvent
from se_exporter.imds.impact import Classification, classify
from se_exporter.platform import Platform, current
from se_exporter.times import rfc3339

log = logging.getLogger("se_exporter.approval")

MAX_LINE_BYTES = 4096
MAX_VALUE_CHARS = 8192  # per SE_EVENT_* value; Linux refuses any one environment string over 128 KiB
CUT_MARKER = "…[cut: the full event is in $SE_EVENT_FILE]"


@dataclass(frozen=True, slots=True)
class HookResult:
    """How one hook run ended."""

    exit_code: int | None  # None when it timed out or could not start; negative: killed by that signal
    timed_out: bool
    duration_seconds: float
    summary: str  # "exited with status 3", "timed out after 300 s; ...", "could not start: ..."
    last_output: str = ""  # the last line it printed (bounded), for the audit record
    expired: bool = False  # stopped (or never started) because the event's NotBefore came

    @property
    def ok(self) -> bool:
        """Approval follows only exit status 0 within the timeout."""
        return self.exit_code == 0 and not self.timed_out


class HookSubmitter(Protocol):
    """What the approver needs from a hook runner (tests may inject a fake)."""

    def submit(
        self, event: ScheduledEvent, vm_name: str, rule: str, *,
        classification: Classification | None = None, seconds_left: float | None = None,
    ) -> Future[HookResult]: ...

    def close(self) -> None: ...


def hook_environment(
    event: ScheduledEvent, vm_name: str, rule: str, inherit: tuple[str, ...] = (), *,
    base: Mapping[str, str] | None = None, platform: Platform | None = None,
    classification: Classification | None = None, seconds_left: float | None = None, event_file: str = "",
) -> dict[str, str]:
    """The platform's base variables passed through when set, ``inherit``, and the event's ``SE_EVENT_*``.

    ``classification`` is the store's (it knows whether the event was first seen Started); without it
    the event is classified as it is now. ``seconds_left`` is the time until NotBefore, if it has one.
    """
    base = os.environ if base is None else base
    platform = platform or current()
    env = {name: base[name] for name in (*platform.hook_base_env, *inherit) if name in base}
    env.setdefault("PATH", platform.default_path)
    impact, cause = classification or classify(event, event.event_status)
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
        "SE_VM_NAME": vm_name,
        "SE_APPROVAL_RULE": rule,
        "SE_EVENT_FILE": event_file,
    }
    env.update({key: _bounded(value.replace("\0", "")) for key, value in fields.items()})  # NUL cannot be in environ
    return env


def event_json(event: ScheduledEvent, classification: Classification | None = None) -> bytes:
    """The whole event, uncut, with IMDS's field names and its impact and cause (the ``SE_EVENT_FILE``)."""
    impact, cause = classification or classify(event, event.event_status)
    return json.dumps({
        "EventId": event.event_id, "EventType": event.event_type, "EventStatus": event.event_status,
        "ResourceType": event.resource_type, "Resources": list(event.resources),
        "NotBefore": rfc3339(event.not_before) if event.not_before else "", "Description": event.description,
        "EventSource": event.event_source, "DurationInSeconds": event.duration_seconds,
        "Impact": impact, "Cause": cause,
    }, ensure_ascii=False).encode()


@contextlib.contextmanager
def _event_file(content: bytes) -> Iterator[str]:
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


class HookRunner:
    """Runs ``hook`` for one event at a time on a background thread; ``submit`` never blocks."""

    def __init__(
        self,
        hook: Hook,
        *,
        max_workers: int = 1,
        kill_grace_seconds: float = 5.0,
        max_logged_lines: int = 200,
        environ: Mapping[str, str] | None = None,
        platform: Platform | None = None,
    ) -> None:
        self._hook = hook
        self._platform = platform or current()
        self._grace = kill_grace_seconds
        self._max_lines = max_logged_lines
        self._environ = environ
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="se-approval-hook")
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()

    def submit(
        self, event: ScheduledEvent, vm_name: str, rule: str, *,
        classification: Classification | None = None, seconds_left: float | None = None,
    ) -> Future[HookResult]:
        """Queue a run; ``seconds_left`` (until NotBefore, on the caller's clock) bounds it, however long it
        waits behind another event's hook."""
        deadline = None if seconds_left is None else time.monotonic() + seconds_left
        return self._executor.submit(self.run, event, vm_name, rule, classification, deadline)

    def close(self) -> None:
        """Cancel queued runs and stop running ones (the exporter is stopping): each process group is asked
        to stop, and whatever still runs after the grace period (a hook that ignores SIGTERM) is killed."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            running = list(self._running)
        for proc in running:
            self._platform.ask_to_stop(proc)
        deadline = time.monotonic() + self._grace
        for proc in running:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._platform.kill(proc)

    def run(
        self, event: ScheduledEvent, vm_name: str, rule: str,
        classification: Classification | None = None, deadline: float | None = None,
    ) -> HookResult:
        """Run the hook synchronously (the worker calls this); ``deadline``: NotBefore on ``time.monotonic``."""
        started = time.monotonic()
        left = None if deadline is None else deadline - started
        if left is not None and left <= 0:
            return HookResult(exit_code=None, timed_out=False, duration_seconds=0.0, expired=True,
                              summary="was not started: NotBefore had passed")
        limit = self._hook.timeout_seconds if left is None else min(self._hook.timeout_seconds, left)
        with _event_file(event_json(event, classification)) as path:
            env = hook_environment(event, vm_name, rule, self._hook.inherit_env, base=self._environ,
                                   platform=self._platform, classification=classification, seconds_left=left,
                                   event_file=path)
            return self._run(event, env, limit, started)

    def _run(self, event: ScheduledEvent, env: dict[str, str], limit: float, started: float) -> HookResult:
        log.info("approval hook starting: event_id=%s command=%s", event.event_id, list(self._hook.command))
        try:
            proc = subprocess.Popen(
                list(self._hook.command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                **self._platform.hook_popen_options(),  # its own process group: a timeout stops its children too
            )
        except (OSError, ValueError) as exc:
            result = HookResult(
                exit_code=None, timed_out=False, duration_seconds=time.monotonic() - started,
                summary=f"could not start: {exc}",
            )  # fmt: skip
            log.warning("approval hook failed: event_id=%s %s", event.event_id, result.summary)
            return result
        with self._lock:
            self._running.add(proc)
        tail: deque[str] = deque(maxlen=1)
        assert proc.stdout is not None
        reader = threading.Thread(
            target=self._pump, args=(proc.stdout, event.event_id, tail), name="se-approval-hook-output", daemon=True
        )
        reader.start()
        timed_out = False
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = self._kill(proc)
        finally:
            with self._lock:
                self._running.discard(proc)
        reader.join(timeout=self._grace)
        if reader.is_alive():  # something it started in the background holds its output: it ends with the hook
            self._platform.kill(proc)
            reader.join(timeout=self._grace)
        expired = timed_out and limit < self._hook.timeout_seconds
        if expired:
            summary = f"was still running at NotBefore ({limit:.1f} s after it started); its processes were stopped"
        elif timed_out:
            summary = f"timed out after {self._hook.timeout_seconds:g} s; its processes were stopped"
        elif code < 0:
            summary = f"killed by signal {-code}"
        else:
            summary = f"exited with status {code}"
        result = HookResult(
            exit_code=None if timed_out else code, timed_out=timed_out,
            duration_seconds=time.monotonic() - started, summary=summary, last_output=tail[0] if tail else "",
            expired=expired,
        )  # fmt: skip
        level = logging.INFO if result.ok else logging.WARNING
        log.log(level, "approval hook %s: event_id=%s duration=%.3fs", summary, event.event_id, result.duration_seconds)
        return result

    def _kill(self, proc: subprocess.Popen[bytes]) -> int:
        """Ask the group to stop, give it ``grace`` seconds to clean up, then kill whatever is left."""
        self._platform.ask_to_stop(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=self._grace)
        self._platform.kill(proc)
        return proc.wait()

    def _pump(self, stream: IO[bytes], event_id: str, tail: deque[str]) -> None:
        lines = 0
        with stream:
            for raw in iter(lambda: stream.readline(MAX_LINE_BYTES), b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                tail.append(line[:200])
                lines += 1
                if lines <= self._max_lines:
                    log.info("approval hook output: event_id=%s %s", event_id, line)
                elif lines == self._max_lines + 1:
                    log.warning("approval hook output: event_id=%s further output not logged", event_id)
