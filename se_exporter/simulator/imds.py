"""IMDS request rules and response bodies, as pure functions (no sockets here).

Field availability by ``api-version`` of ``/metadata/scheduledevents``:

- ``>= 2020-07-01``: every field (Description, EventSource, DurationInSeconds included)
- ``2019-08-01 <= v < 2020-07-01``: no Description, no DurationInSeconds
- ``< 2019-08-01``: also no EventSource

Any well-formed ``YYYY-MM-DD`` version from 2017-03-01 on is accepted (newer unknown versions
get every field); anything else is a 400 like IMDS's "api-version is invalid".
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Mapping
from email.message import Message
from http import HTTPStatus
from typing import Any

from se_exporter.simulator.clock import Clock, format_rfc1123
from se_exporter.simulator.model import SimEvent, Snapshot

OLDEST_VERSION = "2017-03-01"
NEWEST_VERSIONS = ("2020-07-01", "2019-08-01", "2019-04-01")
_VERSION_RE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MORE = "For more information refer to aka.ms/azureimds"


class ImdsError(Exception):
    """A request IMDS refuses: ``status`` and the JSON body it answers."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(f"{status} {body}")
        self.status = status
        self.body = body


def error_body(status: int) -> dict[str, Any]:
    """The generic body for an HTTP error code (used for injected faults, 404, 405)."""
    try:
        return {"error": HTTPStatus(status).phrase}
    except ValueError:
        return {"error": f"HTTP {status}"}


def check_request(headers: Message[str, str] | Mapping[str, str], query: Mapping[str, list[str]]) -> str:
    """Validate an IMDS request as IMDS does; return the api-version or raise :class:`ImdsError`.

    ``headers`` must look names up case-insensitively (``http.client.HTTPMessage`` does).
    """
    if headers.get("X-Forwarded-For") is not None:
        # IMDS only answers unproxied requests.
        raise ImdsError(400, {"error": "Bad request. Requests with X-Forwarded-For header are not allowed"})
    if (headers.get("Metadata") or "").strip().lower() != "true":
        raise ImdsError(400, {"error": "Bad request. Required metadata header not specified"})
    versions = query.get("api-version")
    if not versions or not versions[0]:
        raise ImdsError(400, _version_error("api-version was not specified in the request"))
    version = versions[0]
    if not _VERSION_RE.fullmatch(version) or version < OLDEST_VERSION:
        raise ImdsError(400, _version_error("api-version is invalid or was not specified in the request"))
    return version


def invalid_version_body() -> dict[str, Any]:
    """IMDS's answer (with a 400) to an api-version it does not serve."""
    return _version_error("api-version is invalid or was not specified in the request")


def _version_error(what: str) -> dict[str, Any]:
    return {"error": f"Bad request. {what}. {_MORE}", "newest-versions": list(NEWEST_VERSIONS)}


def render_scheduled_events(snapshot: Snapshot, api_version: str, clock: Clock) -> dict[str, Any]:
    """The scheduled-events document for one api-version (NotBefore on the real clock)."""
    return {
        "DocumentIncarnation": snapshot.incarnation,
        "Events": [_render_event(e, api_version, clock) for e in snapshot.events if _listed_in(e, api_version)],
    }


# Azure's version table: Preempt from 2017-11-01, Terminate from 2019-01-01; an older version lists neither.
_TYPE_SINCE = {"Preempt": "2017-11-01", "Terminate": "2019-01-01"}


def _listed_in(event: SimEvent, api_version: str) -> bool:
    return api_version >= _TYPE_SINCE.get(event.plan.event_type, "")


def _render_event(event: SimEvent, api_version: str, clock: Clock) -> dict[str, Any]:
    plan = event.plan
    not_before = "" if event.not_before is None else format_rfc1123(clock.to_real_time(event.not_before))
    doc: dict[str, Any] = {
        "EventId": event.event_id,
        "EventStatus": event.status,
        "EventType": plan.event_type,
        "ResourceType": plan.resource_type,
        # Before 2017-08-01 an IaaS VM's resource name carried a leading underscore (Azure's version table).
        "Resources": [f"_{name}" if api_version < "2017-08-01" else name for name in event.resources],
        "NotBefore": not_before,
    }
    if api_version >= "2019-04-01":
        doc["Description"] = plan.description
    if api_version >= "2019-08-01":
        doc["EventSource"] = plan.event_source
    if api_version >= "2020-07-01":
        doc["DurationInSeconds"] = plan.duration
    return doc


def parse_start_requests(body: bytes) -> list[str]:
    """EventIds of an approval body ``{"StartRequests": [{"EventId": "..."}, ...]}``; 400 otherwise."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ImdsError(400, {"error": "Bad request. Request body is not valid JSON"}) from None
    requests = data.get("StartRequests") if isinstance(data, dict) else None
    if not isinstance(requests, list):
        raise ImdsError(400, {"error": "Bad request. StartRequests must be a list"})
    ids = []
    for item in requests:
        event_id = item.get("EventId") if isinstance(item, dict) else None
        if not isinstance(event_id, str) or not event_id:
            raise ImdsError(400, {"error": "Bad request. Each StartRequest needs an EventId string"})
        ids.append(event_id)
    return ids


@functools.lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """256 MiB of zeros, gzip-compressed to about 256 kB (made once, on first use)."""
    return gzip.compress(b"\0" * (256 << 20), compresslevel=9)


def malformed_body(document: dict[str, Any], variant: str) -> tuple[bytes, str]:
    """A broken version of ``document`` for fault injection: (body, content type). The ``gzip_bomb``
    body must be sent with ``Content-Encoding: gzip``."""
    if variant == "gzip_bomb":
        return gzip_bomb(), "application/json; charset=utf-8"
    if variant == "not_json":
        return b"<html><body>Proxy error</body></html>", "text/html"
    if variant == "empty":
        return b"", "application/json; charset=utf-8"
    if variant in ("too_many_events", "too_many_resources"):  # valid JSON, under 4 MiB, beyond what is held
        return _overgrown(document, variant), "application/json; charset=utf-8"
    text = json.dumps(document)
    if variant == "truncated":
        return text[: max(1, len(text) // 2)].encode(), "application/json; charset=utf-8"
    broken = json.loads(text)  # deep copy
    if variant == "wrong_types":
        _wrong_types(broken)
    elif variant == "missing_event_id":
        _drop_event_ids(broken)
    return json.dumps(broken).encode(), "application/json; charset=utf-8"


def _overgrown(document: dict[str, Any], variant: str) -> bytes:
    """The document with 25,000 small events more, or one event listing 500,000 Resources: both once held
    valid, and both exhausted the DaemonSet's 96 MiB (a real IMDS lists a few, for a few hundred VMs)."""
    incarnation = document.get("DocumentIncarnation", 1)
    events: list[dict[str, object]]
    if variant == "too_many_events":
        events = [{"EventId": f"X{n}", "EventType": "Freeze", "EventStatus": "Scheduled"} for n in range(25_000)]
    else:
        events = [{"EventId": "X0", "EventType": "Freeze", "EventStatus": "Scheduled", "Resources": ["r"] * 500_000}]
    return json.dumps({"DocumentIncarnation": incarnation, "Events": events}).encode()


def _wrong_types(doc: dict[str, Any]) -> None:
    if "DocumentIncarnation" not in doc:  # compute metadata: names become numbers
        doc.update({k: 42 for k, v in doc.items() if isinstance(v, str)})
        return
    doc["DocumentIncarnation"] = str(doc["DocumentIncarnation"])
    if not doc["Events"]:
        doc["Events"] = {}
    for event in doc["Events"]:
        event["Resources"] = ",".join(event["Resources"])
        if "DurationInSeconds" in event:
            event["DurationInSeconds"] = str(event["DurationInSeconds"])


def _drop_event_ids(doc: dict[str, Any]) -> None:
    events = doc.get("Events")
    if not isinstance(events, list):
        return
    if not events:  # make the fault visible even with nothing scheduled
        events.append(
            {
                "EventType": "Reboot",
                "EventStatus": "Scheduled",
                "ResourceType": "VirtualMachine",
                "Resources": [],
                "NotBefore": "",
            }
        )
    for event in events:
        event.pop("EventId", None)
