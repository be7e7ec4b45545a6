"""The exporter with its state file and log spool on a real file system that fills up (a small tmpfs):
every failed write is counted in /metrics, approvals wait until the state can be saved again, and no
record is lost once space is back (issue 17, points 4 and 10)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.otlp import Failure, OTLPHttpReceiver
from tests.support.earlier_release import E2, TRANSITION, copy_earlier_files
from tests.support.exporter_process import ExporterProcess
from tests.support.exposition import value
from tests.support.fake_imds import Answer, FakeIMDS, document, scheduled_event
from tests.support.state_file import saved_event_ids
from tests.support.tmpfs import fill, small_tmpfs
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.debian]
ERRORS = "azure_scheduled_events_persistence_errors_total"
POLICY = "rules:\n  - name: user-initiated\n    causes: [user]\n"


def reboot(event_id: str) -> dict[str, object]:
    return scheduled_event(event_id, Description="by the owner")


def failed_writes(exporter: ExporterProcess, file: str) -> bool:
    return (value(exporter.metrics(), ERRORS, file=file) or 0) > 0


def freeze(event_id: str) -> dict[str, object]:
    return {**reboot(event_id), "EventType": "Freeze", "EventSource": "Platform", "DurationInSeconds": 5}


def test_a_full_disk_is_counted_holds_approvals_and_loses_no_record(
    tmp_path: Path,
    fake_imds: FakeIMDS,
    start_exporter: Callable[..., ExporterProcess],
    otlp_http_receiver: OTLPHttpReceiver,
) -> None:
    (tmp_path / "approval.yaml").write_text(POLICY)
    with small_tmpfs(tmp_path / "fs", size_kib=256) as fs:
        answer = [document(1)]
        fake_imds.respond = lambda seen: Answer() if seen.method == "POST" else answer[0]
        otlp_http_receiver.set_failure(Failure(503))  # the collector is down: records wait in the spool
        exporter = start_exporter(
            f"--imds.url={fake_imds.url}",
            "--poll.interval=250ms",
            "--vm.name=vm-a",
            f"--state.file={fs / 'state.db'}",
            f"--approval.config={tmp_path / 'approval.yaml'}",
            env={**otlp_http_receiver.env, "OTEL_SDK_DISABLED": "false"},
        )
        exporter.wait_ready()
        filler = fill(fs)
        answer[0] = document(2, freeze("F1"))  # not for approval; its transition cannot be saved
        for file in ("state", "spool"):
            wait_for(functools.partial(failed_writes, exporter, file), 20, f"a failed {file} write")
        answer[0] = document(3, freeze("F1"), reboot("R1"))
        wait_for(lambda: "state_unsaved" in exporter.logs(), 20, "the approval held back")
        assert not [s for s in fake_imds.requests if s.method == "POST"], "no approval while it cannot be saved"

        filler.unlink()
        wait_for(lambda: [s for s in fake_imds.requests if s.method == "POST"], 20, "the approval once saving works")
        (post,) = [s for s in fake_imds.requests if s.method == "POST"]
        assert json.loads(post.body) == {"StartRequests": [{"EventId": "R1"}]}
        assert exporter.stop() == 0
        assert "they are sent after the next start" in exporter.logs()

        otlp_http_receiver.set_failure(None)
        again = start_exporter(
            f"--imds.url={fake_imds.url}",
            "--poll.interval=250ms",
            "--vm.name=vm-a",
            f"--state.file={fs / 'state.db'}",
            env={**otlp_http_receiver.env, "OTEL_SDK_DISABLED": "false"},
        )
        # Every record of the outage arrives: two transitions, the Freeze's skip (no rule), the held-back
        # approval, then the approval.
        records = otlp_http_receiver.wait_for_logs(count=5, timeout=20)
        kinds = sorted(
            str(r.attributes.get("scheduled_event.transition") or r["scheduled_event.approval.result"]) for r in records
        )
        assert kinds == ["approved", "scheduled", "scheduled", "skipped", "skipped"], kinds
        again.wait_ready()
        assert again.stop() == 0


def test_an_upgrade_on_a_full_disk_starts_from_the_earlier_state_and_imports_it_once_there_is_room(
    tmp_path: Path,
    fake_imds: FakeIMDS,
    start_exporter: Callable[..., ExporterProcess],
    otlp_http_receiver: OTLPHttpReceiver,
) -> None:
    """The release before the database left its JSON state file and journal on a disk that is full: the import
    cannot be written, yet nothing the earlier release emitted is emitted again (the run starts from the
    file), and once there is room the file is imported, the run's own state written over it."""
    with small_tmpfs(tmp_path / "fs", size_kib=512) as fs:
        state = copy_earlier_files(fs)
        copied = state.read_bytes()
        filler = fill(fs)
        fake_imds.respond = lambda seen: document(3, E2)  # E1, Started when the earlier release stopped, is gone
        args = (f"--imds.url={fake_imds.url}", "--poll.interval=250ms", f"--state.file={state}", "--vm.name=vm-a")
        env = {**otlp_http_receiver.env, "OTEL_SDK_DISABLED": "false"}
        first = start_exporter(*args, env=env)
        wait_for(lambda: "completed" in first.transitions(), 20, "E1 completed")
        assert first.transitions() == ["completed"], "nothing the earlier release emitted is emitted again"
        assert "cannot import it into a database" in first.logs()
        assert (value(first.metrics(), ERRORS, file="state") or 0) >= 1
        assert state.read_bytes()[:1] == b"{", "the earlier file stays until it is imported"

        filler.unlink()
        wait_for(lambda: state.read_bytes()[:6] == b"SQLite", 20, "the import once there is room")
        wait_for(lambda: saved_event_ids(state) == ["E2"], 20, "the run's own state written over the import")
        records = otlp_http_receiver.wait_for_logs(event_name=TRANSITION, count=4)
        assert len({r.attributes["log.record.uid"] for r in records}) == 4, "the journal's three, then one"
        assert first.stop() == 0
        assert (fs / "state.json.before-sqlite").read_bytes() == copied

        second = start_exporter(*args, env=env)
        wait_for(lambda: value(second.metrics(), "azure_scheduled_events_imds_up") == 1, 20, "a poll")
        assert second.stop() == 0
        assert second.transitions() == [] and "imported" not in second.logs(), "imported once"
        assert len(otlp_http_receiver.store.find_logs(event_name=TRANSITION)) == 4, "nothing sent twice"
