"""An exporter upgraded from the release before the state database (issue 57): its JSON state file and its
log spool's journal, written by that release (``tests/testdata/earlier_release/``), are imported once and
nothing is lost: no transition is sent again, none is missed, and the journal's records reach the collector
exactly once, across a further restart too. The test runs on the machine's clock and on a clock a month ahead
(an ``LD_PRELOAD`` shim, tests/support/step_clock.c): the fixture's saved times are moved to the exporter's
clock, so the day the test runs changes nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.otlp import OTLPHttpReceiver
from tests.support.earlier_release import E2, TRANSITION, copy_earlier_files, journal_uids
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import FakeIMDS, document
from tests.support.preload import build_shim
from tests.support.state_file import saved_event_ids, spooled_records
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]  # stopped by SIGTERM, as the other restart tests

StartExporter = Callable[..., ExporterProcess]
A_MONTH = 30 * 86400.0


@pytest.mark.parametrize(
    "case",
    [(0.0, "state.json"), (A_MONTH, "state.json"), (0.0, "state.db")],
    ids=["today", "a-month-ahead", "renamed-to-state.db"],
)
def test_the_earlier_state_file_and_journal_are_imported_once_and_nothing_is_sent_twice_or_missed(
    case: tuple[float, str],
    tmp_path: Path,
    fake_imds: FakeIMDS,
    start_exporter: StartExporter,
    otlp_http_receiver: OTLPHttpReceiver,
) -> None:
    ahead, name = case  # the clock's step, and the name --state.file gives
    earlier = copy_earlier_files(tmp_path, now=time.time() + ahead)
    copied = earlier.read_bytes()
    # The unit or chart of this release names the file state.db: the earlier one beside it takes that name.
    state = tmp_path / name
    waiting = journal_uids()
    assert sorted(waiting.values()) == ["scheduled", "scheduled", "started"]
    args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--state.file={state}", "--vm.name=vm-a")
    env = {"OTEL_BSP_SCHEDULE_DELAY": "100", **otlp_http_receiver.env}
    if ahead:
        (tmp_path / "clock-step").write_text(str(ahead))
        env |= {"LD_PRELOAD": str(build_shim("step_clock", tmp_path)), "STEP_CLOCK_FILE": str(tmp_path / "clock-step")}
    fake_imds.respond = lambda seen: document(3, E2)  # E1, Started when the earlier release stopped, is gone

    first = start_exporter(*args, env=env)
    wait_for(lambda: "completed" in first.transitions(), 20, "E1 completed")
    records = otlp_http_receiver.wait_for_logs(event_name=TRANSITION, count=4)
    uids = [str(r.attributes["log.record.uid"]) for r in records]
    assert sorted(uids) == sorted([*waiting, uids[-1]]) and len(set(uids)) == 4, "the journal's three, then one"
    assert records[-1].attributes[TRANSITION] == "completed"
    assert first.transitions() == ["completed"], "nothing the earlier release emitted is emitted again"
    assert "imported the 2 section(s) of an earlier release's state file" in first.logs()
    if name != earlier.name:
        assert f"moved here from {earlier}" in first.logs()
    (span,) = otlp_http_receiver.wait_for_spans(name="scheduled_event.lifecycle")
    assert span.attributes["scheduled_event.id"] == "E1" and span.attributes["scheduled_event.outcome"] == "completed"
    started = json.loads(copied)["sections"]["store"]["events"][0]["first_seen"]
    assert abs(span.start_time_unix_nano / 1e9 - started) < 1, "the lifecycle span began when the earlier run saw E1"
    assert value(first.metrics(), "azure_scheduled_events_persistence_errors_total", file="state") == 0
    wait_for(lambda: spooled_records(state) == [], 10, "every record acknowledged in the database")
    assert first.stop() == 0

    assert (tmp_path / f"{name}.before-sqlite").read_bytes() == copied
    assert (tmp_path / f"{name}.spool.imported").exists() and not (tmp_path / f"{name}.spool").exists()
    assert saved_event_ids(state) == ["E2"]
    if name != earlier.name:
        assert sorted(p.name for p in tmp_path.glob("state.json*")) == [], "all of it moved to the new name"

    second = start_exporter(*args, env=env)
    second.wait_ready()
    wait_for(lambda: value(second.metrics(), "azure_scheduled_events_imds_up") == 1, 20, "a poll")
    assert second.stop() == 0
    assert second.transitions() == [] and "imported" not in second.logs(), "imported once"
    assert len(otlp_http_receiver.store.find_logs(event_name=TRANSITION)) == 4, "nothing sent again after a restart"
