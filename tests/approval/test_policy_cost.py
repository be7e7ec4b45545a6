"""A pattern and a Description that once held the poll loop (and the GIL) for seconds at every poll
(issue 22, point 9): ``description_pattern`` is matched by RE2 in linear time, and an unchanged event
skipped once is not matched again at every poll. The real exporter over loopback."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.fake_imds import Answer, FakeIMDS, scheduled_event

pytestmark = pytest.mark.posix

POLICY = "rules:\n  - name: backtracking\n    description_pattern: '^(a|aa)*c$'\n"


def reboot(event_id: str, description: str) -> dict[str, object]:
    return scheduled_event(event_id, Description=description)


def test_a_pathological_pattern_and_description_never_hold_the_exporter(
    tmp_path: Path, fake_imds: FakeIMDS, start_exporter: Callable[..., ExporterProcess]
) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY)  # Python's re takes years on this Description
    events = [reboot("HUGE", "a" * 400_000), *(reboot(f"E{n}", "Planned maintenance") for n in range(500))]
    body = json.dumps({"DocumentIncarnation": 1, "Events": events}).encode()
    fake_imds.respond = lambda seen: Answer(body=body)
    exporter = start_exporter(
        f"--imds.url={fake_imds.url}",
        "--poll.interval=250ms",
        "--vm.name=vm-a",
        f"--approval.config={tmp_path / 'policy.yaml'}",
        "--log.format=json",
    )
    exporter.wait_ready()
    polls = len(fake_imds.event_requests())
    slowest = 0.0
    while len(fake_imds.event_requests()) < polls + 12:  # a dozen polls of the same document
        began = time.monotonic()
        assert httpx.get(f"{exporter.url}/-/healthy", timeout=5, trust_env=False).status_code == 200
        slowest = max(slowest, time.monotonic() - began)
    # The chart's probe timeout: a slower /-/healthy gets the pod restarted (a backtracking regex on these
    # Descriptions held the GIL for seconds at every poll).
    assert slowest < 3, f"/-/healthy took {slowest:.2f} s while the policy matched"
    lines = [json.loads(line) for line in exporter.logs().splitlines() if line.startswith("{")]
    skips = [line["scheduled_event.id"] for line in lines if line.get("scheduled_event.approval.result") == "skipped"]
    assert sorted(skips) == sorted(str(e["EventId"]) for e in events), "each event skipped once, not at every poll"
    began = time.monotonic()
    assert exporter.stop(signal.SIGTERM) == 0 and time.monotonic() - began < 5
