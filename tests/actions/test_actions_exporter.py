"""Actions on transitions, end to end: the real exporter against the loopback fake IMDS, running a script
that writes what it saw to a file. Each transition runs each matching action at most once, across restarts
with the state file and across a crash while it ran; counted, logged, and sent as an OTLP log record."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.otlp import OTLPHttpReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import Answer, FakeIMDS, document
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

Start = Callable[..., ExporterProcess]
ACTIONS = "azure_scheduled_events_actions_total"
SCRIPT = """#!/bin/sh
echo "start $SE_ACTION $SE_EVENT_TRANSITION $SE_EVENT_ID $SE_EVENT_IMPACT $SE_EVENT_CAUSE $SE_VM_NAME $$" >> "$OUT"
if [ -n "$GATE" ]; then while [ ! -e "$GATE" ]; do sleep 0.05; done; fi
if [ -n "$SLEEP_FOR" ]; then sleep "$SLEEP_FOR" & echo "child $!" >> "$OUT"; wait; fi
echo "end $SE_ACTION $SE_EVENT_TRANSITION $SE_EVENT_ID" >> "$OUT"
"""


def event(
    event_id: str, event_type: str = "Reboot", status: str = "Scheduled", resources: tuple[str, ...] = ("vm-a",)
) -> dict[str, Any]:
    return {
        "EventId": event_id,
        "EventType": event_type,
        "EventStatus": status,
        "ResourceType": "VirtualMachine",
        "Resources": list(resources),
        "NotBefore": "" if status == "Started" else "Mon, 19 Sep 2039 18:29:47 GMT",
        "EventSource": "Platform",
        "Description": "",
        "DurationInSeconds": -1,
    }


class Setup:
    def __init__(self, tmp_path: Path, fake: FakeIMDS, start: Start, actions: str) -> None:
        self.out, self.state = tmp_path / "seen.txt", tmp_path / "state.db"
        self.out.touch()
        script = tmp_path / "record.sh"
        script.write_text(SCRIPT)
        script.chmod(0o755)
        self.config = tmp_path / "actions.yaml"
        self.config.write_text(actions.replace("SCRIPT", str(script)))
        self.answer: list[Answer] = [document(1)]
        fake.respond = lambda seen: self.answer[0]
        self.fake, self._start = fake, start

    def start(self, *more: str, env: dict[str, str] | None = None, interval: str = "250ms") -> ExporterProcess:
        exporter = self._start(
            f"--imds.url={self.fake.url}",
            f"--poll.interval={interval}",
            "--vm.name=vm-a",
            f"--actions.config={self.config}",
            f"--state.file={self.state}",
            "--log.format=json",
            *more,
            env={"OUT": str(self.out), **(env or {})},
        )
        exporter.wait_ready()
        return exporter

    def lines(self, kind: str = "") -> list[str]:
        return [line for line in self.out.read_text(encoding="utf-8").splitlines() if line.startswith(kind)]

    def polls_more(self, count: int) -> None:
        seen = len(self.fake.event_requests())
        wait_for(lambda: len(self.fake.event_requests()) >= seen + count, 30, f"{count} more polls")


def records(exporter: ExporterProcess) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in exporter.logs().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "scheduled_event.action"]


NOTIFY = """actions:
  - name: notify
    transitions: [scheduled, started, completed, cancelled]
    impacts: [reboot, redeploy, eviction, termination]
    affects_this_vm: true
    command: [SCRIPT]
    inherit_env: [OUT]
  - name: freezes
    transitions: [scheduled]
    event_types: [Freeze]
    command: [SCRIPT]
    inherit_env: [OUT]
"""


def test_each_transition_runs_each_matching_action_once_with_the_event_in_its_environment(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    setup = Setup(tmp_path, fake_imds, start_exporter, NOTIFY)
    exporter = setup.start(env=otlp_http_receiver.env)
    setup.answer[0] = document(2, event("R1"), event("F1", "Freeze"), event("OTHER", resources=("vm-b",)))
    wait_for(lambda: len(setup.lines("end")) == 2, 20, "the two scheduled runs")
    setup.answer[0] = document(3, event("R1", status="Started"), event("OTHER", resources=("vm-b",)))
    wait_for(lambda: len(setup.lines("end")) == 3, 20, "started")
    setup.answer[0] = document(4)
    wait_for(lambda: len(setup.lines("end")) == 4, 20, "completed")
    setup.polls_more(8)
    assert sorted(line.rsplit(" ", 1)[0] for line in setup.lines("start")) == [
        "start freezes scheduled F1 pause platform vm-a",
        "start notify completed R1 reboot platform vm-a",
        "start notify scheduled R1 reboot platform vm-a",
        "start notify started R1 reboot platform vm-a",
    ], "the other VM's reboot and the freeze's other transitions run nothing"
    text = exporter.metrics()
    assert value(text, ACTIONS, action="notify", transition="started", result="succeeded") == 1
    assert value(text, ACTIONS, action="freezes", transition="scheduled", result="succeeded") == 1
    assert value(text, ACTIONS, action="notify", transition="cancelled", result="failed") == 0, "zero series"
    logged = records(exporter)
    assert len(logged) == 4 and {line["scheduled_event.action.result"] for line in logged} == {"succeeded"}
    assert logged[0]["scheduled_event.action.summary"] == "exited with status 0"
    sent = otlp_http_receiver.wait_for_logs(event_name="scheduled_event.action", count=4, timeout=20)
    by_uid = {log["log.record.uid"] for log in sent}
    assert len(by_uid) == 4 and {log["scheduled_event.action.name"] for log in sent} == {"notify", "freezes"}
    assert exporter.stop() == 0

    again = setup.start()  # the same document after a restart: nothing runs again
    setup.answer[0] = document(4)
    setup.polls_more(12)
    assert len(setup.lines("start")) == 4 and records(again) == []
    assert again.stop() == 0


SLOW = """concurrency: 1
actions:
  - name: slow
    transitions: [scheduled]
    command: [SCRIPT]
    inherit_env: [OUT, SLEEP_FOR]
    timeout_seconds: 60
"""


def test_a_crash_while_an_action_runs_never_runs_it_again(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start
) -> None:
    """With concurrency 1, two runs are released at a time (the running one and the next): a crash reports
    both failed and runs neither again; the third, never released, runs after the restart."""
    setup = Setup(tmp_path, fake_imds, start_exporter, SLOW)
    setup.answer[0] = document(2, event("R1"), event("R2"), event("R3"))
    exporter = setup.start(env={"SLEEP_FOR": "3"})
    wait_for(lambda: len(setup.lines("start")) == 1, 20, "the first run started")
    exporter.stop(signal.SIGKILL)  # a crash: no chance to save anything more
    again = setup.start(env={"SLEEP_FOR": "0"})
    wait_for(lambda: len(records(again)) == 3, 30, "every run reported")
    setup.polls_more(12)
    results = sorted((line["scheduled_event.id"], line["scheduled_event.action.result"]) for line in records(again))
    assert results == [("R1", "failed"), ("R2", "failed"), ("R3", "succeeded")]
    assert "at most once" in records(again)[0]["scheduled_event.action.summary"]
    assert sorted(line.split()[3] for line in setup.lines("start")) == ["R1", "R3"], "R1 is never run again"
    assert again.stop() == 0


def test_a_clean_stop_runs_what_had_not_started_after_the_restart(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start
) -> None:
    setup = Setup(tmp_path, fake_imds, start_exporter, SLOW)
    setup.answer[0] = document(2, event("R1"), event("R2"), event("R3"))
    exporter = setup.start(env={"SLEEP_FOR": "30"})
    wait_for(lambda: len(setup.lines("start")) == 1, 20, "the first run started")
    assert exporter.stop() == 0  # SIGTERM: the running command is stopped, the two waiting ones are kept
    stopped = records(exporter)
    assert [(line["scheduled_event.action.result"], line["scheduled_event.id"]) for line in stopped] == [
        ("failed", "R1")
    ]
    again = setup.start(env={"SLEEP_FOR": "0"})
    wait_for(lambda: len(setup.lines("end")) == 2, 30, "the two that had waited")
    setup.polls_more(8)
    assert sorted(line.split()[3] for line in setup.lines("start")) == ["R1", "R2", "R3"], "each started once"
    assert again.stop() == 0


def test_an_action_that_never_ends_is_stopped_with_its_children(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start
) -> None:
    setup = Setup(tmp_path, fake_imds, start_exporter, SLOW.replace("timeout_seconds: 60", "timeout_seconds: 1"))
    setup.answer[0] = document(2, event("R1"))
    exporter = setup.start(env={"SLEEP_FOR": "1000"})
    wait_for(lambda: records(exporter), 20, "the run reported")
    (record,) = records(exporter)
    assert record["scheduled_event.action.result"] == "timed_out"
    assert record["scheduled_event.action.summary"].startswith("timed out after 1 s")
    child = int(setup.lines("child")[0].split()[1])
    wait_for(lambda: not _alive(child), 10, "the command's child stopped too")
    assert value(exporter.metrics(), ACTIONS, action="slow", transition="scheduled", result="timed_out") == 1
    assert exporter.stop() == 0


MANY = """concurrency: 8
actions:
  - name: each
    transitions: [scheduled]
    command: [SCRIPT]
    inherit_env: [OUT]
"""


@pytest.mark.timeout(180)
def test_a_thousand_transitions_at_once_all_run_and_polls_stay_on_time(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start
) -> None:
    setup = Setup(tmp_path, fake_imds, start_exporter, MANY)
    exporter = setup.start()
    setup.answer[0] = document(2, *(event(f"F{n}", "Freeze") for n in range(1000)))
    began = time.monotonic()
    wait_for(lambda: len(setup.lines("end")) == 1000, 150, "a thousand runs")
    took = time.monotonic() - began
    gaps = [
        b.at - a.at
        for a, b in zip(fake_imds.event_requests(), fake_imds.event_requests()[1:], strict=False)
        if a.at >= began
    ]
    assert max(gaps) < 2.0, f"a poll waited {max(gaps):.1f} s while the actions ran ({took:.0f} s in all)"
    assert sorted(line.split()[3] for line in setup.lines("start")) == sorted(f"F{n}" for n in range(1000))
    wait_for(
        lambda: value(exporter.metrics(), ACTIONS, action="each", transition="scheduled", result="succeeded") == 1000,
        20,
        "every run counted",
    )
    assert exporter.stop() == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


ONE_AT_A_TIME = """concurrency: 1
actions:
  - name: each
    transitions: [scheduled]
    command: [SCRIPT]
    inherit_env: [OUT]
"""


def counted(exporter: ExporterProcess, action: str = "each") -> dict[str, float]:
    text = exporter.metrics()
    results = ("succeeded", "failed", "timed_out", "skipped")
    return {r: value(text, ACTIONS, action=action, transition="scheduled", result=r) or 0 for r in results}


def test_a_run_whose_event_file_cannot_be_written_ends_failed_and_later_runs_go_ahead(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start
) -> None:
    """Issue 29, point 1: an exception on a worker thread leaked its slot; after two, no action ever ran."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    setup = Setup(tmp_path, fake_imds, start_exporter, ONE_AT_A_TIME)
    exporter = setup.start(env={"TMPDIR": str(temp)})
    setup.answer[0] = document(2, event("A0"))
    wait_for(lambda: counted(exporter)["succeeded"] == 1, 20, "the first run (the temp directory is learned)")
    temp.rmdir()  # SE_EVENT_FILE cannot be written now, whoever runs the exporter (root included)
    setup.answer[0] = document(3, *(event(f"A{n}") for n in range(4)))
    wait_for(lambda: counted(exporter)["failed"] == 3, 20, "three runs failed to start")
    temp.mkdir()
    setup.answer[0] = document(4, *(event(f"A{n}") for n in range(7)))
    wait_for(lambda: counted(exporter)["succeeded"] == 4, 20, "the runs after it went ahead")
    assert counted(exporter) == {"succeeded": 4, "failed": 3, "timed_out": 0, "skipped": 0}
    failed = [r for r in records(exporter) if r["scheduled_event.action.result"] == "failed"]
    assert len(failed) == 3 and all(r["scheduled_event.action.summary"].startswith("could not start: ") for r in failed)
    assert exporter.stop() == 0


def test_queued_runs_start_while_imds_fails(tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start) -> None:
    """Issue 29, point 2: runs were released only after a successful poll; IMDS is often flaky in maintenance."""
    setup = Setup(tmp_path, fake_imds, start_exporter, ONE_AT_A_TIME)
    exporter = setup.start()
    listed = document(2, *(event(f"Q{n}") for n in range(12)))
    failing = [False]
    fake_imds.respond = lambda seen: Answer(status=500) if failing[0] else listed
    wait_for(lambda: len(setup.lines("start")) >= 1, 20, "the first run")
    failing[0] = True  # every poll from now on fails
    wait_for(lambda: len(setup.lines("end")) == 12, 10, "all twelve runs, while IMDS answers 500")
    assert value(exporter.metrics(), "azure_scheduled_events_imds_up") == 0
    assert exporter.stop() == 0


def test_two_hundred_runs_take_seconds_and_this_vms_disruptive_event_goes_first(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start
) -> None:
    """Issue 29, point 3: 2 x concurrency runs a poll (8 a second) made a Preempt's action wait behind others."""
    gate = tmp_path / "go"  # each run waits for it: the first runs are the ones started, not the first to write
    many = MANY.replace("concurrency: 8\n", "").replace("inherit_env: [OUT]", "inherit_env: [OUT, GATE]")
    setup = Setup(tmp_path, fake_imds, start_exporter, many)  # concurrency: the default, 4
    others = [event(f"O{n}", "Freeze", resources=("vm-b",)) for n in range(200)]
    setup.answer[0] = document(2, *others, event("MINE", "Preempt"))  # at the first poll; the next is 10 minutes away
    exporter = setup.start(interval="10m", env={"GATE": str(gate)})
    wait_for(lambda: len(setup.lines("start")) == 4, 30, "the first four runs")
    starts = [line.split()[3] for line in setup.lines("start")]
    gate.touch()
    wait_for(lambda: len(setup.lines("end")) == 201, 120, "201 runs")
    # Started only at polls, 2 x concurrency at a time, they would have taken 25 polls.
    assert len(fake_imds.event_requests()) == 1, "the runs waited for polls"
    assert "MINE" in starts[:4], f"this VM's eviction started {starts.index('MINE') + 1}th"
    assert exporter.stop() == 0
