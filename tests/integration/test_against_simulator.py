"""The exporter subprocess against the IMDS simulator: lifecycles match the simulator's ground truth."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator

import httpx
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from se_exporter.simulator import EventPlan, SimClock, SimulatorServer, SimWorld
from se_exporter.simulator.imds import invalid_version_body
from se_exporter.simulator.model import SimulatedVM
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import samples, series, value
from tests.support.tools import require
from tests.support.wait import wait_for

pytestmark = [pytest.mark.debian, pytest.mark.posix]

StartExporter = Callable[..., ExporterProcess]
T = "azure_scheduled_events_transitions_total"


@pytest.fixture
def world() -> SimWorld:
    return SimWorld(vm=SimulatedVM(name="sim-vm-0"), clock=SimClock(1.0))


@pytest.fixture
def imds(world: SimWorld) -> Iterator[str]:
    """The simulator serving ``world`` on loopback: the URL to give ``--imds.url``."""
    with SimulatorServer(world) as server:
        yield server.url


def logged(exporter: ExporterProcess) -> list[tuple[str, str]]:
    """(transition, event_id) pairs from the exporter's transition lines (``--log.format=json``), in order."""
    lines = [json.loads(line) for line in exporter.logs().splitlines() if line.startswith("{")]
    return [
        (line["scheduled_event.transition"], line["scheduled_event.id"])
        for line in lines
        if line.get("event") == "scheduled_event.transition"
    ]


def reports(exporter: ExporterProcess, expected: list[tuple[str, str]]) -> bool:
    return logged(exporter) == expected


def truth_transitions(world: SimWorld) -> list[tuple[str, str]]:
    """What the exporter must report, derived from the simulator's record of its own changes."""
    expected: list[tuple[str, str]] = []
    status: dict[str, str | None] = {}
    for change in world.truth.changes():
        if change.event_id is None:  # an incarnation reset names no event
            continue
        if change.kind == "appeared":
            expected.append(("scheduled" if change.status == "Scheduled" else "started", change.event_id))
        elif change.kind == "started":
            expected.append(("started", change.event_id))
        elif change.kind == "rescheduled":
            expected.append(("rescheduled", change.event_id))
        elif change.kind == "removed":
            expected.append(("completed" if status[change.event_id] == "Started" else "cancelled", change.event_id))
        status[change.event_id] = change.status or status.get(change.event_id)
    return expected


def test_lifecycles_match_ground_truth(world: SimWorld, imds: str, start_exporter: StartExporter) -> None:
    exporter = start_exporter(
        f"--imds.url={imds}",
        "--poll.interval=250ms",
        "--log.format=json",
    )
    exporter.wait_ready()
    freeze = world.add_event(EventPlan("Freeze", notice=900, duration=5, started_for=3600))
    failure = world.add_event(EventPlan("Reboot", notice=None, started_for=3600))
    moved = world.add_event(EventPlan("Redeploy", notice=600))
    dropped = world.add_event(EventPlan("Terminate", notice=300, resources=("other-vm",)))
    wait_for(lambda: len(logged(exporter)) == 4, 10, "four first sightings")

    text = exporter.metrics()
    info = {s["event_id"]: s for s in series(text, "azure_scheduled_events_event_info")}
    assert info[freeze]["affects_this_vm"] == "true" and info[dropped]["affects_this_vm"] == "false"
    assert info[failure]["event_status"] == "Started"
    until = value(text, "azure_scheduled_events_event_seconds_until_not_before", event_id=freeze, event_type="Freeze")
    assert until is not None and 880 < until <= 900

    steps: list[Callable[[], object]] = [
        lambda: world.start_event(freeze),
        lambda: world.reschedule(moved, 1800),
        lambda: world.cancel_event(dropped),
        lambda: world.complete_event(failure),
        lambda: world.complete_event(freeze),
    ]
    for step in steps:
        step()
        expected = truth_transitions(world)
        wait_for(functools.partial(reports, exporter, expected), 10, f"exporter to report {expected[-1]}")

    text = exporter.metrics()
    assert value(text, T, event_type="Freeze", transition="completed") == 1
    assert value(text, T, event_type="Redeploy", transition="rescheduled") == 1
    assert value(text, T, event_type="Terminate", transition="cancelled") == 1
    assert value(text, T, event_type="Reboot", transition="started") == 1
    assert value(text, "azure_scheduled_events_notice_seconds_count", event_type="Freeze") == 1
    assert {s["event_id"] for s in series(text, "azure_scheduled_events_event_info")} == {moved}
    assert value(text, "azure_scheduled_events_document_incarnation") == world.snapshot().incarnation


def test_the_oldest_accepted_api_version_lacks_three_fields_and_says_so(
    world: SimWorld, imds: str, start_exporter: StartExporter
) -> None:
    """Azure's version table: Description from 2019-04-01, EventSource from 2019-08-01, DurationInSeconds
    from 2020-07-01. With 2019-01-01 they are shown as unknown, and the exporter says so at start-up."""
    world.add_event(EventPlan("Reboot", event_source="User", duration=0, description="requested by a user"))
    world.add_event(EventPlan("Terminate", notice=600))  # listed from 2019-01-01 on
    exporter = start_exporter(f"--imds.url={imds}", "--imds.api-version=2019-01-01")
    exporter.wait_ready()
    infos = {info["event_type"]: info for info in series(exporter.metrics(), "azure_scheduled_events_event_info")}
    assert set(infos) == {"Reboot", "Terminate"}
    assert (infos["Reboot"]["event_source"], infos["Reboot"]["cause"]) == ("", "unknown")
    event_id = infos["Reboot"]["event_id"]
    duration = "azure_scheduled_events_event_duration_seconds"
    assert value(exporter.metrics(), duration, event_id=event_id, event_type="Reboot") == -1
    assert "api-version 2019-01-01 has no DurationInSeconds, EventSource, Description" in exporter.logs()
    assert exporter.stop() == 0


def test_an_api_version_imds_stops_serving_is_replaced_within_the_poll(
    world: SimWorld, start_exporter: StartExporter
) -> None:
    """``--imds.api-version=2024-07-09,2020-07-01``: the first is used while IMDS serves it; once IMDS refuses
    it (the simulator answers as IMDS does), the next poll asks the fallback at once: no poll fails, each
    transition is reported once, and the exporter says which version it uses, in its log and on /metrics."""
    with SimulatorServer(world) as server:
        exporter = start_exporter(
            f"--imds.url={server.url}",
            "--imds.api-version=2024-07-09,2020-07-01",
            "--poll.interval=250ms",
            "--log.format=json",
        )
        exporter.wait_ready()
        in_use = "azure_scheduled_events_imds_api_version_info"
        assert series(exporter.metrics(), in_use) == [{"api_version": "2024-07-09"}]
        first = world.add_event(EventPlan("Reboot", notice=900))
        wait_for(lambda: reports(exporter, truth_transitions(world)), 10, "the first event")

        server.faults.refuse_api_versions({"2024-07-09"})
        wait_for(lambda: series(exporter.metrics(), in_use) == [{"api_version": "2020-07-01"}], 10, "the switch")
        second = world.add_event(EventPlan("Freeze", notice=600))
        steps: list[Callable[[], object]] = [
            lambda: world.start_event(first),
            lambda: world.complete_event(first),
            lambda: world.cancel_event(second),
        ]
        for step in [lambda: None, *steps]:  # one change at a time: one poll sees each
            step()
            expected = truth_transitions(world)
            wait_for(functools.partial(reports, exporter, expected), 10, f"exporter to report {expected[-1]}")
        assert len(expected) == 5

        text = exporter.metrics()
        errors = {
            key: count for key, count in samples(text).items() if key[0] == "azure_scheduled_events_poll_errors_total"
        }
        assert errors and not any(errors.values()), "no poll failed across the switch"
        assert value(text, in_use, api_version="2020-07-01") == 1
        lines = [json.loads(line) for line in exporter.logs().splitlines() if line.startswith("{")]
        said = [line["msg"] for line in lines if "api-version" in line.get("msg", "")]
        assert said == [
            "IMDS Scheduled Events api-version 2024-07-09 in use",
            "IMDS Scheduled Events api-version 2020-07-01 in use: IMDS refused 2024-07-09 (400 "
            f"{json.dumps(invalid_version_body())[:120]!r}); the preferred version is asked again every 3600 s",
        ]
        assert exporter.stop() == 0


@pytest.mark.parametrize(
    ("version", "lost"),
    [
        ("2017-03-01", "no Terminate events (scale-set deletions); no Preempt events (Spot evictions); no resource "),
        ("2017-11-01", "no Terminate events (scale-set deletions), lost without a word"),
        ("2018-12-31", "no Terminate events (scale-set deletions), lost without a word"),
    ],
)
def test_an_api_version_that_loses_events_is_refused_in_one_line(version: str, lost: str) -> None:
    """The issue's case: with 2017-03-01 a Reboot listing "_myvm" was not this VM's, and no Terminate or
    Preempt was ever listed; the exporter refuses such a version rather than watch nothing."""
    result = subprocess.run(
        [sys.executable, "-m", "se_exporter", f"--imds.api-version={version}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert f"argument --imds.api-version: api-version {version} is older than 2019-01-01: it has {lost}" in line


def test_live_exposition_passes_promtool(world: SimWorld, imds: str, start_exporter: StartExporter) -> None:
    promtool = require("promtool")
    world.add_event(EventPlan("Freeze", notice=900, duration=5))
    world.add_event(EventPlan("Reboot", notice=None))
    gone = world.add_event(EventPlan("Preempt", notice=30))
    exporter = start_exporter(
        f"--imds.url={imds}",
        "--poll.interval=250ms",
        "--log.format=json",
    )
    exporter.wait_ready()
    world.cancel_event(gone)
    wait_for(lambda: ("cancelled", gone) in logged(exporter), 10, "the cancellation")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=exporter.get("/metrics").content, capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    # promtool reads the classic text format only; OpenMetrics is checked by client_python's parser
    openmetrics = httpx.get(
        exporter.url + "/metrics", headers={"Accept": "application/openmetrics-text"}, trust_env=False
    )
    assert openmetrics.headers["Content-Type"].startswith("application/openmetrics-text")
    families = {f.name for f in text_string_to_metric_families(openmetrics.text)}
    assert "azure_scheduled_events_transitions" in families and openmetrics.text.endswith("# EOF\n")


# What Prometheus 2 and 3 send by default: text is on offer, so text is what they get (as from node_exporter).
PROMETHEUS_ACCEPT_HEADERS = [
    (
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        "text/plain; version=0.0.4",
    ),
    (
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,text/plain;version=1.0.0;"
        "escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1",
        "text/plain; version=1.0.0",
    ),
    ("*/*", "text/plain; version=0.0.4"),
]


def test_endpoints(world: SimWorld, imds: str, start_exporter: StartExporter) -> None:
    exporter = start_exporter(f"--imds.url={imds}", "--web.telemetry-path=/probe")
    exporter.wait_ready()
    landing = exporter.get("/")
    assert landing.status_code == 200 and 'href="/probe"' in landing.text
    assert exporter.get("/-/healthy").text == "Healthy\n"
    assert "azure_scheduled_events_imds_up 1.0" in exporter.get("/probe").text
    assert exporter.get("/metrics").status_code == 404
    only = exporter.get("/probe?name[]=azure_scheduled_events_imds_up&name[]=azure_scheduled_events_poll_errors_total")
    assert {s[0] for s in samples(only.text)} == {
        "azure_scheduled_events_imds_up",
        "azure_scheduled_events_poll_errors_total",
    }
    gz = httpx.get(exporter.url + "/probe", headers={"Accept-Encoding": "gzip"}, trust_env=False)
    assert gz.headers.get("Content-Encoding") == "gzip"
    for accept, answered in PROMETHEUS_ACCEPT_HEADERS:
        scraped = httpx.get(exporter.url + "/probe", headers={"Accept": accept}, trust_env=False)
        assert scraped.headers["Content-Type"].startswith(answered), accept
        assert "azure_scheduled_events_imds_up 1.0" in scraped.text


def test_demo_shows_something_within_30_seconds(start_exporter: StartExporter) -> None:
    demo = start_exporter(command="demo")
    demo.wait_ready()

    def transitions_seen() -> set[str]:
        return {labels["transition"] for labels in series(demo.metrics(), T) if value(demo.metrics(), T, **labels)}

    wait_for(lambda: {"scheduled", "started"} <= transitions_seen(), 30, "demo transitions")
    assert "metrics:  http://" in demo.logs()
    assert demo.stop() == 0
