"""This VM's name, learned from compute metadata: retried with a short backoff (issue 29, point 5).

One failed identity request at boot (IMDS not up yet) left approvals skipping and /-/traffic open for a
minute. Now the exporter retries after 1 s, doubling to 30 s, and says so, so the name is right within
seconds of IMDS answering.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Callable

import pytest

from tests.support.exporter_process import ExporterProcess, refused_port
from tests.support.exposition import series, value
from tests.support.fake_imds import COMPUTE, Answer, FakeIMDS, document, scheduled_event
from tests.support.wait import wait_for

pytestmark = [pytest.mark.posix, pytest.mark.full]


def compute_requests(fake: FakeIMDS) -> int:
    return len([seen for seen in fake.requests if seen.path.startswith("/metadata/instance/compute")])


def test_a_failed_identity_request_is_retried_within_seconds(
    fake_imds: FakeIMDS, start_exporter: Callable[..., ExporterProcess]
) -> None:
    fake_imds.compute = Answer(status=503)
    soon = scheduled_event("R1", NotBefore=email.utils.formatdate(time.time() + 600, usegmt=True))
    fake_imds.respond = lambda seen: document(1, soon)
    exporter = start_exporter(f"--imds.url={fake_imds.url}", "--poll.interval=250ms", "--traffic.lead-time=1h")
    exporter.wait_ready()
    wait_for(lambda: compute_requests(fake_imds) >= 2, 10, "a second identity request within seconds")
    assert "compute metadata unavailable, retrying in 1 s" in exporter.logs()
    wait_for(lambda: "retrying in 2 s" in exporter.logs(), 5, "the backoff doubling, and the log saying so")

    def info() -> list[dict[str, str]]:
        return series(exporter.metrics(), "azure_scheduled_events_event_info")

    assert [s["affects_this_vm"] for s in info()] == ["unknown"]
    assert exporter.get("/-/traffic").status_code == 200  # its documented choice while the name is unknown
    fake_imds.compute = Answer(body=json.dumps(COMPUTE).encode())
    wait_for(lambda: [s["affects_this_vm"] for s in info()] == ["true"], 10, "the name learned within seconds")
    assert exporter.get("/-/traffic").status_code == 503, "this VM's reboot is within the lead time"
    assert exporter.stop() == 0


def test_an_unreachable_imds_says_what_to_check_once_and_on_ready(
    start_exporter: Callable[..., ExporterProcess],
) -> None:
    """Issue 29, point 7: on AKS with the IMDS restriction a pod was just 'not ready', with no hint why."""
    with refused_port() as closed:  # connection refused, as a blocked link-local address answers
        exporter = start_exporter(f"--imds.url=http://127.0.0.1:{closed}", "--poll.interval=250ms", "--vm.name=vm-a")
        exporter.wait_listening()
        wait_for(lambda: "IMDS restriction" in exporter.get("/-/ready").text, 10, "the hint on /-/ready")
        ready = exporter.get("/-/ready")
        assert ready.status_code == 503
        assert "podLinkLocalAccess: None" in ready.text and "hostNetwork: true" in ready.text
        errors = "azure_scheduled_events_poll_errors_total"
        wait_for(lambda: (value(exporter.metrics(), errors, reason="connection") or 0) >= 3, 30, "three failed polls")
        assert exporter.logs().count("IMDS cannot be reached") == 1, "said once, not once a poll"
        assert exporter.stop() == 0
