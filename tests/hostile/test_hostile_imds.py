"""Hostile IMDS answers over real HTTP: bounded reads, clear errors, no crash, nothing lost.

Each test serves one or more hostile answers from a scriptable IMDS, then a good document, and checks
that the exporter said clearly what was wrong, kept running, kept its memory small, and then handled
the good document normally. Bodies are generated here; the label-breaking EventIds are kept in
``tests/testdata/hostile/event_ids.json`` so that other tests (and people) can reuse them.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from se_exporter.imds.client import MAX_BODY_BYTES
from se_exporter.imds.document import MAX_EVENTS
from se_exporter.metrics.counters import label as _label
from tests.otlp import OTLPHttpReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import Answer, FakeIMDS, Seen, document
from tests.support.tools import require
from tests.support.wait import wait_for

pytestmark = [pytest.mark.debian, pytest.mark.posix]

StartExporter = Callable[..., ExporterProcess]
DATA = Path(__file__).resolve().parents[1] / "testdata" / "hostile"
HOSTILE_IDS: list[str] = json.loads((DATA / "event_ids.json").read_text(encoding="utf-8"))["event_ids"]
ERRORS = "azure_scheduled_events_poll_errors_total"
MAX_RSS_KB = 150 * 1024  # the exporter idles at ~50 MiB; holding a 50 MB body would show


def event(event_id: str = "E1", **fields: Any) -> dict[str, Any]:
    base = {
        "EventId": event_id,
        "EventType": "Freeze",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a"],
        "EventStatus": "Scheduled",
        "NotBefore": "Mon, 11 Apr 2099 22:26:58 GMT",
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": 5,
    }
    return {**base, **fields}


class Script:
    """Serves the given answers in order, then ``then`` for ever (thread-safe)."""

    def __init__(self, answers: Iterable[Answer], then: Answer) -> None:
        self._answers = list(answers)
        self._then = then
        self._lock = threading.Lock()
        self.served = 0

    def __call__(self, seen: Seen) -> Answer:
        with self._lock:
            self.served += 1
            return self._answers.pop(0) if self._answers else self._then


def rss_kb(exporter: ExporterProcess) -> int:
    for line in Path(f"/proc/{exporter.proc.pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def transitions(exporter: ExporterProcess) -> list[dict[str, Any]]:
    """The exporter's JSON transition lines (``--log.format=json``)."""
    lines = []
    for line in exporter.logs().split("\n"):  # not splitlines(): U+2028 in an EventId is not a line break
        if line.startswith("{") and '"event": "scheduled_event.transition"' in line:
            lines.append(json.loads(line))
    return lines


def start(
    start_exporter: StartExporter,
    fake: FakeIMDS,
    *args: str,
    env: dict[str, str] | None = None,
    log_format: str = "json",
) -> ExporterProcess:
    return start_exporter(
        f"--imds.url={fake.url}",
        "--poll.interval=250ms",
        "--vm.name=vm-a",
        f"--log.format={log_format}",
        *args,
        env=env,
    )


def promtool_check(text: str) -> None:
    tool = require("promtool")
    result = subprocess.run([tool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()[:2000]


HUGE = 50 * 1024 * 1024
HOSTILE_BODIES: dict[str, tuple[Callable[[], Answer], str, str]] = {
    # name: (answer, poll error reason, words the log must say)
    "50MB-document": (
        lambda: Answer(body=b'{"DocumentIncarnation": 1, "Events": [], "x": "' + b"x" * HUGE + b'"}'),
        "invalid_document",
        f"exceeds {MAX_BODY_BYTES} bytes",
    ),
    "50MB-error-page": (lambda: Answer(status=503, body=b"<html>" + b"x" * HUGE), "http_5xx", "answered 503"),
    "nested-100k-arrays": (
        lambda: Answer(body=b"[" * 100_000 + b"]" * 100_000),
        "invalid_document",
        "not a Scheduled Events document",
    ),
    "nested-100k-objects": (
        lambda: Answer(body=b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
        "invalid_document",
        "not JSON",
    ),
    "not-utf8": (
        lambda: Answer(body=b'{"DocumentIncarnation": 1, "Events": [{"EventId": "\xff\xfe\xc3\x28"}]}'),
        "invalid_document",
        "not JSON",
    ),
    "lone-surrogate": (
        lambda: Answer(
            body=b'{"DocumentIncarnation": 1, "Events": [{"EventId": "E\\ud800", '
            b'"EventType": "Freeze", "EventStatus": "Scheduled"}]}'
        ),
        "invalid_document",
        "not valid Unicode",
    ),
    "binary-garbage": (lambda: Answer(body=bytes(range(256)) * 64), "invalid_document", "not JSON"),
    "false-gzip": (
        lambda: Answer(body=b"{}" * 100, headers={"Content-Encoding": "gzip"}),
        "invalid_document",
        "cannot be decoded (Content-Encoding: gzip)",
    ),
    "false-gzip-error-page": (
        lambda: Answer(status=503, body=b"oops", headers={"Content-Encoding": "gzip"}),
        "http_5xx",
        "answered 503",
    ),
    "date-overflow": (
        lambda: document(1, event(NotBefore="9999-12-31T23:59:59-01:00")),
        "invalid_document",
        "NotBefore",
    ),
    # 10**400 once made every scrape answer 500 (OverflowError) until a normal document came.
    "huge-incarnation": (
        lambda: Answer(body=b'{"DocumentIncarnation": 1' + b"0" * 400 + b', "Events": []}'),
        "invalid_document",
        "at `$.DocumentIncarnation`",
    ),
    "huge-duration": (
        lambda: Answer(
            body=json.dumps({"DocumentIncarnation": 1, "Events": [event(DurationInSeconds=10**400)]}).encode()
        ),
        "invalid_document",
        "at `$.Events[0].DurationInSeconds`",
    ),
    "huge-event-id": (lambda: document(1, event("E" * 100_000)), "invalid_document", "EventId"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_hostile_answer_then_good_document(name: str, fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    make, reason, words = HOSTILE_BODIES[name]
    fake_imds.respond = Script([make(), make()], then=document(7, event("GOOD")))
    exporter = start(start_exporter, fake_imds)
    wait_for(
        lambda: [t["scheduled_event.id"] for t in transitions(exporter)] == ["GOOD"],
        30,
        "the good document handled after the hostile ones",
    )
    text = exporter.metrics()
    assert value(text, ERRORS, reason=reason) == 2, f"both hostile answers counted as {reason}"
    assert value(text, "azure_scheduled_events_document_incarnation") == 7
    assert value(text, "azure_scheduled_events_imds_up") == 1
    assert rss_kb(exporter) < MAX_RSS_KB, f"RSS {rss_kb(exporter)} kB after a {name} answer"
    logs = exporter.logs()
    assert words in logs, f"the log should say {words!r}:\n{logs[-2000:]}"
    assert "Traceback" not in logs
    assert exporter.stop() == 0


def test_megabyte_description_and_resources_intact_in_logs_bounded_in_labels(
    fake_imds: FakeIMDS, start_exporter: StartExporter, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    description = "".join(f'{i:07d} "quoted" \\ line\n' for i in range(40_000))[:1_000_000]
    long_vm = "vm-" + "r" * 100_000
    resources = ["vm-a", long_vm]
    hostile = event(
        "LONG-1", Description=description, Resources=resources, EventSource="S" * 5000, EventType="Live" + "M" * 1000
    )
    assert len(json.dumps({"DocumentIncarnation": 1, "Events": [hostile]})) < MAX_BODY_BYTES
    fake_imds.respond = lambda seen: document(1, hostile)
    exporter = start(start_exporter, fake_imds, env={**otlp_http_receiver.env, "OTEL_SDK_DISABLED": "false"})
    wait_for(lambda: transitions(exporter), 30, "scheduled logged")
    line = transitions(exporter)[0]
    assert line["scheduled_event.description"] == description, "stderr carries the description intact"
    assert line["scheduled_event.resources"] == resources
    logs = otlp_http_receiver.wait_for_logs(event_name="scheduled_event.transition", timeout=30)
    assert logs[0]["scheduled_event.description"] == description, "OTLP carries the description intact"
    assert list(logs[0]["scheduled_event.resources"]) == resources  # type: ignore[arg-type]
    text = exporter.metrics()
    assert len(text) < 64_000, f"exposition of one event is {len(text)} bytes"
    assert "r" * 200 not in text and "M" * 200 not in text and "S" * 200 not in text
    info = [
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "azure_scheduled_events_event_info"
    ]
    assert len(info) == 1 and info[0].labels["affects_this_vm"] == "true"
    assert info[0].labels["event_source"] == _label("S" * 5000)
    promtool_check(text)


@pytest.mark.parametrize("log_format", ["json", "logfmt"])
def test_label_breaking_event_ids(log_format: str, fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    events = [
        event(event_id, EventType=('Live"Migration\n}' if i == 0 else "Reboot"))
        for i, event_id in enumerate(HOSTILE_IDS)
    ]
    fake_imds.respond = Script([], then=document(1, *events))
    exporter = start(start_exporter, fake_imds, log_format=log_format)
    wait_for(lambda: len(logged_ids(exporter, log_format)) == len(HOSTILE_IDS), 30, "every event logged")
    assert sorted(logged_ids(exporter, log_format)) == sorted(HOSTILE_IDS), "logged with the exact EventId"
    text = exporter.metrics()
    promtool_check(text)
    info = [
        s.labels["event_id"]
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "azure_scheduled_events_event_info"
    ]
    assert sorted(info) == sorted(_label(i) for i in HOSTILE_IDS), "label values escaped and read back exactly"
    assert len(set(info)) == len(HOSTILE_IDS), "two long EventIds with one prefix are still two series"
    fake_imds.respond = Script([], then=document(2))
    wait_for(lambda: len(logged_ids(exporter, log_format)) == 2 * len(HOSTILE_IDS), 30, "every event cancelled")
    assert exporter.stop() == 0


_LOGFMT_ID = re.compile(r'scheduled_event\.id=("(?:[^"\\]|\\.)*"|\S+)')


def logged_ids(exporter: ExporterProcess, log_format: str) -> list[str]:
    if log_format == "json":
        return [str(t["scheduled_event.id"]) for t in transitions(exporter)]
    ids = []
    for line in exporter.logs().split("\n"):
        if "event=scheduled_event.transition" in line and (match := _LOGFMT_ID.search(line)):
            raw = match.group(1)
            ids.append(json.loads(raw) if raw.startswith('"') else raw)
    return ids


def test_the_most_events_a_document_may_list(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    events = [
        event(
            f"{i:08d}-1111-4222-8333-444455556666",
            EventType=("Freeze", "Reboot", "Redeploy")[i % 3],
            EventStatus=("Scheduled", "Started")[i % 2],
            NotBefore="" if i % 2 else event()["NotBefore"],
        )
        for i in range(MAX_EVENTS)
    ]
    fake_imds.respond = Script([], then=document(1, *events))
    exporter = start(start_exporter, fake_imds)
    wait_for(lambda: len(transitions(exporter)) == MAX_EVENTS, 60, f"{MAX_EVENTS} transitions logged")
    began = time.monotonic()
    for _ in range(3):
        text = exporter.metrics()
    scrape = (time.monotonic() - began) / 3
    assert scrape < 2.0, f"a scrape of {MAX_EVENTS} events took {scrape:.2f} s"
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert len(families["azure_scheduled_events_event_info"].samples) == MAX_EVENTS, "every event listed"
    assert sum(s.value for s in families["azure_scheduled_events_pending"].samples) == MAX_EVENTS
    promtool_check(text)
    fake_imds.respond = Script([], then=document(2))
    wait_for(lambda: len(transitions(exporter)) == 2 * MAX_EVENTS, 60, "every removal logged")
    kinds = [t["scheduled_event.transition"] for t in transitions(exporter)]
    assert kinds.count("cancelled") == MAX_EVENTS // 2 and kinds.count("completed") == MAX_EVENTS // 2
    assert exporter.stop() == 0


# ----- slow drip, gzip bomb: bounded in time and in memory (issue 17, points 2 and 3) ----------------


def test_a_dripping_answer_is_a_timeout_and_polling_goes_on(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    """A 200 that drips one byte every 0.3 s once held a poll for ever while imds_up stayed 1."""
    drip = Answer(body=json.dumps({"DocumentIncarnation": 2, "Events": [event("SLOW")]}).encode(), drip=0.3)
    fake_imds.respond = Script([document(1), drip], then=document(3, event("AFTER")))
    exporter = start(start_exporter, fake_imds)
    wait_for(
        lambda: [t["scheduled_event.id"] for t in transitions(exporter)] == ["AFTER"],
        30,
        "the document after the dripping one",
    )
    text = exporter.metrics()
    assert value(text, ERRORS, reason="timeout") == 1
    assert "did not arrive in time (a slow or dripping peer)" in exporter.logs()
    assert exporter.stop() == 0


def test_a_stop_during_a_dripping_first_answer_takes_seconds(
    fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    """The first call may take 2 minutes by Microsoft's documentation; a service stop must not wait that long."""
    fake_imds.respond = lambda seen: Answer(body=b" " * 1000 + b'{"DocumentIncarnation": 1, "Events": []}', drip=0.2)
    exporter = start(start_exporter, fake_imds)
    exporter.wait_listening()
    wait_for(lambda: fake_imds.event_requests(), 10, "the first poll to be under way")
    began = time.monotonic()
    assert exporter.stop(timeout=10) == 0
    assert time.monotonic() - began < 10, "SIGTERM honoured within seconds, not at the first call's 2 minutes"
    assert "stopped while waiting on IMDS" in exporter.logs()


def test_a_gzip_bomb_is_an_invalid_document_and_memory_stays_small(
    fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    bomb = gzip.compress(b"{" + b" " * (1 << 30), compresslevel=9)  # 1 GiB decoded, about 1 MB on the wire
    fake_imds.respond = Script(
        [Answer(body=bomb, headers={"Content-Encoding": "gzip"})] * 2, then=document(7, event("GOOD"))
    )
    exporter = start(start_exporter, fake_imds)
    wait_for(
        lambda: [t["scheduled_event.id"] for t in transitions(exporter)] == ["GOOD"],
        30,
        "the good document after the bombs",
    )
    assert value(exporter.metrics(), ERRORS, reason="invalid_document") == 2
    assert f"exceeds {MAX_BODY_BYTES} bytes (decoded)" in exporter.logs()
    assert rss_kb(exporter) < 96 * 1024, "within the DaemonSet's 96 MiB limit"
    assert exporter.stop() == 0
