"""SIGKILL at random moments while 1,000 events come and go (issue 64): every transition reaches the
collector, each lifecycle opens once and closes once, and no event is POSTed twice.

A loopback IMDS plays a 90-second world: 1,000 events, one every 60 ms, each Scheduled for 4 s, Started for
2 s, then gone (about a hundred listed at once); every tenth is a user's Freeze that the policy approves.
The exporter (state file, OTLP logs to a live receiver, the policy) is killed with SIGKILL 20 times at
moments drawn from a seeded generator (during start-up too), restarted each time, then left to run until
the world is empty and its spool has drained.

"Delivered exactly once" is what DESIGN.md promises a receiver that drops duplicates by ``log.record.uid``:
each transition's record arrives, under one uid; a batch the collector took just before a kill, whose
acknowledgement did not reach the disk, is sent again with the same uids (counted and printed).
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from email.utils import formatdate
from pathlib import Path

import pytest

from tests.otlp import OTLPHttpReceiver
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import Answer, FakeIMDS, Seen
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]

StartExporter = Callable[..., ExporterProcess]
EVENTS = 1000
EVERY = 0.06  # seconds between two events' first listing
SCHEDULED_FOR = 4.0
STARTED_FOR = 2.0
KILLS = 20
POLICY = "rules:\n  - name: user-freezes\n    event_sources: [User]\n"
CLOSING = ("completed", "cancelled", "removed")


class World:
    """The IMDS's events at each moment of its life (monotonic seconds since it began)."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.wall = time.time()
        self.end = EVENTS * EVERY + SCHEDULED_FOR + STARTED_FOR

    def elapsed(self) -> float:
        return time.monotonic() - self.began

    def document(self) -> bytes:
        now = self.elapsed()
        events = []
        first = max(0, int((now - SCHEDULED_FOR - STARTED_FOR) / EVERY))
        for n in range(first, min(EVENTS, int(now / EVERY) + 1)):
            appears = n * EVERY
            age = now - appears
            if age < 0 or age >= SCHEDULED_FOR + STARTED_FOR:
                continue
            started = age >= SCHEDULED_FOR
            user = n % 10 == 0
            events.append(
                {
                    "EventId": f"E{n:04d}",
                    "EventType": "Freeze" if user else "Reboot",
                    "ResourceType": "VirtualMachine",
                    "Resources": ["vm-a"],
                    "EventStatus": "Started" if started else "Scheduled",
                    "NotBefore": "" if started else formatdate(self.wall + appears + SCHEDULED_FOR, usegmt=True),
                    "Description": f"churn event {n}",
                    "EventSource": "User" if user else "Platform",
                    "DurationInSeconds": 5 if user else -1,
                }
            )
        return json.dumps({"DocumentIncarnation": 1 + int(now / EVERY), "Events": events}).encode()


def test_sigkill_at_random_moments_of_a_1000_event_churn_loses_nothing_and_repeats_nothing(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: StartExporter, otlp_http_receiver: OTLPHttpReceiver
) -> None:
    world = World()
    posted: list[str] = []

    def respond(seen: Seen) -> Answer:
        if seen.method == "POST":
            posted.extend(request["EventId"] for request in json.loads(seen.body)["StartRequests"])
            return Answer()
        fake_imds.requests.clear()  # a poll every 250 ms for minutes: the fake keeps only what this test reads
        return Answer(body=world.document())

    fake_imds.respond = respond
    (tmp_path / "policy.yaml").write_text(POLICY)
    state = tmp_path / "state.db"
    args = (
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
        "--vm.name=vm-a",
        f"--state.file={state}",
        f"--approval.config={tmp_path / 'policy.yaml'}",
    )
    env = {**otlp_http_receiver.env, "OTEL_TRACES_EXPORTER": "none"}
    moments = random.Random(64)
    for _ in range(KILLS):
        exporter = start_exporter(*args, env=env)
        time.sleep(moments.uniform(0.2, 3.0))  # a random moment of its life: start-up, a poll, a commit
        exporter.proc.send_signal(signal.SIGKILL)
        assert exporter.proc.wait(10) == -signal.SIGKILL
    last = start_exporter(*args, env=env)
    wait_for(lambda: world.elapsed() > world.end + 2, 180, "the world empty")
    wait_for(lambda: "azure_scheduled_events_event_info{" not in last.metrics(), 30, "no event listed")
    wait_for(lambda: value(last.metrics(), "azure_scheduled_events_log_spool_depth") == 0, 60, "the spool drained")
    assert last.stop() == 0

    records = otlp_http_receiver.store.find_logs(event_name="scheduled_event.transition")
    by_uid: dict[str, list[dict[str, object]]] = defaultdict(list)
    for record in records:
        by_uid[str(record.attributes["log.record.uid"])].append(dict(record.attributes))
    assert all(all(copy == copies[0] for copy in copies) for copies in by_uid.values()), "a uid, one record"
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for copies in by_uid.values():
        kinds[str(copies[0]["scheduled_event.id"])][str(copies[0]["scheduled_event.transition"])] += 1
    broken = {event: dict(seen) for event, seen in kinds.items() if not _opens_and_closes_once(seen)}
    assert not broken, f"lifecycles that did not open once and close once: {broken}"
    assert len(kinds) > EVENTS // 2, f"only {len(kinds)} events seen"
    again = Counter(posted)
    assert not [event for event, count in again.items() if count > 1], f"POSTed twice: {again.most_common(3)}"
    connection = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    try:
        ledger = [json.loads(body) for (body,) in connection.execute("SELECT body FROM approvals")]
        waiting = connection.execute("SELECT count(*) FROM spool").fetchone()[0]
    finally:
        connection.close()
    assert waiting == 0
    assert {entry["status"] for entry in ledger} <= {"approved", "unknown", "expired", "failed", "post_due"}
    resent = len(records) - len(by_uid)
    print(
        f"\n{len(kinds)} events, {len(by_uid)} transitions delivered ({resent} sent again after a kill, same uid), "
        f"{len(posted)} POSTs for {len(again)} events, ledger of {len(ledger)}"
    )


def _opens_and_closes_once(seen: Counter[str]) -> bool:
    """One opening (``scheduled``, ``listed``, or ``started`` for an event first seen Started), at most one
    ``started``, one closing."""
    opened = seen["scheduled"] + seen["listed"] or seen["started"]
    return opened == 1 and seen["started"] <= 1 and sum(seen[kind] for kind in CLOSING) == 1
