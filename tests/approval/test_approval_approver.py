"""The approver against a real recording HTTP server on loopback, real hooks and a fake wall clock."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from se_exporter.approval.approver import Approver
from se_exporter.approval.hook import HookRunner, HookSubmitter
from se_exporter.approval.ledger import MAX_LEDGER_ENTRIES, OTHER_RETENTION_SECONDS, ApprovalDecision, restore_ledger
from se_exporter.approval.policy import Hook, Policy, Rule
from se_exporter.approval.poster import PostRetry
from se_exporter.durable.persistence import Tables
from se_exporter.imds.document import ScheduledEvent
from se_exporter.imds.impact import Cause, Classification, Impact
from se_exporter.process.command import CommandResult
from tests.approval.helpers import (
    T0,
    VM,
    FakeClock,
    Listing,
    RecordingIMDS,
    event,
    imds_client,
    serve_imds,
    wait_until,
)
from tests.support.state_file import as_json, encoded

pytestmark = pytest.mark.posix

USER = Rule("user-initiated", event_sources=("User",))
FREEZE = Rule("short-freeze", event_types=("Freeze",), max_duration_seconds=8)
POLICY = Policy(rules=(USER, FREEZE))


@pytest.fixture
def imds() -> Iterator[RecordingIMDS]:
    yield from serve_imds()


class Tracked:
    """The real hook runner, its futures kept: the harness waits for them (and only them)."""

    def __init__(self, runner: HookSubmitter) -> None:
        self._runner = runner
        self.futures: list[Future[CommandResult]] = []

    def submit(
        self,
        event: ScheduledEvent,
        vm_name: str,
        rule: str,
        *,
        classification: Classification | None = None,
        seconds_left: float | None = None,
    ) -> Future[CommandResult]:
        future = self._runner.submit(event, vm_name, rule, classification=classification, seconds_left=seconds_left)
        self.futures.append(future)
        return future

    def close(self) -> None:
        self._runner.close()


class Harness:
    """An approver whose POSTs go through the real IMDS client to the recording IMDS on loopback."""

    def __init__(self, policy: Policy, imds: RecordingIMDS, state: Tables | None = None, **kwargs: Any) -> None:
        self.decisions: list[ApprovalDecision] = []
        self.clock = FakeClock()
        kwargs.setdefault("clock", self.clock)
        # One attempt per batch unless a test says otherwise: the approver's own retry schedule is tested
        # on the fake clock; the poster's quick retries have their tests below.
        kwargs.setdefault("post_retry", PostRetry(attempts=1))
        self.hooks = Tracked(kwargs.pop("hook_runner")) if "hook_runner" in kwargs else None
        if self.hooks is not None:
            kwargs["hook_runner"] = self.hooks
        self.client = imds_client(imds.url)
        ledger = restore_ledger(state or {}, policy.fingerprint)  # as app.py restores it
        self.approver = Approver(policy, self.client.approve, ledger=ledger, **kwargs)
        self.listing = Listing()

    def step(self, events: Sequence[ScheduledEvent], vm_name: str | None = VM) -> None:
        """One poll: the approver decides, never waiting on a hook or a POST."""
        settled, made = self.approver.on_poll(self.listing(events, self.clock()), vm_name)
        self.decisions += [*settled, *made]

    def poll(self, events: Sequence[ScheduledEvent], times: int = 1, vm_name: str | None = VM) -> None:
        """``times`` polls, each followed by as many as it takes for what it started (hooks, POSTs) to be
        settled: nothing is left to chance."""
        for _ in range(times):
            self.step(events, vm_name)
            wait_until(lambda: self._settled(events, vm_name), what="hooks and POSTs in flight settled")

    def poll_until(
        self, events: Sequence[ScheduledEvent], condition: Callable[[], object], vm_name: str | None = VM
    ) -> None:
        def step() -> object:
            self.step(events, vm_name)
            return condition()

        wait_until(step, what="the approver's decision")

    def _settled(self, events: Sequence[ScheduledEvent], vm_name: str | None) -> bool:
        """One more poll; True when it found nothing in flight: every hook had ended before it (so it
        settled them), and no POST is due (one that ended is settled by the poll after it)."""
        hooks_ended = self.hooks is None or all(future.done() for future in self.hooks.futures)
        self.step(events, vm_name)
        saved = ledger(self.approver)
        return hooks_ended and all(entry["status"] not in ("post_due", "posting") for entry in saved.values())

    def close(self, timeout: float = 5) -> None:
        self.decisions += self.approver.close(timeout=timeout)

    def results(self) -> list[tuple[str, str, str]]:
        return [(d.event.event_id, d.result, d.reason.split(":")[0]) for d in self.decisions]

    def count(self, result: str) -> int:
        return sum(d.result == result for d in self.decisions)


def ledger(approver: Approver) -> dict[str, Any]:
    """The approver's rows as the state file holds them, decoded (EventId -> entry)."""
    return as_json(approver).get("approvals", {})


@pytest.fixture
def harnesses() -> Iterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for harness in made:
        harness.close()


@pytest.fixture
def make(imds: RecordingIMDS, harnesses: list[Harness]) -> Callable[..., Harness]:
    def factory(policy: Policy = POLICY, **kwargs: object) -> Harness:
        harness = Harness(policy, imds, **kwargs)  # type: ignore[arg-type]
        harnesses.append(harness)
        return harness

    return factory


def hook_runner(tmp_path: Path, timeout: float = 10.0) -> HookRunner:
    """A real hook that appends "<EventId> <NotBefore>" to runs.txt and fails while fail.flag exists."""
    code = (
        "import os, sys, time\n"
        "d = sys.argv[1]\n"
        "open(os.path.join(d, 'runs.txt'), 'a').write(os.environ['SE_EVENT_ID'] + ' '"
        " + os.environ['SE_EVENT_NOT_BEFORE'] + '\\n')\n"
        "while os.path.exists(os.path.join(d, 'hold.flag')): time.sleep(0.01)\n"
        "sys.exit(1 if os.path.exists(os.path.join(d, 'fail.flag')) else 0)\n"
    )
    return HookRunner(Hook(command=(sys.executable, "-c", code, str(tmp_path)), timeout_seconds=timeout))


def runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "runs.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def test_exactly_the_matching_events_are_posted_once_over_many_polls(
    make: Callable[..., Harness], imds: RecordingIMDS
) -> None:
    h = make()
    events = [
        event("A"),  # User, this VM first: approved
        event("B", event_source="Platform"),  # no rule
        event("C", resources=("vm-b", VM)),  # not the leader
        event("D", resources=("vm-b", "vm-c")),  # not this VM
        event("E", event_status="Started", not_before=None),  # not Scheduled
        event("F", event_type="Freeze", event_source="Platform", duration_seconds=-1),  # unknown duration
    ]
    h.poll(events, times=30)
    assert imds.start_ids() == [["A"]]
    (request,) = imds.requests
    assert request.path == "/metadata/scheduledevents?api-version=2020-07-01"
    assert request.headers["Metadata"] == "true"
    assert request.body == {"StartRequests": [{"EventId": "A"}]}
    assert sorted(h.results()) == [
        ("A", "approved", "rule user-initiated matched; POST StartRequests succeeded"),
        ("B", "skipped", "no_rule"),
        ("C", "skipped", "not_leader"),
        ("D", "skipped", "not_this_vm"),
        ("E", "skipped", "not_scheduled"),
        ("F", "skipped", "no_rule"),
    ]
    approved = next(d for d in h.decisions if d.result == "approved")
    assert approved.rule == "user-initiated" and approved.counted
    assert approved.post_latency_seconds is not None and 0 < approved.post_latency_seconds < 5
    assert approved.at == h.clock.now
    assert not any(d.counted for d in h.decisions if d.result == "skipped")
    # IMDS starts it at once; later polls (and the other events starting) decide nothing more.
    h.poll([event("A", event_status="Started", not_before=None), *events[1:]], times=5)
    h.poll([replace_status(e) for e in events], times=5)
    assert len(h.decisions) == 6 and len(imds.requests) == 1


def replace_status(e: ScheduledEvent) -> ScheduledEvent:
    return event(
        e.event_id, event_status="Started", not_before=None, resources=e.resources, event_source=e.event_source
    )


def test_events_decided_in_the_same_poll_share_one_post(make: Callable[..., Harness], imds: RecordingIMDS) -> None:
    h = make()
    events = [event("A"), event("B", event_type="Freeze", event_source="Platform", duration_seconds=5)]
    h.poll(events, times=10)
    assert imds.start_ids() == [["A", "B"]]
    assert imds.requests[0].body == {"StartRequests": [{"EventId": "A"}, {"EventId": "B"}]}
    approved = [d for d in h.decisions if d.result == "approved"]
    assert [(d.event.event_id, d.rule) for d in approved] == [("A", "user-initiated"), ("B", "short-freeze")]
    assert approved[0].post_latency_seconds == approved[1].post_latency_seconds
    assert all("(one request for 2 events)" in d.reason for d in approved)


def test_dry_run_decides_and_logs_but_never_posts(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path
) -> None:
    hook = Hook(command=(sys.executable, "-c", f"open({str(tmp_path / 'ran')!r}, 'w')"))
    h = make(Policy(rules=(USER,), dry_run=True, hook=hook))
    h.poll([event("A"), event("B", event_source="Platform")], times=20)
    assert imds.requests == []
    assert not (tmp_path / "ran").exists()  # dry run has no side effects: no hook either
    assert h.results() == [("A", "dry_run", "dry_run"), ("B", "skipped", "no_rule")]
    assert h.decisions[0].reason == "dry_run: rule user-initiated matched; would run the hook, then POST StartRequests"
    assert h.decisions[0].counted


def test_failed_post_is_retried_with_backoff_then_approved(make: Callable[..., Harness], imds: RecordingIMDS) -> None:
    imds.statuses[:] = [500, 503]
    h = make()
    events = [event("A")]
    h.poll(events, times=10)
    assert imds.start_ids() == [["A"]]
    failed = h.decisions[-1]
    assert failed.result == "failed" and failed.rule == "user-initiated" and failed.post_latency_seconds is not None
    assert failed.reason == (
        "POST StartRequests failed after 1 attempt(s): IMDSHTTPError: IMDS POST /metadata/scheduledevents answered "
        "500: ''; POST retry 1/2 in 15 s if still approvable"
    )
    h.clock.now += 14.9
    h.poll(events, times=5)
    assert len(imds.requests) == 1
    h.clock.now += 0.1
    h.poll(events, times=5)
    assert len(imds.requests) == 2 and h.decisions[-1].reason.endswith("POST retry 2/2 in 60 s if still approvable")
    h.clock.now += 60
    h.poll(events, times=5)
    assert imds.start_ids() == [["A"], ["A"], ["A"]]
    assert [d.result for d in h.decisions] == ["failed", "failed", "approved"]
    assert "POST retry after 2 failure(s)" in h.decisions[-1].reason


def test_retries_are_bounded_then_wait_for_the_event_to_change(
    make: Callable[..., Harness], imds: RecordingIMDS
) -> None:
    imds.statuses[:] = [500, 500, 500]
    h = make()
    for _ in range(6):
        h.poll([event("A")], times=2)
        h.clock.now += 100  # past both retry delays (15 s, 60 s), still before NotBefore (T0 + 900)
    assert len(imds.requests) == 3
    assert h.decisions[-1].reason.endswith("; not retried until the event changes")
    moved = event("A", not_before=event("A").not_before + timedelta(minutes=10))  # type: ignore[operator]
    h.poll([moved], times=3)
    assert len(imds.requests) == 4 and [d.result for d in h.decisions] == ["failed"] * 3 + ["approved"]


def test_400_is_not_retried_until_the_event_changes(make: Callable[..., Harness], imds: RecordingIMDS) -> None:
    imds.statuses[:] = [400]
    h = make()
    h.poll([event("A")], times=3)
    h.clock.now += 600
    h.poll([event("A")], times=3)
    assert len(imds.requests) == 1
    assert h.decisions[-1].reason.startswith(
        "POST StartRequests failed after 1 attempt(s): IMDSHTTPError: IMDS POST "
        "/metadata/scheduledevents answered 400: ''"
    )
    assert h.decisions[-1].reason.endswith("; not retried until the event changes")
    h.poll([event("A", duration_seconds=30)], times=3)
    assert len(imds.requests) == 2 and h.decisions[-1].result == "approved"


def test_a_post_error_that_is_not_an_imds_error_is_a_bug_logged_with_its_traceback_and_not_retried(
    imds: RecordingIMDS, caplog: pytest.LogCaptureFixture
) -> None:
    """Every exception of the POST once became a "failed" decision with no traceback."""
    decisions: list[ApprovalDecision] = []
    client = imds_client(imds.url)

    def approve_with_a_bug(event_ids: Sequence[str]) -> None:
        client.approve(event_ids)
        raise RuntimeError("bug after the POST")

    approver = Approver(POLICY, approve_with_a_bug, clock=FakeClock())
    listing = Listing()
    try:
        for _ in range(20):
            settled, made = approver.on_poll(listing([event("A")]), VM)
            decisions += [*settled, *made]
            if decisions:
                break
            wait_until(lambda: len(imds.requests) == 1, what="the POST")
    finally:
        decisions += approver.close(timeout=10)
    failure = "POST StartRequests failed: RuntimeError: bug after the POST; not retried until the event changes"
    assert [(d.result, d.reason) for d in decisions] == [("failed", failure)]
    (bug,) = [r for r in caplog.records if "failed unexpectedly (a bug)" in r.getMessage()]
    assert bug.exc_info is not None and bug.exc_info[0] is RuntimeError


def test_no_second_approval_after_a_restart(make: Callable[..., Harness], imds: RecordingIMDS) -> None:
    first = make()
    first.poll([event("A"), event("B", event_source="Platform")], times=3)
    assert imds.start_ids() == [["A"]]
    first.close()
    state = encoded(first.approver)  # through JSON, as the state file does
    saved = ledger(first.approver)
    assert list(saved) == ["A"]  # skips are not persisted
    assert saved["A"]["status"] == "approved" and saved["A"]["rule"] == "user-initiated"
    assert saved["A"]["policy"] == POLICY.fingerprint and saved["A"]["event_type"] == "Reboot"
    # The restarted exporter still sees A Scheduled (IMDS was slow to start it): no second POST, no decision.
    second = make(state=state)
    second.poll([event("A")], times=10)
    assert len(imds.requests) == 1 and second.decisions == []
    # Approved survives even a policy change.
    third = make(Policy(rules=(FREEZE,), dry_run=True), state=state)
    third.poll([event("A")], times=3)
    assert len(imds.requests) == 1 and third.decisions == []


def test_hook_runs_once_then_posts(make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path) -> None:
    hook = Hook(command=("/bin/true",))
    h = make(Policy(rules=(USER,), hook=hook), hook_runner=hook_runner(tmp_path))
    h.poll([event("A")], times=10)
    assert len(runs(tmp_path)) == 1 and imds.start_ids() == [["A"]]
    assert h.results() == [
        ("A", "approved", "rule user-initiated matched; hook exited with status 0; POST StartRequests succeeded")
    ]


def test_hook_failure_is_not_retried_until_the_event_changes(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path
) -> None:
    (tmp_path / "fail.flag").touch()
    h = make(Policy(rules=(USER,), hook=Hook(command=("/bin/true",))), hook_runner=hook_runner(tmp_path))
    h.poll([event("A")], times=10)
    assert len(runs(tmp_path)) == 1 and imds.requests == []
    assert h.results() == [("A", "hook_failed", "hook exited with status 1; not retried until the event changes")]
    assert h.decisions[0].counted and h.decisions[0].post_latency_seconds is None
    h.clock.now += 600  # still before NotBefore (T0 + 900)
    h.poll([event("A")], times=5)
    assert len(runs(tmp_path)) == 1
    (tmp_path / "fail.flag").unlink()
    moved = event("A", not_before=event("A").not_before + timedelta(minutes=5))  # type: ignore[operator]
    h.poll([moved], times=5)
    assert runs(tmp_path) == ["A 2025-06-15T15:21:40Z", "A 2025-06-15T15:26:40Z"]
    assert [d.result for d in h.decisions] == ["hook_failed", "approved"] and len(imds.requests) == 1


def test_polling_is_never_blocked_by_a_hook_or_a_post(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path
) -> None:
    (tmp_path / "hold.flag").touch()
    h = make(Policy(rules=(USER,), hook=Hook(command=("/bin/true",))), hook_runner=hook_runner(tmp_path))
    events = [event("A")]
    h.step(events)
    wait_until(lambda: runs(tmp_path), what="the hook to start")
    imds.gate.clear()  # the POST will hang in the server until released
    for _ in range(20):  # each poll returns while the hook is held: a wait on it would never end
        h.step(events)
    assert h.decisions == [] and imds.requests == []  # the hook still runs: nothing decided, nothing POSTed
    (tmp_path / "hold.flag").unlink()
    h.poll_until(events, lambda: _post_started(h))  # the hook passed: the POST is on its way
    for _ in range(20):  # each poll returns while the POST is held in the server, never released until below
        h.step(events)
    assert h.decisions == []
    imds.gate.set()
    h.poll_until(events, lambda: h.decisions)
    assert h.results()[0][1] == "approved" and imds.start_ids() == [["A"]]


def _post_started(h: Harness) -> bool:
    return ledger(h.approver) != {}


def test_a_post_being_sent_at_shutdown_is_unknown_after_the_restart_and_never_sent_again(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path
) -> None:
    policy = Policy(rules=(USER,), hook=Hook(command=("/bin/true",)))
    first = make(policy, hook_runner=hook_runner(tmp_path))
    imds.gate.clear()
    first.poll_until([event("A")], lambda: _post_started(first))
    first.close(timeout=0.2)
    state = encoded(first.approver)
    assert ledger(first.approver)["A"]["status"] == "posting" and first.decisions == []
    imds.gate.set()
    wait_until(lambda: len(imds.requests) == 1, what="the first POST, answered late")
    second = make(policy, hook_runner=hook_runner(tmp_path), state=state)
    second.poll([event("A")], times=5)
    assert len(runs(tmp_path)) == 1  # the hook had passed: not run again
    assert [(d.result, d.reason.split(":")[0]) for d in second.decisions] == [("unknown", "unknown")]
    assert len(imds.requests) == 1, "a POST that may have been sent is never sent again: at most once"
    assert ledger(second.approver)["A"]["status"] == "unknown"


def test_policy_change_on_restart_decides_non_final_events_again(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path
) -> None:
    (tmp_path / "fail.flag").touch()
    first = make(Policy(rules=(USER,), hook=Hook(command=("/bin/true",))), hook_runner=hook_runner(tmp_path))
    first.poll([event("A")], times=3)
    state = encoded(first.approver)
    same = make(
        Policy(rules=(USER,), hook=Hook(command=("/bin/true",))), hook_runner=hook_runner(tmp_path), state=state
    )
    same.poll([event("A")], times=3)
    assert len(runs(tmp_path)) == 1 and same.decisions == []
    (tmp_path / "fail.flag").unlink()
    fixed = make(
        Policy(rules=(USER,), hook=Hook(command=("/bin/true",), timeout_seconds=60)),
        hook_runner=hook_runner(tmp_path),
        state=state,
    )
    fixed.poll([event("A")], times=3)
    assert len(runs(tmp_path)) == 2 and [d.result for d in fixed.decisions] == ["approved"]


def test_unknown_vm_name_approves_nothing_and_says_why_once(
    make: Callable[..., Harness], imds: RecordingIMDS, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="se_exporter.approval")
    h = make()
    events = [event("A"), event("B")]
    h.poll(events, times=10, vm_name=None)
    assert imds.requests == []
    assert h.results() == [("A", "skipped", "vm_name_unknown"), ("B", "skipped", "vm_name_unknown")]
    assert [r.getMessage() for r in caplog.records] == [
        "approval: this VM's name is unknown (set --vm.name): approving nothing until it is known"
    ]
    h.poll(events, times=3)
    assert imds.start_ids() == [["A", "B"]]


def test_a_skip_is_logged_again_only_when_the_event_or_the_reason_changes(make: Callable[..., Harness]) -> None:
    h = make()
    b = event("B", event_source="Platform")
    h.poll([b], times=5)
    h.poll([event("B", event_source="Platform", description="Rescheduled")], times=5)
    h.poll([event("B", event_source="Platform", description="Rescheduled", resources=("vm-b", VM))], times=5)
    assert h.results() == [("B", "skipped", "no_rule"), ("B", "skipped", "no_rule"), ("B", "skipped", "not_leader")]


def test_not_before_within_waits_for_the_clock(make: Callable[..., Harness], imds: RecordingIMDS) -> None:
    h = make(Policy(rules=(Rule("late", event_types=("Reboot",), not_before_within_seconds=300),)))
    h.poll([event("A")], times=5)
    h.clock.now += 599
    h.poll([event("A")], times=5)
    assert imds.requests == [] and h.results() == [("A", "skipped", "no_rule")]
    h.clock.now += 1
    h.poll([event("A")], times=3)
    assert imds.start_ids() == [["A"]] and h.count("approved") == 1


def test_an_event_that_starts_while_its_hook_runs_is_not_posted(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path
) -> None:
    (tmp_path / "hold.flag").touch()
    h = make(Policy(rules=(USER,), hook=Hook(command=("/bin/true",))), hook_runner=hook_runner(tmp_path))
    h.step([event("A")])
    wait_until(lambda: runs(tmp_path), what="the hook to start")
    (tmp_path / "hold.flag").unlink()
    started = [event("A", event_status="Started", not_before=None)]
    h.poll_until(started, lambda: h.decisions)
    h.poll(started, times=3)
    assert imds.requests == []
    assert h.results() == [("A", "skipped", "not_scheduled")]
    assert h.decisions[0].reason.endswith("(after the hook exited with status 0)")


def test_decisions_on_gone_events_are_forgotten_after_the_retention(make: Callable[..., Harness]) -> None:
    h = make()
    h.poll([event("A")], times=3)
    h.poll([], times=1)
    assert list(ledger(h.approver)) == ["A"]
    h.clock.now += 7 * 24 * 3600 + 1
    h.poll([], times=1)
    assert ledger(h.approver) == {}


def test_other_decisions_on_gone_events_are_forgotten_after_ten_minutes(make: Callable[..., Harness]) -> None:
    h = make(Policy(rules=(USER,), dry_run=True))
    h.poll([event("A")], times=2)
    h.poll([], times=1)
    h.clock.now += OTHER_RETENTION_SECONDS - 1
    h.poll([], times=1)
    assert list(ledger(h.approver)) == ["A"]
    h.clock.now += 2
    h.poll([], times=1)
    assert ledger(h.approver) == {}


def test_the_ledger_is_bounded_however_many_events_come_and_go(make: Callable[..., Harness]) -> None:
    """500 new matching events at every poll once grew a dry run's ledger (and the state file) for 7 days."""
    h = make(Policy(rules=(USER,), dry_run=True))
    for generation in range(12):
        h.poll([event(f"G{generation}-{n}") for n in range(500)])
        h.clock.now += 1
    saved = ledger(h.approver)
    assert len(saved) == MAX_LEDGER_ENTRIES
    assert "G11-499" in saved and "G0-0" not in saved
    assert h.count("dry_run") == 12 * 500


GOOD_ROW = {
    "status": "approved",
    "revision": "r",
    "rule": "u",
    "attempts": 0,
    "retry_at": None,
    "decided_at": 1,
    "last_seen": 1,
    "policy": "x",
}


@pytest.mark.parametrize(
    "row",
    [
        b"",
        b"[]",
        json.dumps({"status": "skipped"}).encode(),
        json.dumps({"status": "approved", "revision": "r"}).encode(),
        json.dumps({**GOOD_ROW, "attempts": "0"}).encode(),
        json.dumps({**GOOD_ROW, "status": "hook_running"}).encode(),
        json.dumps({**GOOD_ROW, "surprise": 1}).encode(),
    ],
)
def test_a_malformed_row_is_refused_with_what_is_wrong(row: bytes) -> None:
    """Persistence.restore then starts the approver empty, logs and counts it (the store's case is tested
    in tests/fuzz/test_fuzz_config.py)."""
    assert restore_ledger({"approvals": {"A": json.dumps(GOOD_ROW).encode()}}, POLICY.fingerprint)
    with pytest.raises(ValueError, match=r"^approval state of A: "):
        restore_ledger({"approvals": {"A": row}}, POLICY.fingerprint)


# ----- impact and cause, and the NotBefore deadline ----------------------------------------------

LIVE_MIGRATION = "Virtual machine is being paused because of a memory-preserving Live Migration operation."
HOST_MAINTENANCE = "Host server is undergoing maintenance."
FAILURE = "Virtual machine has encountered a failure."


def test_a_rule_on_impacts_and_causes_approves_exactly_the_matching_events(
    make: Callable[..., Harness], imds: RecordingIMDS
) -> None:
    policy = Policy(
        rules=(
            Rule("live-migrations", impacts=(Impact.LIVE_MIGRATION,)),
            Rule("user-redeploys", impacts=(Impact.REDEPLOY,), causes=(Cause.USER,)),
        )
    )
    h = make(policy)
    events = [
        event("LM", event_type="Freeze", event_source="Platform", description=LIVE_MIGRATION),
        event("HOST", event_type="Freeze", event_source="Platform", description=HOST_MAINTENANCE),
        event("UR", event_type="Redeploy", event_source="User", description=""),
        event("PR", event_type="Redeploy", event_source="Platform", description=FAILURE),
        event("RB", event_type="Reboot", event_source="User"),
    ]
    h.poll(events, times=3)
    assert sorted(ids for ids in imds.start_ids()) == [["LM", "UR"]]
    decided = {d.event.event_id: (d.result, d.rule) for d in h.decisions}
    assert decided["LM"] == ("approved", "live-migrations") and decided["UR"] == ("approved", "user-redeploys")
    assert {decided[key][0] for key in ("HOST", "PR", "RB")} == {"skipped"}
    (why,) = [d.reason for d in h.decisions if d.event.event_id == "PR"]
    assert "(impact redeploy, cause failure)" in why


def test_an_event_first_seen_started_keeps_the_cause_failure_for_the_rules(
    make: Callable[..., Harness], imds: RecordingIMDS
) -> None:
    """A platform Reboot that appeared Started while the exporter watched is the hardware-failure path,
    whatever it does afterwards."""
    h = make(Policy(rules=(Rule("platform-only", causes=(Cause.PLATFORM,)),)))
    h.poll([])  # watching: the event appears Started at a later look
    h.poll([event("F", event_source="Platform", event_status="Started", not_before=None)])
    h.poll([event("F", event_source="Platform")], times=3)  # back to Scheduled: an IMDS glitch
    assert imds.requests == [] and ledger(h.approver) == {}
    assert [d.result for d in h.decisions] == ["skipped", "skipped"]
    assert "cause failure" in h.decisions[-1].reason


def test_an_event_whose_not_before_has_passed_is_expired_and_never_posted_also_across_a_restart(
    make: Callable[..., Harness], imds: RecordingIMDS
) -> None:
    first = make()
    first.clock.now = T0 + 901  # NotBefore is T0 + 900
    first.poll([event("A")], times=3)
    assert imds.requests == []
    assert first.results() == [("A", "expired", "rule user-initiated matched, but NotBefore passed 1 s ago")]
    assert first.decisions[0].counted
    state = encoded(first.approver)
    assert ledger(first.approver)["A"]["status"] == "expired"
    second = make(state=state)
    second.clock.now = T0 + 905
    second.poll([event("A")], times=3)
    assert imds.requests == [] and second.decisions == []  # decided once, also across the restart


def test_a_hook_that_outlives_the_time_left_is_stopped_at_not_before_and_expired(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path
) -> None:
    (tmp_path / "hold.flag").touch()  # the hook waits for as long as the flag exists
    runner = hook_runner(tmp_path, timeout=300)
    h = make(Policy(rules=(USER,), hook=Hook(command=("/bin/true",), timeout_seconds=300)), hook_runner=runner)
    h.clock.now = T0 + 898.5  # 1.5 s before NotBefore: the hook gets 1.5 s, not 300
    started = time.monotonic()
    h.poll_until([event("A")], lambda: h.decisions)
    assert time.monotonic() - started < 15
    assert len(runs(tmp_path)) == 1 and imds.requests == []
    ((event_id, result, reason),) = h.results()
    assert (event_id, result) == ("A", "expired")
    assert reason.startswith("hook was still running at NotBefore (1.")
    assert reason.endswith("its processes were stopped")


# ----- every POST attempt follows a fresh decision (a retried POST once approved a changed event) ------

MAX_ONE = Policy(rules=(Rule("single-vm-reboot", event_types=("Reboot",), max_resources=1),))
SINGLE = event("A", resources=(VM,))
CHANGES: dict[str, tuple[list[ScheduledEvent], float, tuple[str, str]]] = {
    # name: (what IMDS lists after the first attempt failed, clock step, (result, reason code))
    "four resources now": ([event("A", resources=(VM, "vm-b", "vm-c", "vm-d"))], 0, ("skipped", "no_rule")),
    "reordered: not the leader": ([event("A", resources=("vm-b", VM))], 0, ("skipped", "not_leader")),
    "gone": ([], 0, ("skipped", "not_listed")),
    "started": (
        [event("A", resources=(VM,), event_status="Started", not_before=None)],
        0,
        ("skipped", "not_scheduled"),
    ),
    "NotBefore passed": ([SINGLE], 901, ("expired", "NotBefore passed 1 s ago")),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_retry_is_never_posted_for_an_event_that_stopped_qualifying(
    make: Callable[..., Harness], imds: RecordingIMDS, change: str
) -> None:
    listed_after, step, (result, code) = CHANGES[change]
    imds.statuses[:] = [503]  # the first attempt fails; a retry would succeed
    reboots = Policy(rules=(Rule("reboots", event_types=("Reboot",)),))
    policy = MAX_ONE if change != "reordered: not the leader" else reboots
    h = make(policy, post_retry=PostRetry(attempts=5, backoff_base=2.0, backoff_cap=2.0))
    h.step([SINGLE])
    wait_until(lambda: len(imds.requests) == 1, what="the first POST")
    h.clock.now += step
    h.step(listed_after)  # before the retry (1-2 s away)
    h.poll_until(listed_after, lambda: h.decisions)
    assert len(imds.requests) == 1, "nothing POSTed after the event changed"
    ((event_id, got, reason),) = h.results()
    assert (event_id, got) == ("A", result) and reason == code
    assert h.decisions[0].reason.endswith("(decided again before POST attempt 2)")


def test_a_retry_that_still_qualifies_is_posted_and_approved(make: Callable[..., Harness], imds: RecordingIMDS) -> None:
    imds.statuses[:] = [503, 410]
    h = make(MAX_ONE, post_retry=PostRetry(attempts=5, backoff_base=0.05, backoff_cap=0.1))
    h.poll_until([SINGLE], lambda: h.decisions)
    assert imds.start_ids() == [["A"]] * 3
    ((event_id, got, _),) = h.results()
    assert (event_id, got) == ("A", "approved") and "succeeded at attempt 3" in h.decisions[0].reason


def test_nothing_is_approved_while_the_state_file_cannot_be_saved(
    make: Callable[..., Harness], imds: RecordingIMDS
) -> None:
    """A POST whose record could not be saved would be made again after a restart (and the hook run twice)."""
    saved = [False]
    h = make(can_remember=lambda: saved[0])
    h.poll([event("A")], times=3)
    assert imds.requests == [] and h.results() == [("A", "skipped", "state_unsaved")]
    saved[0] = True
    h.poll([event("A")], times=3)
    assert imds.start_ids() == [["A"]] and [d.result for d in h.decisions] == ["skipped", "approved"]


# ----- an approval is for exactly the revision that was decided and that the hook ran on -------------


def recording_hook(tmp_path: Path) -> HookRunner:
    """A real hook that appends "<EventType> <Resources JSON>" to seen.txt, holding while hold.flag exists."""
    code = (
        "import os, sys, time\n"
        "d = sys.argv[1]\n"
        "open(os.path.join(d, 'seen.txt'), 'a').write(os.environ['SE_EVENT_TYPE'] + ' '"
        " + os.environ['SE_EVENT_RESOURCES'] + '\\n')\n"
        "while os.path.exists(os.path.join(d, 'hold.flag')): time.sleep(0.01)\n"
    )
    return HookRunner(Hook(command=(sys.executable, "-c", code, str(tmp_path)), timeout_seconds=30))


def seen(tmp_path: Path) -> list[str]:
    path = tmp_path / "seen.txt"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


ANY_REBOOT_OR_FREEZE = Policy(
    rules=(Rule("maintenance", event_types=("Reboot", "Freeze")),), hook=Hook(command=("/bin/true",))
)
REVISIONS = {
    # name: (the event the hook starts on, the same EventId when the hook ends, what the change says)
    "Resources grew": (
        event("A", resources=(VM,)),
        event("A", resources=(VM, "vm-b")),
        "Resources [vm-a] -> [vm-a, vm-b]",
    ),
    "a Freeze became a Reboot": (
        event("A", event_type="Freeze", resources=(VM,)),
        event("A", resources=(VM,)),
        "EventType Freeze -> Reboot",
    ),
}


@pytest.mark.parametrize("name", sorted(REVISIONS))
def test_an_event_that_changed_while_its_hook_ran_is_decided_again_and_its_hook_run_again(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path, name: str
) -> None:
    before, after, change = REVISIONS[name]
    (tmp_path / "hold.flag").touch()
    h = make(ANY_REBOOT_OR_FREEZE, hook_runner=recording_hook(tmp_path))
    h.step([before])
    wait_until(lambda: seen(tmp_path), what="the hook to start on the first revision")
    h.step([after])  # IMDS changed the event meanwhile
    (tmp_path / "hold.flag").unlink()
    h.poll_until([after], lambda: h.count("approved"))
    assert seen(tmp_path) == [
        f"{before.event_type} {json.dumps(list(before.resources))}",
        f"{after.event_type} {json.dumps(list(after.resources))}",
    ]
    assert imds.start_ids() == [["A"]]  # one POST, after the hook ran on what was approved
    assert [d.result for d in h.decisions] == ["skipped", "approved"]
    assert h.decisions[0].reason == f"changed: the event changed ({change}) while its hook ran; deciding again"
    assert h.decisions[0].event == after and h.decisions[1].event == after


def test_a_post_retry_after_the_event_changed_runs_the_hook_again_first(
    make: Callable[..., Harness], imds: RecordingIMDS, tmp_path: Path
) -> None:
    imds.statuses[:] = [503]  # the first attempt fails; the poster would retry in 1-2 s
    h = make(
        ANY_REBOOT_OR_FREEZE,
        hook_runner=recording_hook(tmp_path),
        post_retry=PostRetry(attempts=5, backoff_base=2.0, backoff_cap=2.0),
    )
    first, grown = event("A", resources=(VM,)), event("A", resources=(VM, "vm-b"))
    h.poll_until([first], lambda: len(imds.requests) == 1)
    h.step([grown])  # before the retry
    h.poll_until([grown], lambda: h.count("approved"))
    assert seen(tmp_path) == ['Reboot ["vm-a"]', 'Reboot ["vm-a", "vm-b"]']
    assert imds.start_ids() == [["A"], ["A"]]
    assert [d.result for d in h.decisions] == ["skipped", "approved"]
    assert h.decisions[0].reason == (
        "changed: the event changed (Resources [vm-a] -> [vm-a, vm-b]); deciding again "
        "(decided again before POST attempt 2)"
    )


def test_a_post_waits_for_a_look_taken_after_a_pause_of_the_process() -> None:
    """Issue 38: after a SIGSTOP (a Freeze pauses the VM) the poster woke up with the poll loop and POSTed on
    the view from before the pause; the event had started meanwhile (the soak found it)."""
    import threading

    from se_exporter.approval.approver import LastLook

    now = [1000.0]
    mono = [50.0]
    lock = threading.Lock()
    view = LastLook(lock, fresh_within=5.0, clock=lambda: now[0], monotonic=lambda: mono[0])
    with lock:
        view.update({}, "vm-a", now[0])
    now[0] += 12.0  # the pause: both clocks moved on
    mono[0] += 12.0
    looked, updated = threading.Event(), []

    def poll_loop_looks_again() -> None:
        looked.wait(5)
        with lock:
            updated.append(now[0])
            view.update({}, "vm-a", now[0])

    threading.Thread(target=poll_loop_looks_again, daemon=True).start()
    began = time.monotonic()
    with lock:
        looked.set()
        view.wait_fresh(timeout=10)  # the lock is released while it waits: the poll loop's look gets in
    assert updated == [1012.0], "it returned only once the poll loop had looked again"
    assert time.monotonic() - began < 5, "and at once then, not at its timeout"


def test_the_poster_waits_for_its_request_slot_before_its_recheck_never_between_it_and_the_post() -> None:
    """Issue 38 (the soak found it): the recheck came first, then the POST waited for its 5 requests/s slot;
    a pause of the process inside that wait sent the POST 12 s later on the look from before the pause."""
    from se_exporter.approval.poster import BackgroundPoster, Dropped

    calls: list[str] = []

    def recheck(items: tuple[str, ...]) -> tuple[list[tuple[str, str]], list[Dropped[str]]]:
        calls.append("recheck")
        return [(item, item) for item in items], []

    poster: BackgroundPoster[str] = BackgroundPoster(
        lambda ids: calls.append(f"post {','.join(ids)}"), recheck, pace=lambda: calls.append("pace")
    )
    poster.submit(["E1"])
    poster.wait(5)
    poster.close()
    assert calls == ["pace", "recheck", "post E1"]
