"""The exporter subprocess against a scriptable IMDS on loopback: faults, recovery, pacing, proxies."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import series, value
from tests.support.fake_imds import Answer, FakeIMDS, Seen, document, scheduled_event
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

FAST = ("--poll.interval=250ms", "--imds.timeout=500ms", "--vm.name=vm-a")
REBOOT = scheduled_event("E1", EventSource="Platform")
StartExporter = Callable[..., ExporterProcess]


def metric(exporter: ExporterProcess, name: str, **labels: str) -> float | None:
    return value(exporter.metrics(), name, **labels)


def errors(exporter: ExporterProcess, reason: str) -> float:
    return metric(exporter, "azure_scheduled_events_poll_errors_total", reason=reason) or 0.0


FAULTS = {
    "http_5xx": Answer(status=503, body=b"busy"),
    "throttled": Answer(status=429, body=b"Too many requests"),
    "http_4xx": Answer(status=404, body=b"nope"),
    "invalid_document": Answer(body=b'{"DocumentIncarnation": 2, "Events": [{"EventType": "Reboot"}]}'),
    "timeout": Answer(delay=1.5),
    "connection": Answer(reset=True),
}


@pytest.mark.parametrize("reason", list(FAULTS))
def test_fault_then_recovery(reason: str, fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    healthy = document(1, REBOOT)
    fake_imds.respond = lambda seen: healthy
    exporter = start_exporter(f"--imds.url={fake_imds.url}", *FAST)
    exporter.wait_ready()
    assert metric(exporter, "azure_scheduled_events_imds_up") == 1

    fake_imds.respond = lambda seen: FAULTS[reason]
    wait_for(lambda: errors(exporter, reason) >= 1, 15, f"poll_errors_total{{reason={reason}}}")
    text = exporter.metrics()
    assert value(text, "azure_scheduled_events_imds_up") == 0
    # a failed poll changes no state: the event is still listed
    assert value(text, "azure_scheduled_events_pending", event_type="Reboot", event_status="Scheduled") == 1
    assert exporter.get("/-/ready").status_code == 200  # ready means "has polled once", not "healthy now"

    fake_imds.respond = lambda seen: healthy
    wait_for(lambda: metric(exporter, "azure_scheduled_events_imds_up") == 1, 30, "imds_up back to 1")
    other = {r for r in FAULTS if r != reason}
    assert all(errors(exporter, r) == 0 for r in other), exporter.metrics()
    assert exporter.stop() == 0


def test_400_is_explained_and_not_retried_fast(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    fake_imds.respond = lambda seen: Answer(status=400, body=b'{"error": "Bad request. api-version was not specified"}')
    exporter = start_exporter(f"--imds.url={fake_imds.url}", *FAST)
    exporter.wait_listening()
    wait_for(lambda: errors(exporter, "http_4xx") >= 1, 10, "a 400 counted")
    wait_for(lambda: "Metadata: true" in exporter.logs(), 5, "the 400 explained in the log")
    assert exporter.get("/-/ready").status_code == 503
    count = len(fake_imds.event_requests())
    assert count <= 2, "a 400 must not be retried at the poll interval"
    assert exporter.stop() == 0


def test_slow_first_answer_gets_the_long_first_timeout(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    first = [True]

    def respond(seen: Seen) -> Answer:
        if first[0]:
            first[0] = False
            return Answer(delay=2.0)  # longer than --imds.timeout, as IMDS's first answer may be
        return Answer()

    fake_imds.respond = respond
    exporter = start_exporter(f"--imds.url={fake_imds.url}", *FAST)
    exporter.wait_ready(timeout=20)
    assert errors(exporter, "timeout") == 0


def windows_over_limit(times: list[float], limit: int = 5) -> list[float]:
    """Start times of any 1-second window holding more than ``limit`` requests."""
    return [t for i, t in enumerate(times) if len([u for u in times[i:] if u - t <= 1.0]) > limit]


def test_request_rate_never_exceeds_five_per_second(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    phase = {"n": 0}

    def respond(seen: Seen) -> Answer:  # polls at the fastest pace, with a fault now and then
        phase["n"] += 1
        return FAULTS["http_5xx"] if phase["n"] % 7 == 0 else Answer()

    fake_imds.respond = respond
    exporter = start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--imds.timeout=500ms")
    wait_for(lambda: len(fake_imds.requests) >= 20, 30, "twenty requests")
    exporter.stop()
    times = [s.at for s in fake_imds.requests]
    assert windows_over_limit(times) == []


def test_proxy_variables_are_ignored(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    dead_proxy = "http://127.0.0.1:9"  # discard port: nothing listens, every proxied request would fail
    env = {name: dead_proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy")}
    exporter = start_exporter(f"--imds.url={fake_imds.url}", *FAST, env=env)
    exporter.wait_ready()
    request = fake_imds.event_requests()[0]
    assert request.headers["Metadata"] == "true"
    assert request.path == "/metadata/scheduledevents?api-version=2020-07-01"


def test_compute_metadata_names_this_vm(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    elsewhere = dict(REBOOT, EventId="E2", Resources=["vm-b"])
    fake_imds.respond = lambda seen: document(3, REBOOT, elsewhere)
    exporter = start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=250ms")
    exporter.wait_ready()
    info = series(exporter.metrics(), "azure_scheduled_events_event_info")
    assert {labels["event_id"]: labels["affects_this_vm"] for labels in info} == {"E1": "true", "E2": "false"}


def test_without_compute_metadata_affects_is_unknown(fake_imds: FakeIMDS, start_exporter: StartExporter) -> None:
    fake_imds.respond = lambda seen: document(1, REBOOT)
    fake_imds.compute = Answer(status=404, body=b"not found")
    exporter = start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=250ms")
    exporter.wait_ready()
    assert 'affects_this_vm="unknown"' in exporter.metrics()
    assert "compute metadata unavailable" in exporter.logs()
