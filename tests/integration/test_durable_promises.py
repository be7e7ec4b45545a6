"""The durable store's promises as an operator meets them (issue 64), the real exporter over loopback:

- a run without a component leaves that component's state alone, and the component picks it up again when
  it comes back: approvals, lifecycle spans, actions;
- a database written by a newer release is refused with exit code 2, and left as it was;
- an approval is POSTed only once the commit that carries it succeeded, and a POST whose outcome the
  process never learned (SIGKILL right after it) is not sent again: its outcome is said as unknown.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.otlp import OTLPHttpReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import Answer, FakeIMDS, Seen, document, scheduled_event
from tests.support.state_file import writes_refused
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]
POLICY = "rules:\n  - name: user-initiated\n    causes: [user]\n"
APPROVALS = "azure_scheduled_events_approvals_total"
FEW_POLLS = 12


def polls_more(fake: FakeIMDS, count: int = FEW_POLLS) -> None:
    """Wait until the exporter made ``count`` more GET polls (counted on the server)."""
    seen = len(fake.event_requests())
    wait_for(lambda: len(fake.event_requests()) >= seen + count, 30, f"{count} more polls")


def posts(fake: FakeIMDS) -> list[Seen]:
    return [seen for seen in fake.requests if seen.method == "POST"]


def answer_gets(fake: FakeIMDS, answer: list[Answer]) -> None:
    """GETs get ``answer[0]``; a POST gets 200 (IMDS lists the event as Scheduled still, as a lagging IMDS)."""
    fake.respond = lambda seen: Answer() if seen.method == "POST" else answer[0]


def test_a_run_without_the_policy_keeps_the_ledger_and_the_next_run_with_it_approves_nothing_twice(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    state = tmp_path / "state.db"
    answer_gets(fake_imds, [document(1, scheduled_event("R1", EventSource="User"))])
    common = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--vm.name=vm-a", f"--state.file={state}")
    with_policy = (*common, f"--approval.config={tmp_path / 'policy.yaml'}")

    first = start_exporter(*with_policy)
    wait_for(lambda: posts(fake_imds), 20, "the approval")
    polls_more(fake_imds)
    assert first.stop() == 0

    without = start_exporter(*common)  # approval off for one run
    without.wait_ready()
    polls_more(fake_imds)
    assert without.stop() == 0

    again = start_exporter(*with_policy)
    again.wait_ready()
    polls_more(fake_imds)
    assert len(posts(fake_imds)) == 1, "the ledger outlived the run without a policy: approved once"
    assert value(again.metrics(), APPROVALS, event_type="Reboot", result="approved") == 0, "nothing new"
    assert again.stop() == 0


def test_a_run_with_opentelemetry_off_keeps_the_open_lifecycles_and_each_span_ends_once_after_it(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    state = tmp_path / "state.db"
    answer = [document(1, scheduled_event("E1"), scheduled_event("E2"))]
    answer_gets(fake_imds, answer)
    args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--vm.name=vm-a", f"--state.file={state}")
    otel_on = {**otlp_http_receiver.env, "OTEL_BSP_SCHEDULE_DELAY": "100"}

    first = start_exporter(*args, env=otel_on)
    otlp_http_receiver.wait_for_logs(event_name="scheduled_event.transition", count=2, timeout=20)
    assert first.stop() == 0

    off = start_exporter(*args)  # OpenTelemetry off: nothing configured
    off.wait_ready()
    answer[0] = document(2, scheduled_event("E1", EventStatus="Started", NotBefore=""), scheduled_event("E2"))
    wait_for(lambda: off.transitions() == ["started"], 20, "E1 started")
    answer[0] = document(3, scheduled_event("E2"))
    wait_for(lambda: off.transitions() == ["started", "completed"], 20, "E1 completed")
    assert off.stop() == 0

    again = start_exporter(*args, env=otel_on)
    (span,) = otlp_http_receiver.wait_for_spans(name="scheduled_event.lifecycle", timeout=20)
    answer[0] = document(4)  # E2 goes now, with the spans on: its span ends as always
    spans = otlp_http_receiver.wait_for_spans(name="scheduled_event.lifecycle", count=2, timeout=20)
    polls_more(fake_imds)
    assert again.stop() == 0
    by_event = {str(s.attributes["scheduled_event.id"]): s for s in otlp_http_receiver.store.find_spans(name=span.name)}
    assert len(by_event) == len(spans) == 2, "each open lifecycle ends once"
    e1 = by_event["E1"]
    assert e1.attributes["scheduled_event.outcome"] == "completed", "the store remembered how E1 ended"
    assert [event.name for event in e1.events][:1] == ["scheduled"], "its span events from before the gap"
    assert e1.events[-1].name == "completed"
    assert [event.name for event in by_event["E2"].events] == ["scheduled", "cancelled"]


ACTIONS = """concurrency: 1
actions:
  - name: notify
    transitions: [scheduled]
    command: [SCRIPT]
    inherit_env: [OUT, GATE]
"""
SCRIPT = """#!/bin/sh
echo "start $SE_EVENT_ID" >> "$OUT"
while [ ! -e "$GATE" ]; do sleep 0.05; done
echo "end $SE_EVENT_ID" >> "$OUT"
"""


def test_a_run_with_actions_off_keeps_the_queued_runs_and_no_run_is_repeated_or_lost(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    out, gate, script = tmp_path / "seen.txt", tmp_path / "gate", tmp_path / "record.sh"
    out.touch()
    script.write_text(SCRIPT)
    script.chmod(0o755)
    (tmp_path / "actions.yaml").write_text(ACTIONS.replace("SCRIPT", str(script)))
    state = tmp_path / "state.db"
    answer = [document(1)]
    answer_gets(fake_imds, answer)
    common = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--vm.name=vm-a", f"--state.file={state}")
    with_actions = (*common, f"--actions.config={tmp_path / 'actions.yaml'}")
    env = {"OUT": str(out), "GATE": str(gate)}

    def lines() -> list[str]:
        return out.read_text().splitlines()

    first = start_exporter(*with_actions, env=env)
    first.wait_ready()
    answer[0] = document(2, scheduled_event("E1"), scheduled_event("E2"))
    wait_for(lambda: lines() == ["start E1"], 20, "E1's run started (held by the gate), E2's waiting")
    polls_more(fake_imds)
    assert first.stop() == 0, "E1's run is stopped with the exporter; E2's never started"
    assert lines() == ["start E1"]

    off = start_exporter(*common, env=env)  # actions off for one run
    off.wait_ready()
    polls_more(fake_imds)
    assert off.stop() == 0

    gate.touch()
    again = start_exporter(*with_actions, env=env)
    wait_for(lambda: "end E2" in lines(), 20, "E2's run, kept through the run without actions")
    polls_more(fake_imds)
    assert again.stop() == 0
    assert lines() == ["start E1", "start E2", "end E2"], "E2 ran once; E1, stopped mid-run, not again"


def test_a_database_of_a_newer_release_is_refused_and_left_as_it_was(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    state = tmp_path / "state.db"
    connection = sqlite3.connect(state)
    connection.execute("CREATE TABLE events (key TEXT PRIMARY KEY, body BLOB NOT NULL)")
    connection.execute("PRAGMA user_version = 99")
    connection.commit()
    connection.close()
    before = state.read_bytes()

    refused = start_exporter(f"--imds.url={fake_imds.url}", f"--state.file={state}")
    assert refused.proc.wait(30) == 2
    (line,) = [line for line in refused.logs().splitlines() if line.strip()]
    assert str(state) in line and "99" in line and "newer" in line, line
    assert state.read_bytes() == before, "not a byte changed"
    assert not fake_imds.requests, "refused before anything touched the network"


def test_an_approval_waits_for_the_commit_that_carries_it_and_a_post_cut_short_is_never_sent_again(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)
    state = tmp_path / "state.db"
    answer = [document(1)]
    posted = threading.Event()
    killed: list[ExporterProcess] = []

    def respond(seen: Seen) -> Answer:
        if seen.method != "POST":
            return answer[0]
        if killed:  # the first POST: the process dies before it learns the outcome
            killed.pop().proc.send_signal(signal.SIGKILL)
        posted.set()
        return Answer()

    fake_imds.respond = respond
    args = (
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
        "--vm.name=vm-a",
        f"--state.file={state}",
        f"--approval.config={tmp_path / 'policy.yaml'}",
        "--log.format=json",
    )
    first = start_exporter(*args)
    first.wait_ready()
    killed.append(first)
    with writes_refused(state):  # another connection holds the write lock: no commit succeeds
        answer[0] = document(2, scheduled_event("R1", EventSource="User"))
        polls_more(fake_imds)
        assert not posts(fake_imds), "no POST while no commit carries the decision"
    wait_for(posted.is_set, 30, "the POST once a commit succeeded")
    assert first.proc.wait(10) == -signal.SIGKILL

    again = start_exporter(*args)
    again.wait_ready()
    polls_more(fake_imds)
    assert len(posts(fake_imds)) == 1, "a POST whose outcome is unknown is not sent again"
    assert value(again.metrics(), APPROVALS, event_type="Reboot", result="unknown") == 1
    decisions = [line for line in _json_lines(again) if line.get("event") == "scheduled_event.approval"]
    assert [d["scheduled_event.approval.result"] for d in decisions] == ["unknown"], decisions
    assert again.stop() == 0


def _json_lines(exporter: ExporterProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in exporter.logs().splitlines() if line.startswith("{")]
