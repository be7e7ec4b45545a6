"""Durations on a stepped wall clock (issue 38, point 3): the wall clock stepped back an hour and forward
again (NTP, a VM's time sync after a pause), the monotonic clock untouched, through an ``LD_PRELOAD`` shim
compiled here (tests/support/step_clock.c). Time in Started is never negative, never inflated by a step."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import FakeIMDS, document, scheduled_event
from tests.support.preload import build_shim
from tests.support.wait import wait_for

pytestmark = pytest.mark.posix
StartExporter = Callable[..., ExporterProcess]
STARTED = scheduled_event("E1", EventSource="Platform", EventStatus="Started", NotBefore="")
IN_STARTED = "azure_scheduled_events_event_started_seconds"


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim("step_clock", tmp_path_factory.mktemp("shim"))


def in_started(exporter: ExporterProcess) -> float:
    return value(exporter.metrics(), IN_STARTED, event_id="E1", event_type="Reboot") or 0.0


def test_time_in_started_through_steps_of_the_wall_clock(
    shim: Path, tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    step = tmp_path / "wall-clock-step"
    step.write_text("-3600")  # the event starts while the wall clock is an hour behind
    fake_imds.respond = lambda seen: document(1)
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
        "--vm.name=vm-a",
        "--log.format=json",
        env={"LD_PRELOAD": str(shim), "STEP_CLOCK_FILE": str(step)},
    )
    exporter.wait_ready()
    fake_imds.respond = lambda seen: document(2, STARTED)
    wait_for(lambda: in_started(exporter) > 0, 10, "the event in Started")
    began = time.monotonic()
    step.write_text("0")  # stepped forward an hour: once "3600 s in Started"
    wait_for(lambda: time.monotonic() - began > 1.0, 5, "a second in Started")
    forward = in_started(exporter)
    assert 1.0 <= forward < 30, f"after a step forward: {forward:.0f} s in Started"
    step.write_text("-3600")  # and back again: once 0
    wait_for(lambda: in_started(exporter) > forward, 5, "time in Started going on")
    backward = in_started(exporter)
    assert forward < backward < 30, f"after a step back: {backward:.0f} s in Started"
    step.write_text("0")
    fake_imds.respond = lambda seen: document(3)
    wait_for(lambda: '"scheduled_event.transition": "completed"' in exporter.logs(), 10, "completed")
    elapsed = time.monotonic() - began
    completed = next(
        json.loads(line) for line in exporter.logs().splitlines() if '"scheduled_event.transition": "completed"' in line
    )
    print(f"\nthrough -1 h and +1 h steps: {forward:.1f} s, {backward:.1f} s, then {completed['msg']}")
    seconds = float(re.search(r"after (\d+) s in Started", completed["msg"]).group(1))  # type: ignore[union-attr]
    assert seconds <= elapsed + 2, f"completed after {seconds:.0f} s in Started, {elapsed:.0f} s in truth"
    histogram = value(exporter.metrics(), "azure_scheduled_events_started_duration_seconds_sum", event_type="Reboot")
    assert histogram is not None and histogram <= elapsed + 2
    assert exporter.stop() == 0
