"""An event as a command sees it: ``SE_EVENT_*`` variables and the whole event in a JSON file.

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
import os
import tempfile
from collections.abc import Iterator, Mapping

from se_exporter.common.times import rfc3339
from se_exporter.imds.document import ScheduledEvent
from se_exporter.imds.impact import Classification, classify
from se_exporter.platform import Platform, current

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
