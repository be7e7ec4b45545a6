"""Fault injection as a client experiences it, over real loopback HTTP."""

from __future__ import annotations

import gzip
import json
import time

import httpx
import pytest

from se_exporter.imds.client import ClientSettings, IMDSClient, RateLimiter
from se_exporter.simulator import EventPlan, FaultPlan, FaultRule, SimulatorServer, SimWorld
from tests.simulator.conftest import API, EVENTS_PATH, approve, get_document

COMPUTE = {"api-version": "2021-02-01"}
REBOOT = EventPlan("Reboot", notice=600)


@pytest.mark.parametrize(("status", "count"), [(500, 2), (503, 3), (429, 1), (410, 2)])
def test_fail_next_n_requests(
    faults: FaultPlan, world: SimWorld, client: httpx.Client, status: int, count: int
) -> None:
    faults.fail_next(status, count)
    codes = [client.get(EVENTS_PATH, params=API).status_code for _ in range(count + 2)]
    assert codes == [status] * count + [200, 200]
    faulted = [r.fault for r in world.truth.requests() if r.status == status]
    assert faulted == [f"status:{status}"] * count


def test_error_answers_have_a_json_body(faults: FaultPlan, client: httpx.Client) -> None:
    faults.fail_next(503)
    response = client.get(EVENTS_PATH, params=API)
    assert response.json() == {"error": "Service Unavailable"}


def test_faults_are_scoped_by_endpoint_and_method(faults: FaultPlan, world: SimWorld, client: httpx.Client) -> None:
    event_id = world.add_event(REBOOT)
    faults.fail_next(500, 1, method="POST")
    faults.fail_next(503, 1, endpoint="compute")
    assert client.get(EVENTS_PATH, params=API).status_code == 200
    assert approve(client, event_id).status_code == 500
    assert world.snapshot().events[0].status == "Scheduled"  # a failed POST approved nothing
    assert world.truth.approvals() == ()
    assert client.get("/metadata/instance/compute", params=COMPUTE).status_code == 503
    assert client.get("/metadata/instance/compute", params=COMPUTE).status_code == 200
    assert approve(client, event_id).status_code == 200


def test_probabilistic_errors_are_reproducible(world: SimWorld) -> None:
    def failures(seed: int) -> list[int]:
        import random

        plan = FaultPlan([FaultRule("status", None, probability=0.3, status=503)], rng=random.Random(seed))
        with SimulatorServer(world, faults=plan) as server, httpx.Client(trust_env=False) as client:
            codes = [
                client.get(server.url + EVENTS_PATH, params=API, headers={"Metadata": "true"}).status_code
                for _ in range(100)
            ]
        return [i for i, code in enumerate(codes) if code == 503]

    first = failures(11)
    assert 10 <= len(first) <= 50
    assert failures(11) == first


@pytest.mark.parametrize("variant", ["truncated", "wrong_types", "missing_event_id", "not_json", "empty"])
def test_malformed_bodies(faults: FaultPlan, world: SimWorld, client: httpx.Client, variant: str) -> None:
    world.add_event(REBOOT)
    faults.malformed_next(variant)
    response = client.get(EVENTS_PATH, params=API)
    assert response.status_code == 200
    if variant in ("truncated", "not_json", "empty"):
        with pytest.raises(json.JSONDecodeError):
            json.loads(response.content)
    elif variant == "wrong_types":
        body = response.json()
        assert isinstance(body["DocumentIncarnation"], str)
        assert isinstance(body["Events"][0]["Resources"], str)
    else:
        assert "EventId" not in response.json()["Events"][0]
    assert "EventId" in get_document(client)["Events"][0]  # one-off


def test_malformed_without_events_is_still_wrong(faults: FaultPlan, client: httpx.Client) -> None:
    faults.malformed_next("wrong_types")
    faults.malformed_next("missing_event_id")
    assert client.get(EVENTS_PATH, params=API).json()["Events"] == {}
    assert "EventId" not in client.get(EVENTS_PATH, params=API).json()["Events"][0]


def test_connection_reset(faults: FaultPlan, world: SimWorld, client: httpx.Client) -> None:
    faults.reset_next(2)
    for _ in range(2):
        with pytest.raises(httpx.TransportError):
            client.get(EVENTS_PATH, params=API)
    assert client.get(EVENTS_PATH, params=API).status_code == 200
    assert [(r.status, r.fault) for r in world.truth.requests()] == [(0, "reset"), (0, "reset"), (200, None)]


def test_slow_first_answer(faults: FaultPlan, world: SimWorld, client: httpx.Client) -> None:
    faults.set_first_response_delay(0.4)
    assert client.get("/metadata/instance/compute", params=COMPUTE).status_code == 200
    began = time.monotonic()
    assert client.get(EVENTS_PATH, params=API).status_code == 200
    assert time.monotonic() - began >= 0.4  # a lower bound: no load makes it shorter
    assert client.get(EVENTS_PATH, params=API).status_code == 200
    # Only Scheduled Events is slow to wake up, and only at its first call: what the simulator did, by its truth.
    assert [r.fault for r in world.truth.requests()] == [None, "first_response_delay:0.4s", None]


def test_delay_causes_a_client_timeout_then_recovers(faults: FaultPlan, client: httpx.Client) -> None:
    faults.delay_next(2.0)
    with pytest.raises(httpx.TimeoutException):
        client.get(EVENTS_PATH, params=API, timeout=0.2)
    assert client.get(EVENTS_PATH, params=API).status_code == 200


def test_stop_does_not_wait_for_a_delayed_answer(world: SimWorld) -> None:
    plan = FaultPlan([FaultRule("delay", None, delay_s=60)])
    server = SimulatorServer(world, faults=plan).start()
    with pytest.raises(httpx.TimeoutException):
        httpx.get(server.url + EVENTS_PATH, params=API, headers={"Metadata": "true"}, timeout=0.2, trust_env=False)
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 30, "the stop waited for the 60 s delay"


def test_rate_limit(faults: FaultPlan, client: httpx.Client) -> None:
    # The manual clock's real monotonic time stands still: all requests fall in one second.
    faults.set_rate_limit(5)
    codes = [client.get(EVENTS_PATH, params=API).status_code for _ in range(8)]
    assert codes == [200] * 5 + [429] * 3


def test_fault_plan_over_http(server: SimulatorServer, client: httpx.Client) -> None:
    plan = {"rules": [{"kind": "status", "status": 410, "count": 2}], "first_response_delay_s": 0}
    response = client.post("/_sim/faults", json=plan)
    assert response.status_code == 200
    assert response.json()["rules"][0]["status"] == 410
    assert [client.get(EVENTS_PATH, params=API).status_code for _ in range(3)] == [410, 410, 200]
    assert client.post("/_sim/faults", json={"rules": [], "replace": True}).json()["rules"] == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"rules": [{"kind": "explode"}]}, "rules[0]: fault rule kind"),
        ({"rules": [{"kind": "status", "status": 200}]}, "fault rule status"),
        ({"rules": [{"kind": "status", "colour": "red"}]}, "rules[0]: unknown key 'colour'"),
        ({"rules": [{"kind": "malformed", "malformed": "weird"}]}, "fault rule malformed"),
        ({"rule": []}, "unknown key 'rule'"),
        ([], "must be a JSON object"),
        ({"rate_limit_per_s": "5"}, "rate_limit_per_s must be an integer >= 0 or null (0, null: off), got '5'"),
        ({"rate_limit_per_s": 2.5}, "rate_limit_per_s must be an integer"),
        ({"first_response_delay_s": None}, "first_response_delay_s must be a number >= 0, got None"),
        ({"first_response_delay_s": -1}, "first_response_delay_s must be a number >= 0"),
    ],
)
def test_bad_fault_plan_over_http(client: httpx.Client, body: object, message: str) -> None:
    response = client.post("/_sim/faults", json=body)
    assert response.status_code == 400
    assert message in response.json()["error"]
    assert client.get(EVENTS_PATH, params=API).status_code == 200, "a rejected plan changes nothing"


def test_gzip_bomb(faults: FaultPlan, client: httpx.Client) -> None:
    faults.malformed_next("gzip_bomb")
    # The bomb is compressed on first use (256 MiB at level 9): seconds, many more under Wine on a busy machine.
    with client.stream("GET", EVENTS_PATH, params=API, timeout=300) as response:
        raw = b"".join(response.iter_raw())
    assert response.status_code == 200 and response.headers["Content-Encoding"] == "gzip"
    assert len(raw) < 1 << 20 and len(gzip.decompress(raw)) == 256 << 20
    assert get_document(client)["Events"] == []  # one-off


def test_drip_sends_the_real_answer_one_byte_at_a_time(
    faults: FaultPlan, world: SimWorld, client: httpx.Client
) -> None:
    world.add_event(REBOOT)
    faults.drip_next(0.001)
    arrivals = []
    with client.stream("GET", EVENTS_PATH, params=API) as response:
        for chunk in response.iter_raw():
            arrivals.append(chunk)
    body = b"".join(arrivals)
    assert json.loads(body)["Events"][0]["EventType"] == "Reboot"
    assert len(arrivals) > len(body) // 4  # many small pieces, not one write


def test_an_api_version_refused_as_imds_refuses_one_it_does_not_serve(faults: FaultPlan, client: httpx.Client) -> None:
    """A VM not enrolled in a preview: its IMDS answers that version 400 "api-version is invalid" (the
    exporter's --imds.api-version list falls back on it); every other version is served, and the refusal
    ends when the plan changes."""
    faults.refuse_api_versions({"2024-07-09"})
    refused = client.get(EVENTS_PATH, params={"api-version": "2024-07-09"})
    assert refused.status_code == 400 and "api-version is invalid" in refused.json()["error"]
    assert client.get(EVENTS_PATH, params=API).status_code == 200
    faults.refuse_api_versions(set())
    assert client.get(EVENTS_PATH, params={"api-version": "2024-07-09"}).status_code == 200


def test_the_exporters_client_falls_back_on_the_refusal_and_returns_an_hour_later(
    faults: FaultPlan, world: SimWorld, server: SimulatorServer
) -> None:
    """Both directions against the simulator: refused, the next version answers in the same call; enrolled
    meanwhile, the preferred version is used again once an hour has passed on the injected clock."""
    hours = [0.0]
    client = IMDSClient(
        ClientSettings(base_url=server.url, api_versions=("2024-07-09", "2020-07-01")),
        RateLimiter(min_interval=0),
        monotonic=lambda: hours[0] * 3600.0,
    )
    world.add_event(REBOOT)
    faults.refuse_api_versions({"2024-07-09"})
    assert len(client.get_document().events) == 1
    assert client.api_version == "2020-07-01"
    faults.refuse_api_versions(set())  # the VM is enrolled
    hours[0] = 0.99
    client.get_document()
    assert client.api_version == "2020-07-01", "not asked again within the hour"
    hours[0] = 1.0
    assert len(client.get_document().events) == 1
    assert client.api_version == "2024-07-09"
    client.close()
