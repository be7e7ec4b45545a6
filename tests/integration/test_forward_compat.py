"""Azure's next events (issue 52): documents with types, statuses and fields se-exporter has never seen, asked
for with a newer api-version, through the whole pipeline of the real exporter against the loopback fake IMDS.

Each case is a list of documents; the exporter is stopped and started again (``--state.file``) after the
``restart_after``-th. For every case: the api-version is sent as given; each step's transitions are logged,
sent as OTLP log records, counted in ``transitions_total`` and run the actions that match, each exactly once
across the restart; the lifecycle span closes with the last transition and carries every step; no approval
is ever POSTed for an event in any other status than Scheduled, whatever the policy; ``/-/traffic`` answers
what the case says at each step.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.otlp import OTLPHttpReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import Answer, FakeIMDS
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

Start = Callable[..., ExporterProcess]
API_VERSION = "2026-05-01"  # newer than any se-exporter knows
TRANSITIONS = "azure_scheduled_events_transitions_total"
SCRIPT = '#!/bin/sh\necho "$SE_ACTION $SE_EVENT_TRANSITION $SE_EVENT_ID $SE_EVENT_TYPE $SE_EVENT_IMPACT" >> "$OUT"\n'
ACTIONS = """actions:
  - name: every-step
    transitions: [scheduled, started, completed, cancelled, rescheduled, updated, listed, removed]
    command: [SCRIPT]
    inherit_env: [OUT]
"""
# A policy that would approve any event of this VM, whatever it is: only a Scheduled one may be POSTed.
POLICY = """rules:
  - name: anything
    causes: [platform, user, failure, unknown]
"""
FAR = "Mon, 11 Apr 2099 22:26:58 GMT"


def event(event_id: str, event_type: str, status: str, not_before: str = "", **more: Any) -> dict[str, Any]:
    """An event of this VM (vm-a) as a newer IMDS may write it: with fields no api-version we know has."""
    return {
        "EventId": event_id,
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": ["vm-a"],
        "EventStatus": status,
        "NotBefore": not_before,
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
        "EvictionRiskScore": 0.8,  # unknown fields: kept out of the way, never a parse error
        "Details": {"Region": "westeurope", "Sizes": ["Standard_D2s_v5"]},
    } | more


@dataclass(frozen=True)
class Case:
    steps: list[list[dict[str, Any]]]  # the documents' events, one list per step
    restart_after: int  # the exporter is restarted after this many steps
    transitions: list[list[str]]  # what each step emits
    traffic: list[int]  # /-/traffic's status after each step
    event_type: str
    impact: str
    changes: str = ""  # the "updated" record's scheduled_event.changes


CASES = {
    "a Spot eviction-risk notice (SpotRebalanceRecommendation, Advisory)": Case(
        steps=[[event("S1", "SpotRebalanceRecommendation", "Advisory")], []],
        restart_after=1,
        transitions=[["listed"], ["removed"]],
        traffic=[200, 200],
        event_type="SpotRebalanceRecommendation",
        impact="eviction_risk",
    ),
    "a Reboot that goes Scheduled, then Paused, then away": Case(
        steps=[
            [event("R1", "Reboot", "Scheduled", FAR)],
            [event("R1", "Reboot", "Paused")],
            [],
        ],
        restart_after=2,
        transitions=[["scheduled"], ["updated"], ["removed"]],
        traffic=[200, 503, 200],  # Paused with no NotBefore: it may go on at any moment (docs/actions.md)
        event_type="Reboot",
        impact="reboot",
        changes="the event changed (EventStatus Scheduled -> Paused)",
    ),
    "an unknown type in an unknown status, whose status changes": Case(
        steps=[
            [event("H1", "HostUpgrade", "Pending")],
            [event("H1", "HostUpgrade", "Queued")],
            [],
        ],
        restart_after=1,
        transitions=[["listed"], ["updated"], ["removed"]],
        traffic=[200, 200, 200],  # impact unknown: not one of --traffic.impacts
        event_type="HostUpgrade",
        impact="unknown",
        changes="the event changed (EventStatus Pending -> Queued)",
    ),
}


class Pipeline:
    """The fake IMDS serving a newer document, and the exporter with every sink on."""

    def __init__(self, tmp_path: Path, fake: FakeIMDS, start: Start, receiver: OTLPHttpReceiver) -> None:
        self.out = tmp_path / "actions.txt"
        self.out.touch()
        script = tmp_path / "record.sh"
        script.write_text(SCRIPT)
        script.chmod(0o755)
        (tmp_path / "actions.yaml").write_text(ACTIONS.replace("SCRIPT", str(script)))
        (tmp_path / "policy.yaml").write_text(POLICY)
        self.tmp_path, self.fake, self._start, self.receiver = tmp_path, fake, start, receiver
        self.incarnation = 0
        self.serve([])

    def serve(self, events: list[dict[str, Any]]) -> None:
        self.incarnation += 1
        body = {"DocumentIncarnation": self.incarnation, "Events": events, "NextPollHintInSeconds": 1}
        answer = Answer(body=json.dumps(body).encode())
        self.fake.respond = lambda seen: answer

    def start(self) -> ExporterProcess:
        exporter = self._start(
            f"--imds.url={self.fake.url}",
            f"--imds.api-version={API_VERSION}",
            "--poll.interval=250ms",
            "--vm.name=vm-a",
            f"--state.file={self.tmp_path / 'state.db'}",
            f"--actions.config={self.tmp_path / 'actions.yaml'}",
            f"--approval.config={self.tmp_path / 'policy.yaml'}",
            "--log.format=json",
            env={"OUT": str(self.out), "OTEL_BSP_SCHEDULE_DELAY": "200", **self.receiver.env},
        )
        exporter.wait_ready()
        return exporter

    def polls_more(self, count: int) -> None:
        seen = len(self.fake.event_requests())
        wait_for(lambda: len(self.fake.event_requests()) >= seen + count, 30, f"{count} more polls")


def approvals(fake: FakeIMDS) -> list[bytes]:
    return [seen.body for seen in fake.event_requests() if seen.method == "POST"]


def logged_at_least(processes: list[ExporterProcess], count: int) -> bool:
    return sum(len(logged(process)) for process in processes) >= count


def logged(exporter: ExporterProcess) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in exporter.logs().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "scheduled_event.transition"]


@pytest.mark.parametrize("name", list(CASES))
def test_a_new_kind_of_event_has_a_whole_lifecycle_in_every_sink(
    name: str, tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Start, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    case = CASES[name]
    pipeline = Pipeline(tmp_path, fake_imds, start_exporter, otlp_http_receiver)
    exporter = pipeline.start()
    processes, emitted = [exporter], 0
    for index, events in enumerate(case.steps, start=1):
        posts = len(approvals(fake_imds))
        pipeline.serve(events)
        emitted += len(case.transitions[index - 1])
        wait_for(partial(logged_at_least, processes, emitted), 20, f"step {index}'s transitions")
        pipeline.polls_more(3)  # whatever else this document would make has been made
        if not any(e["EventStatus"] == "Scheduled" for e in events):  # only a Scheduled event is ever approved
            assert len(approvals(fake_imds)) == posts, (index, approvals(fake_imds)[posts:])
        traffic = exporter.get("/-/traffic")
        assert traffic.status_code == case.traffic[index - 1], (index, traffic.text)
        if index == case.restart_after:
            assert exporter.stop() == 0
            exporter = pipeline.start()
            processes.append(exporter)
            pipeline.polls_more(3)
    pipeline.polls_more(3)

    every = [line for p in processes for line in logged(p)]
    expected = [kind for step in case.transitions for kind in step]
    assert [line["scheduled_event.transition"] for line in every] == expected, "each exactly once, restart or not"
    event_id = case.steps[0][0]["EventId"]
    assert {(line["scheduled_event.id"], line["scheduled_event.type"]) for line in every} == {
        (event_id, case.event_type)
    }
    assert {line["scheduled_event.impact"] for line in every} == {case.impact}
    updated = [line for line in every if line["scheduled_event.transition"] == "updated"]
    assert [line["scheduled_event.changes"] for line in updated] == ([case.changes] if case.changes else [])

    records = otlp_http_receiver.wait_for_logs(event_name="scheduled_event.transition", count=len(expected))
    assert sorted(str(r["scheduled_event.transition"]) for r in records) == sorted(expected)
    assert len({r["log.record.uid"] for r in records}) == len(expected)
    (span,) = otlp_http_receiver.wait_for_spans(name="scheduled_event.lifecycle")
    assert (span["scheduled_event.id"], span["scheduled_event.outcome"]) == (event_id, expected[-1])
    assert [step.name for step in span.events] == expected

    actions = pipeline.out.read_text(encoding="utf-8").splitlines()
    assert actions == [f"every-step {kind} {event_id} {case.event_type} {case.impact}" for kind in expected]
    since_restart = [kind for step in case.transitions[case.restart_after :] for kind in step]
    text = exporter.metrics()
    counted = {kind: value(text, TRANSITIONS, event_type=case.event_type, transition=kind) for kind in since_restart}
    assert counted == dict.fromkeys(since_restart, 1), "the restarted exporter counts what it saw"

    assert all(f"api-version={API_VERSION}" in seen.path for seen in fake_imds.event_requests())
    assert exporter.stop() == 0
