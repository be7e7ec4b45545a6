"""Auto-approval end to end: the real exporter process over loopback, against the IMDS simulator
(ground truth: every POST it received) and the recording ``FakeIMDS`` (headers, and an IMDS that
keeps listing an approved event as Scheduled, as a lagging IMDS may).

The unit tests in this folder drive the ``Approver`` directly; here the same promises are checked
on what an operator sees: the POSTs IMDS receives, ``approvals_total`` and the
``scheduled_event.approval`` lines on stderr (``--log.format=json``), over many polls and restarts.
"No second POST over many polls" always waits until the exporter has made N more GET polls,
counted on the server.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from se_exporter.approval.approver import POST_RETRY_DELAYS_SECONDS
from se_exporter.approval.poster import PostRetry
from se_exporter.simulator import SELF, EventPlan, SimClock, SimulatorServer, SimWorld
from tests.approval.helpers import DESIGN_POLICY, TESTDATA
from tests.support.exporter_process import REPO, ExporterProcess
from tests.support.exposition import series, value
from tests.support.fake_imds import Answer, FakeIMDS, Seen, document
from tests.support.state_file import saved_rows
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]

POLL = 0.25  # --poll.interval
MANY_POLLS = 20  # "many polls" after the decisions: each promise must still hold after this many more
SOME_POLLS = 12  # the same, where the test has several such phases (keeps the file near a minute)
RESULTS = ("approved", "dry_run", "failed", "hook_failed")
TYPES = ("Freeze", "Reboot", "Redeploy", "Preempt", "Terminate")
EVENTS_PATH = "/metadata/scheduledevents"


# ----- harness ----------------------------------------------------------------------------------


@pytest.fixture
def sim() -> Iterator[SimulatorServer]:
    """The simulator on loopback, real clock at speed 1: an event approved is Started at once."""
    world = SimWorld(clock=SimClock(1.0), rng=random.Random(4))
    server = SimulatorServer(world).start()
    yield server
    server.stop()


@dataclass
class Post503Run:
    server: SimulatorServer
    exporter: ExporterProcess
    event_id: str


@pytest.fixture(scope="module", autouse=True)
def post_503_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Post503Run]:
    """The POST-5xx scenario, started before this module's first test and checked by its last one.

    It spends 25-30 s waiting on constants: the poster's backoff between its attempts
    (0.5-1, 1-2, 2-4 and 4-8 s) and the approver's first retry delay (15 s). Running it in the
    background while the other tests run keeps the file near a minute. It has its own simulator,
    state file and ports, so it shares nothing with them.
    """
    tmp = tmp_path_factory.mktemp("post-503")
    world = SimWorld(clock=SimClock(1.0), rng=random.Random(503))
    server = SimulatorServer(world).start()
    server.faults.fail_next(503, PostRetry().attempts, method="POST")  # then IMDS recovers
    # Started for an hour, not the simulator's minute: the module's last test, which finds it Started, may run
    # minutes after the approval on a loaded machine (a full run found it already gone).
    event_id = world.add_event(EventPlan("Reboot", "User", resources=(SELF, "other-vm"), started_for=3600.0))
    exporter = ExporterProcess(
        *exporter_args(server.url, design_policy(tmp), tmp / "state.db"), log_path=tmp / "exporter.log"
    )
    yield Post503Run(server, exporter, event_id)
    if exporter.proc.poll() is None:
        exporter.proc.kill()
        exporter.proc.wait(10)
    server.stop()


def write_policy(tmp_path: Path, text: str, name: str = "approval.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def design_policy(
    tmp_path: Path,
    *,
    leader: str = "first_resource",
    dry_run: bool = False,
    extra: str = "",
    name: str = "approval.yaml",
) -> Path:
    text = DESIGN_POLICY.format(leader=leader, dry_run=str(dry_run).lower()) + extra
    return write_policy(tmp_path, text, name)


def hook_section(script: Path, timeout: float = 10) -> str:
    return f"hook:\n  command: [{script}]\n  timeout_seconds: {timeout:g}\n"


def exporter_args(imds_url: str, policy: Path, state: Path, *extra: str) -> tuple[str, ...]:
    return (
        f"--imds.url={imds_url}",
        f"--poll.interval={int(POLL * 1000)}ms",
        f"--approval.config={policy}",
        f"--state.file={state}",
        "--log.format=json",
        *extra,
    )


def audit(exporter: ExporterProcess) -> list[dict[str, Any]]:
    """The ``scheduled_event.approval`` lines the exporter wrote to stderr, in order."""
    records = []
    for line in exporter.logs().splitlines():
        try:
            record = json.loads(line)
        except ValueError:  # a line still being written, or not ours
            continue
        if isinstance(record, dict) and record.get("event") == "scheduled_event.approval":
            records.append(record)
    return records


def results(exporter: ExporterProcess, event_id: str) -> list[str]:
    return [r["scheduled_event.approval.result"] for r in audit(exporter) if r["scheduled_event.id"] == event_id]


def reasons(exporter: ExporterProcess, event_id: str) -> list[str]:
    return [r["scheduled_event.approval.reason"] for r in audit(exporter) if r["scheduled_event.id"] == event_id]


def approvals_total(exporter: ExporterProcess) -> dict[tuple[str, str], float]:
    """approvals_total by (event_type, result), every known combination present."""
    text = exporter.metrics()
    counts = {}
    for event_type in TYPES:
        for result in RESULTS:
            sample = value(text, "azure_scheduled_events_approvals_total", event_type=event_type, result=result)
            assert sample is not None, f"approvals_total{{{event_type},{result}}} missing"
            counts[(event_type, result)] = sample
    return counts


def nonzero(counts: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {key: count for key, count in counts.items() if count}


def sim_polls(server: SimulatorServer) -> int:
    return sum(r.method == "GET" and r.path.startswith(EVENTS_PATH) for r in server.world.truth.requests())


def sim_posts(server: SimulatorServer) -> list[Any]:
    """Every POST the simulator answered, also the ones a fault turned into an error."""
    return [r for r in server.world.truth.requests() if r.method == "POST"]


def posted_ids(server: SimulatorServer) -> list[list[str]]:
    """The EventIds of every StartRequests POST that reached the simulated IMDS, one list per POST."""
    out = []
    for record in server.world.truth.approvals():
        assert record.valid, f"the simulator rejected an approval body: {record.body!r}"
        out.append(start_request_ids(record.body))
    return out


def start_request_ids(body: str | bytes) -> list[str]:
    """The EventIds of a POST body, asserting it has exactly the documented shape."""
    data = json.loads(body)
    assert set(data) == {"StartRequests"}, data
    assert data["StartRequests"] and all(set(item) == {"EventId"} for item in data["StartRequests"]), data
    return [item["EventId"] for item in data["StartRequests"]]


def wait_more_polls(count: Callable[[], int], polls: int = MANY_POLLS) -> None:
    """Wait until the exporter has polled ``polls`` more times (counted on the server)."""
    target = count() + polls
    wait_for(lambda: count() >= target, polls * POLL * 3 + 5, f"{polls} more polls")


def status_in_sim(server: SimulatorServer, event_id: str) -> str | None:
    return next((e.status for e in server.world.snapshot().events if e.event_id == event_id), None)


# ----- the simulator: exactly the matching, led events, each once --------------------------------


@pytest.mark.parametrize(
    ("leader", "vm_flag"),
    [("first_resource", ()), ("any_listed", ("--vm.name=SIM-VM-0",))],
    ids=["first_resource-learned-name", "any_listed-vm-name-flag"],
)
def test_exactly_the_matching_led_events_are_posted_each_once(
    leader: str, vm_flag: tuple[str, ...], sim: SimulatorServer, tmp_path: Path, start_exporter: StartExporter
) -> None:
    add = sim.world.add_event
    led_user = add(EventPlan("Reboot", "User", resources=(SELF, "other-vm")))
    led_freeze = add(EventPlan("Freeze", "Platform", duration=5, resources=(SELF,)))
    second_user = add(EventPlan("Redeploy", "User", resources=("other-vm", SELF)))
    skips = {
        add(EventPlan("Reboot", "User", resources=("other-vm", "third-vm"))): "not_this_vm",
        add(EventPlan("Reboot", "Platform", resources=(SELF,))): "no_rule",  # source
        add(EventPlan("Redeploy", "Platform", duration=0, resources=(SELF,))): "no_rule",  # type
        add(EventPlan("Freeze", "Platform", duration=-1, resources=(SELF,))): "no_rule",  # unknown duration
        add(EventPlan("Freeze", "Platform", duration=30, resources=(SELF,))): "no_rule",  # too long
        # Already Started, and Started still at the end, however slowly the machine gets there (not the default minute).
        add(EventPlan("Reboot", "User", notice=None, started_for=3600.0, resources=(SELF,))): "not_scheduled",
    }
    approved = {led_user: "user-initiated", led_freeze: "short-freeze"}
    if leader == "any_listed":
        approved[second_user] = "user-initiated"
    else:
        skips[second_user] = "not_leader"

    exporter = start_exporter(
        *exporter_args(sim.url, design_policy(tmp_path, leader=leader), tmp_path / "state.db", *vm_flag)
    )

    def decided() -> bool:
        ids = [i for post in posted_ids(sim) for i in post]
        return set(ids) >= set(approved) and all(results(exporter, i) for i in skips)

    wait_for(decided, 20, "the first decisions")
    assert all(status_in_sim(sim, event_id) == "Started" for event_id in approved)
    # A matching led event that appears later, once the first ones are decided: a POST of its own.
    late = add(EventPlan("Freeze", "Platform", duration=2, resources=(SELF, "other-vm")))
    approved[late] = "short-freeze"
    wait_for(lambda: [late] in posted_ids(sim), 10, "the late event approved")
    wait_more_polls(lambda: sim_polls(sim))

    posts = posted_ids(sim)
    flat = [event_id for post in posts for event_id in post]
    assert sorted(flat) == sorted(approved), f"POSTs {posts}, expected each of {sorted(approved)} exactly once"
    assert [late] in posts
    assert len(sim_posts(sim)) == len(posts), "every POST reached IMDS (no fault here)"
    for record in sim.world.truth.approvals():
        assert set(record.outcomes.values()) == {"started"}, record  # never an already-started or unknown id
    for event_id, code in skips.items():
        expected = "Started" if code == "not_scheduled" else "Scheduled"
        assert status_in_sim(sim, event_id) == expected, "a skipped event was started"

    type_of = {e.event_id: e.plan.event_type for e in sim.world.snapshot().events}
    expected_counts: dict[tuple[str, str], float] = {}
    for event_id in approved:
        key = (type_of[event_id], "approved")
        expected_counts[key] = expected_counts.get(key, 0) + 1
    assert nonzero(approvals_total(exporter)) == expected_counts
    text = exporter.metrics()
    assert value(text, "azure_scheduled_events_imds_requests_total", method="POST", code="200") == len(posts)

    # The audit trail: one line per approval, one per skipped event (not one per poll), nothing else.
    for event_id, rule in approved.items():
        assert results(exporter, event_id) == ["approved"], event_id
        (line,) = [r for r in audit(exporter) if r["scheduled_event.id"] == event_id]
        assert line["scheduled_event.approval.rule"] == rule
        assert "POST StartRequests succeeded" in line["scheduled_event.approval.reason"]
        assert line["scheduled_event.approval.post_latency_s"] >= 0
    for event_id, code in skips.items():
        assert results(exporter, event_id) == ["skipped"], f"{event_id} ({code}) skip not logged exactly once"
        (reason,) = reasons(exporter, event_id)
        assert reason.startswith(f"{code}: "), reason
    assert {r["scheduled_event.id"] for r in audit(exporter)} == set(approved) | set(skips)
    assert exporter.stop() == 0


# ----- the recording IMDS: header, body, and no second POST across restarts ------------------------

LED_EVENT = {
    "EventId": "E1",
    "EventType": "Reboot",
    "ResourceType": "VirtualMachine",
    "Resources": ["vm-a", "vm-b"],
    "EventStatus": "Scheduled",
    "NotBefore": "Mon, 11 Apr 2099 22:26:58 GMT",
    "Description": "Virtual machine is going to be restarted as requested by authorized user.",
    "EventSource": "User",
    "DurationInSeconds": -1,
}


def lagging_imds(seen: Seen) -> Answer:
    """CollectorAnswers 200 to a POST but keeps listing E1 as Scheduled (IMDS may lag behind an approval)."""
    return Answer(body=b"") if seen.method == "POST" else document(1, LED_EVENT)


def fake_posts(fake: FakeIMDS) -> list[Seen]:
    return [s for s in fake.event_requests() if s.method == "POST"]


def fake_polls(fake: FakeIMDS) -> int:
    return sum(s.method == "GET" for s in fake.event_requests())


def saved_status(state: Path, event_id: str) -> str | None:
    try:
        rows = saved_rows(state)
    except sqlite3.Error:  # not made yet
        return None
    status = rows.get("approvals", {}).get(event_id, {}).get("status")
    return None if status is None else str(status)


def test_post_has_the_documented_header_and_body_and_is_not_repeated_across_restarts(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    fake_imds.respond = lagging_imds
    state = tmp_path / "state" / "state.db"
    args = exporter_args(fake_imds.url, design_policy(tmp_path), state)  # VM name vm-a from compute metadata
    first = start_exporter(*args)
    wait_for(lambda: fake_posts(fake_imds), 20, "the approval POST")

    (post,) = fake_posts(fake_imds)
    headers = {name.lower(): text for name, text in post.headers.items()}
    assert headers.get("metadata") == "true"
    assert headers.get("content-type") == "application/json"
    assert "x-forwarded-for" not in headers
    assert post.path == f"{EVENTS_PATH}?api-version=2020-07-01"
    assert json.loads(post.body) == {"StartRequests": [{"EventId": "E1"}]}
    wait_for(lambda: results(first, "E1") == ["approved"], 10, "the approved audit line")
    wait_for(lambda: saved_status(state, "E1") == "approved", 10, "the approval saved")
    saved = state.stat()
    wait_more_polls(lambda: fake_polls(fake_imds), SOME_POLLS)  # IMDS still lists E1 as Scheduled
    assert len(fake_posts(fake_imds)) == 1
    unchanged = state.stat()  # each save renames a new file into place: a new inode
    assert (unchanged.st_ino, unchanged.st_mtime_ns) == (saved.st_ino, saved.st_mtime_ns), (
        "polls that changed nothing rewrote the state file"
    )
    assert nonzero(approvals_total(first)) == {("Reboot", "approved"): 1}

    # SIGTERM, then SIGKILL: each restart reads the approval back and never POSTs again.
    previous = first
    for stop_signal in (signal.SIGTERM, signal.SIGKILL):
        code = previous.stop(stop_signal)
        assert code == (0 if stop_signal == signal.SIGTERM else -signal.SIGKILL)
        assert saved_status(state, "E1") == "approved"
        restarted = start_exporter(*args)
        restarted.wait_ready()
        wait_more_polls(lambda: fake_polls(fake_imds), SOME_POLLS)
        assert len(fake_posts(fake_imds)) == 1, f"approved again after {signal.Signals(stop_signal).name}"
        assert nonzero(approvals_total(restarted)) == {}
        assert audit(restarted) == [], "an approved event is final: no new decision after a restart"
        previous = restarted
    assert previous.stop() == 0


def test_an_approved_event_still_scheduled_says_so_on_metrics_across_a_restart_until_it_is_gone(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter
) -> None:
    """Azure's docs: an approved event "may not start immediately"; on shared hardware Azure may wait for
    every VM on the host to approve. /metrics says this exporter approved it, and when."""
    listed = [LED_EVENT]
    fake_imds.respond = lambda seen: Answer(body=b"") if seen.method == "POST" else document(len(listed), *listed)
    state = tmp_path / "state" / "state.db"
    args = exporter_args(fake_imds.url, design_policy(tmp_path), state)
    first = start_exporter(*args)
    wait_for(lambda: fake_posts(fake_imds), 20, "the approval POST")
    posted_at = time.time()
    approved = "azure_scheduled_events_event_approved_timestamp_seconds"
    wait_for(
        lambda: value(first.metrics(), approved, event_id="E1", event_type="Reboot"), 10, "the approval on /metrics"
    )
    at = value(first.metrics(), approved, event_id="E1", event_type="Reboot")
    assert at is not None and posted_at - 30 < at <= posted_at + 5
    wait_for(lambda: saved_status(state, "E1") == "approved", 10, "the approval saved")
    assert first.stop() == 0
    restarted = start_exporter(*args)
    restarted.wait_ready()
    assert value(restarted.metrics(), approved, event_id="E1", event_type="Reboot") == at, "restored, not re-approved"
    listed.clear()  # Azure started and finished it
    wait_for(lambda: series(restarted.metrics(), approved) == [], 10, "the series gone with the event")
    assert len(fake_posts(fake_imds)) == 1
    assert restarted.stop() == 0


GROUP_POLICY = """\
leader: any_listed
group_approvers: [WestNO_1]
rules:
  - name: the-sets-user-events
    event_sources: [User]
    scope: group
"""


@pytest.mark.parametrize(("vm", "posts"), [("WestNO_1", 1), ("WestNO_2", 0)], ids=["approver", "another-member"])
def test_a_group_approver_approves_an_event_of_its_set_that_does_not_list_it(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, vm: str, posts: int
) -> None:
    """Azure's docs: a set's events reach every VM of it, and "a primary and secondary VM" should approve
    user-initiated events. The issue's reproduction: a Reboot listing only WestNO_0, seen on WestNO_1."""
    other = {**LED_EVENT, "Resources": ["WestNO_0"]}
    fake_imds.respond = lambda seen: Answer(body=b"") if seen.method == "POST" else document(1, other)
    policy = write_policy(tmp_path, GROUP_POLICY)
    exporter = start_exporter(*exporter_args(fake_imds.url, policy, tmp_path / "state.db", f"--vm.name={vm}"))
    wait_for(lambda: audit(exporter), 20, "the approval decision")
    wait_more_polls(lambda: fake_polls(fake_imds), SOME_POLLS)
    assert [json.loads(post.body) for post in fake_posts(fake_imds)] == [{"StartRequests": [{"EventId": "E1"}]}] * posts
    (decision,) = audit(exporter)
    if posts:
        assert decision["scheduled_event.approval.result"] == "approved"
        assert "for the group: WestNO_1 is a group approver, not in Resources [WestNO_0]" in str(
            decision["scheduled_event.approval.reason"]
        )
    else:
        assert decision["scheduled_event.approval.result"] == "skipped"
        assert decision["scheduled_event.approval.reason"] == "not_this_vm: WestNO_2 is not in Resources [WestNO_0]"
    assert exporter.stop() == 0


def test_an_approval_is_logged_before_the_start_it_causes(
    sim: SimulatorServer, tmp_path: Path, start_exporter: StartExporter
) -> None:
    event_id = sim.world.add_event(EventPlan("Reboot", "User", resources=(SELF,)))
    exporter = start_exporter(*exporter_args(sim.url, design_policy(tmp_path), tmp_path / "state.db"))
    wait_for(lambda: status_in_sim(sim, event_id) == "Started", 20, "the approved event started")

    def order() -> list[str]:
        lines = []
        for line in exporter.logs().splitlines():
            record = json.loads(line) if line.startswith("{") else {}
            if record.get("scheduled_event.id") == event_id:
                lines.append(record.get("scheduled_event.approval.result") or record["scheduled_event.transition"])
        return lines

    wait_for(lambda: "started" in order(), 10, "the started transition")
    assert order() == ["scheduled", "approved", "started"]


# ----- dry run -----------------------------------------------------------------------------------


def recording_hook(tmp_path: Path, tail: str = "exit 0") -> Path:
    """A hook that appends ``<time> <EventId>`` to ``runs`` and dumps its environment, then ``tail``."""
    script = tmp_path / "hook.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'env > "{tmp_path}/env-$SE_EVENT_ID"\n'
        f'echo "$(date +%s.%N) $SE_EVENT_ID" >> "{tmp_path}/runs"\n'
        f"{tail}\n"
    )
    script.chmod(0o755)
    return script


def hook_runs(tmp_path: Path) -> list[tuple[float, str]]:
    try:
        lines = (tmp_path / "runs").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [(float(at), event_id) for at, event_id in (line.split() for line in lines)]


def test_dry_run_never_posts_nor_runs_the_hook_also_across_a_restart(
    sim: SimulatorServer, tmp_path: Path, start_exporter: StartExporter
) -> None:
    add = sim.world.add_event
    reboot = add(EventPlan("Reboot", "User", resources=(SELF, "other-vm")))
    freeze = add(EventPlan("Freeze", "Platform", duration=3, resources=(SELF,)))
    not_led = add(EventPlan("Reboot", "User", resources=("other-vm", SELF)))
    hook = hook_section(recording_hook(tmp_path))
    state = tmp_path / "state.db"
    dry = design_policy(tmp_path, dry_run=True, extra=hook, name="dry.yaml")

    first = start_exporter(*exporter_args(sim.url, dry, state))
    wait_for(lambda: results(first, reboot) and results(first, freeze) and results(first, not_led), 20, "decisions")
    wait_more_polls(lambda: sim_polls(sim), SOME_POLLS)
    assert sim_posts(sim) == [] and sim.world.truth.approvals() == ()
    assert hook_runs(tmp_path) == [], "dry run must not run the hook"
    assert nonzero(approvals_total(first)) == {("Reboot", "dry_run"): 1, ("Freeze", "dry_run"): 1}
    assert results(first, reboot) == results(first, freeze) == ["dry_run"]
    assert results(first, not_led) == ["skipped"]
    for event_id in (reboot, freeze):
        (reason,) = reasons(first, event_id)
        assert reason.startswith("dry_run: rule ") and reason.endswith("would run the hook, then POST StartRequests")
    wait_for(lambda: saved_status(state, reboot) == saved_status(state, freeze) == "dry_run", 10, "dry runs saved")

    # Killed and restarted with the same policy: the dry-run decisions stand, nothing is POSTed.
    assert first.stop(signal.SIGKILL) == -signal.SIGKILL
    second = start_exporter(*exporter_args(sim.url, dry, state))
    second.wait_ready()
    wait_more_polls(lambda: sim_polls(sim), SOME_POLLS)
    assert sim_posts(sim) == [] and hook_runs(tmp_path) == []
    assert nonzero(approvals_total(second)) == {}
    assert [r["scheduled_event.approval.result"] for r in audit(second)] == ["skipped"]  # skips are not saved
    assert second.stop() == 0

    # README: "a restart with a changed policy decides pending events again": now for real, hook first.
    live = design_policy(tmp_path, dry_run=False, extra=hook, name="live.yaml")
    third = start_exporter(*exporter_args(sim.url, live, state))
    wait_for(
        lambda: sorted(i for post in posted_ids(sim) for i in post) == sorted([reboot, freeze]),
        20,
        "both approved under the live policy",
    )
    wait_more_polls(lambda: sim_polls(sim), 4)
    assert sorted(event_id for _, event_id in hook_runs(tmp_path)) == sorted([reboot, freeze])
    assert len(sim_posts(sim)) == len(posted_ids(sim))
    assert nonzero(approvals_total(third)) == {("Reboot", "approved"): 1, ("Freeze", "approved"): 1}
    assert third.stop() == 0


# ----- the hook at the exporter level ------------------------------------------------------------


def test_hook_success_gets_the_event_in_its_environment_then_the_event_is_posted(
    sim: SimulatorServer, tmp_path: Path, start_exporter: StartExporter
) -> None:
    event_id = sim.world.add_event(
        EventPlan("Reboot", "User", resources=(SELF, "other-vm"), description="Restart requested by the owner")
    )
    not_before = next(e.not_before for e in sim.world.snapshot().events)
    assert not_before is not None
    script = recording_hook(tmp_path, 'echo "drained for $SE_EVENT_ID"; exit 0')
    policy = design_policy(tmp_path, extra=hook_section(script) + "  inherit_env: [NODE_NAME]\n")
    env = {"NODE_NAME": "node-7", "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer s3cret"}
    exporter = start_exporter(*exporter_args(sim.url, policy, tmp_path / "state.db"), env=env)

    wait_for(lambda: posted_ids(sim) == [[event_id]], 20, "the approval after the hook")
    wait_for(lambda: results(exporter, event_id) == ["approved"], 10, "the approved audit line")
    wait_more_polls(lambda: sim_polls(sim), SOME_POLLS)
    assert posted_ids(sim) == [[event_id]] and len(sim_posts(sim)) == 1
    assert status_in_sim(sim, event_id) == "Started"
    ((ran_at, ran_for),) = hook_runs(tmp_path)
    assert ran_for == event_id
    assert ran_at < sim.world.truth.approvals()[0].real_time, "the POST must follow the hook"

    hook_env = dict(
        line.split("=", 1)
        for line in (tmp_path / f"env-{event_id}").read_text(encoding="utf-8").splitlines()
        if "=" in line
    )
    expected = {
        "SE_EVENT_ID": event_id,
        "SE_EVENT_TYPE": "Reboot",
        "SE_EVENT_STATUS": "Scheduled",
        "SE_EVENT_SOURCE": "User",
        "SE_EVENT_NOT_BEFORE": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(not_before))),
        "SE_EVENT_DURATION_SECONDS": "-1",
        "SE_EVENT_RESOURCES": '["sim-vm-0", "other-vm"]',
        "SE_EVENT_RESOURCE_TYPE": "VirtualMachine",
        "SE_EVENT_DESCRIPTION": "Restart requested by the owner",
        "SE_EVENT_IMPACT": "reboot",
        "SE_EVENT_CAUSE": "user",
        "SE_VM_NAME": "sim-vm-0",
        "SE_APPROVAL_RULE": "user-initiated",
        "NODE_NAME": "node-7",
    }
    assert {key: hook_env.get(key) for key in expected} == expected
    assert 0 < int(hook_env["SE_EVENT_SECONDS_LEFT"]) <= not_before - ran_at + 1
    assert not any(key.startswith(("OTEL_", "SE_EXPORTER_")) for key in hook_env), sorted(hook_env)

    assert nonzero(approvals_total(exporter)) == {("Reboot", "approved"): 1}
    (reason,) = reasons(exporter, event_id)
    assert "hook exited with status 0" in reason and reason.endswith("POST StartRequests succeeded")
    assert f"drained for {event_id}" in exporter.logs(), "the hook's output goes to the exporter's log"
    assert exporter.stop() == 0


def test_hook_failure_is_counted_not_posted_and_not_rerun_until_the_event_changes(
    sim: SimulatorServer, tmp_path: Path, start_exporter: StartExporter
) -> None:
    event_id = sim.world.add_event(EventPlan("Freeze", "Platform", duration=5, resources=(SELF,)))
    script = recording_hook(tmp_path, 'echo "not drained: $SE_EVENT_ID"; exit 1')
    exporter = start_exporter(
        *exporter_args(sim.url, design_policy(tmp_path, extra=hook_section(script)), tmp_path / "state.db")
    )

    wait_for(lambda: results(exporter, event_id) == ["hook_failed"], 20, "the hook_failed decision")
    wait_more_polls(lambda: sim_polls(sim), SOME_POLLS)
    assert [e for _, e in hook_runs(tmp_path)] == [event_id], "a failed hook is not rerun while the event is unchanged"
    assert sim_posts(sim) == [] and status_in_sim(sim, event_id) == "Scheduled"
    assert nonzero(approvals_total(exporter)) == {("Freeze", "hook_failed"): 1}
    (reason,) = reasons(exporter, event_id)
    assert f"hook exited with status 1; last output: not drained: {event_id}; not retried until" in reason

    # The event changes (a new NotBefore): it is decided again, so the hook runs again (and fails again).
    assert sim.world.reschedule(event_id, 600)
    wait_for(lambda: results(exporter, event_id) == ["hook_failed", "hook_failed"], 20, "the second hook run")
    wait_more_polls(lambda: sim_polls(sim), 6)
    assert [e for _, e in hook_runs(tmp_path)] == [event_id, event_id]
    assert sim_posts(sim) == []
    assert nonzero(approvals_total(exporter)) == {("Freeze", "hook_failed"): 2}
    assert exporter.stop() == 0


def test_hook_timeout_is_hook_failed_and_metrics_and_polls_go_on_meanwhile(
    sim: SimulatorServer, tmp_path: Path, start_exporter: StartExporter
) -> None:
    event_id = sim.world.add_event(EventPlan("Reboot", "User", resources=(SELF,)))
    marker = tmp_path / "hook-started"
    script = recording_hook(tmp_path, f'touch "{marker}"\nsleep 30')
    exporter = start_exporter(
        *exporter_args(sim.url, design_policy(tmp_path, extra=hook_section(script, timeout=3)), tmp_path / "state.db")
    )

    wait_for(marker.exists, 20, "the hook running")
    began, polls_before = time.monotonic(), sim_polls(sim)
    scrapes_meanwhile, polls_meanwhile = 0, 0
    while not results(exporter, event_id) and time.monotonic() - began < 30:  # 30: the hook's sleep, not cut
        assert exporter.get("/metrics").status_code == 200
        if not results(exporter, event_id):  # answered while the hook still ran: it never waits for one
            scrapes_meanwhile += 1
            polls_meanwhile = sim_polls(sim) - polls_before
    hook_took = time.time() - marker.stat().st_mtime  # since the hook started, however late the test saw it
    assert results(exporter, event_id) == ["hook_failed"]
    assert 2 <= hook_took < 30, f"the 3 s timeout took {hook_took:.1f} s to report"
    assert scrapes_meanwhile >= 1 and polls_meanwhile >= 1, "scrapes and polls go on while the hook runs"

    wait_more_polls(lambda: sim_polls(sim), 8)
    assert len(hook_runs(tmp_path)) == 1 and sim_posts(sim) == []
    assert nonzero(approvals_total(exporter)) == {("Reboot", "hook_failed"): 1}
    (reason,) = reasons(exporter, event_id)
    assert reason.startswith("hook timed out after 3 s; its processes were stopped")
    assert exporter.stop() == 0


# ----- invalid policy files at the command line ---------------------------------------------------

INVALID = TESTDATA / "invalid"
CLI_FIXTURES = [
    "duration_string",  # the README's example
    "unknown_top_key",
    "unknown_leader",
    "rules_empty",
    "rule_only_name",
    "unknown_event_type",
    "min_greater_than_max",
    "hook_not_executable",
]


def expected_message(path: Path) -> str:
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: ")
    return first.removeprefix("# expect: ")


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    env["OTEL_SDK_DISABLED"] = "true"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "se_exporter",
            *args,
            "--imds.url=http://127.0.0.1:9",
            "--web.listen-address=127.0.0.1:0",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("name", CLI_FIXTURES)
def test_invalid_policy_file_stops_the_exporter_with_one_line_naming_the_key(name: str) -> None:
    path = INVALID / f"{name}.yaml"
    done = run_cli(f"--approval.config={path}")
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"se-exporter: error: approval config {path}: {expected_message(path)}"), line


def test_missing_policy_file_stops_the_exporter(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "approval.yaml"
    done = run_cli(f"--approval.config={path}")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"se-exporter: error: approval config {path}: cannot read the file: No such file or directory"
    ]


@pytest.mark.parametrize(("name", "where"), [("duplicate_key", "at line 6, column 5"), ("not_yaml", "at line ")])
def test_yaml_syntax_error_is_one_line_with_its_position(name: str, where: str) -> None:
    path = INVALID / f"{name}.yaml"
    done = run_cli(f"--approval.config={path}")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"se-exporter: error: approval config {path}: {expected_message(path)}")
    assert where in line and "<unicode string>" not in line


# ----- POST 5xx: the poster's retries, failed, then the approver's retry (runs in the background) ---


def test_post_5xx_is_retried_by_the_poster_then_failed_then_retried_by_the_approver(post_503_run: Post503Run) -> None:
    sim, exporter, event_id = post_503_run.server, post_503_run.exporter, post_503_run.event_id
    attempts = PostRetry().attempts
    first_retry = 15.0  # README: a failed POST "is tried again at most twice, 15 s and 60 s later"
    assert (first_retry, 60.0) == POST_RETRY_DELAYS_SECONDS
    wait_for(lambda: results(exporter, event_id) == ["failed", "approved"], 60, "failed, then approved")

    posts = sim_posts(sim)
    assert [r.status for r in posts] == [503] * attempts + [200], "the poster sends its whole retry budget, no more"
    failed, retry = posts[:attempts], posts[attempts]
    assert retry.real_monotonic - failed[-1].real_monotonic >= first_retry - 0.5, "retried before its delay"
    polls_during = [
        r
        for r in sim.world.truth.requests()
        if r.method == "GET" and failed[0].real_monotonic < r.real_monotonic < failed[-1].real_monotonic
    ]
    assert len(polls_during) >= attempts, "polling must go on while the client backs off"
    assert posted_ids(sim) == [[event_id]]  # the failed ones never reached the simulated IMDS
    assert status_in_sim(sim, event_id) == "Started"

    failure, success = reasons(exporter, event_id)
    assert failure.startswith(f"POST StartRequests failed after {attempts} attempt(s): IMDSHTTPError: ")
    assert failure.endswith(f"POST retry 1/{len(POST_RETRY_DELAYS_SECONDS)} in {first_retry:g} s if still approvable")
    assert success.endswith("POST retry after 1 failure(s); POST StartRequests succeeded")
    (failed_line,) = [r for r in audit(exporter) if r["scheduled_event.approval.result"] == "failed"]
    assert failed_line["level"] == "error"
    assert nonzero(approvals_total(exporter)) == {("Reboot", "failed"): 1, ("Reboot", "approved"): 1}
    text = exporter.metrics()
    assert value(text, "azure_scheduled_events_imds_requests_total", method="POST", code="503") == attempts
    assert value(text, "azure_scheduled_events_imds_requests_total", method="POST", code="200") == 1

    wait_more_polls(lambda: sim_polls(sim), 4)
    assert len(sim_posts(sim)) == attempts + 1, "approved is final"
    assert exporter.stop() == 0
