"""What an IMDS client notices: request rules, document shape, api-versions, approvals."""

from __future__ import annotations

import re

import httpx
import pytest

from se_exporter.simulator import SELF, EventPlan, ManualClock, SimulatorServer, SimWorld
from tests.simulator.conftest import API, EVENTS_PATH, approve, get_document

RFC1123 = re.compile(
    r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) "
    r"\d{4} \d{2}:\d{2}:\d{2} GMT$"
)
GUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
FREEZE = EventPlan("Freeze", "Platform", notice=900, duration=5, started_for=30, description="Live migration")


@pytest.mark.parametrize(
    ("path", "params", "headers", "expected"),
    [
        (EVENTS_PATH, API, {}, (400, "Required metadata header not specified")),
        (EVENTS_PATH, API, {"Metadata": "false"}, (400, "Required metadata header not specified")),
        (EVENTS_PATH, {}, {"Metadata": "true"}, (400, "api-version was not specified")),
        (EVENTS_PATH, {"api-version": "latest"}, {"Metadata": "true"}, (400, "api-version is invalid")),
        (EVENTS_PATH, {"api-version": "2010-01-01"}, {"Metadata": "true"}, (400, "api-version is invalid")),
        (EVENTS_PATH, API, {"Metadata": "true", "X-Forwarded-For": "10.0.0.1"}, (400, "X-Forwarded-For")),
        ("/metadata/instance/compute", {}, {"Metadata": "true"}, (400, "api-version was not specified")),
        ("/metadata/nothing", API, {"Metadata": "true"}, (404, "Not Found")),
        ("/", {}, {}, (404, "Not Found")),
    ],
)
def test_rejected_requests(
    server: SimulatorServer, path: str, params: dict[str, str], headers: dict[str, str], expected: tuple[int, str]
) -> None:
    status, error_fragment = expected
    response = httpx.get(server.url + path, params=params, headers=headers, trust_env=False)
    assert response.status_code == status
    assert error_fragment in response.json()["error"]


def test_metadata_header_is_case_insensitive(client: httpx.Client) -> None:
    response = client.get(EVENTS_PATH, params=API, headers={"metadata": "True"})
    assert response.status_code == 200


def test_rejected_requests_are_recorded_and_do_not_change_the_document(
    server: SimulatorServer, client: httpx.Client
) -> None:
    httpx.get(server.url + EVENTS_PATH, params=API, trust_env=False)
    assert [(r.method, r.status) for r in server.world.truth.requests()] == [("GET", 400)]
    assert get_document(client) == {"DocumentIncarnation": 0, "Events": []}


def test_empty_document(client: httpx.Client) -> None:
    response = client.get(EVENTS_PATH, params=API)
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {"DocumentIncarnation": 0, "Events": []}


def test_scheduled_event_shape(world: SimWorld, client: httpx.Client) -> None:
    event_id = world.add_event(FREEZE)
    (event,) = get_document(client)["Events"]
    assert event == {
        "EventId": event_id,
        "EventType": "Freeze",
        "ResourceType": "VirtualMachine",
        "Resources": ["sim-vm-0"],
        "EventStatus": "Scheduled",
        "NotBefore": "Fri, 15 Apr 2022 05:35:00 GMT",  # START + 900 s, on the real clock
        "Description": "Live migration",
        "EventSource": "Platform",
        "DurationInSeconds": 5,
    }
    assert GUID.match(event_id)
    assert RFC1123.match(event["NotBefore"])


@pytest.mark.parametrize(
    ("api_version", "absent"),
    [
        ("2017-03-01", {"Description", "EventSource", "DurationInSeconds"}),
        ("2017-11-01", {"Description", "EventSource", "DurationInSeconds"}),
        ("2019-01-01", {"Description", "EventSource", "DurationInSeconds"}),
        ("2019-04-01", {"EventSource", "DurationInSeconds"}),
        ("2019-08-01", {"DurationInSeconds"}),
        ("2020-07-01", set()),
        ("2023-01-01", set()),
    ],
)
def test_fields_by_api_version(world: SimWorld, client: httpx.Client, api_version: str, absent: set[str]) -> None:
    world.add_event(FREEZE)
    (event,) = get_document(client, api_version)["Events"]
    every = {
        "EventId",
        "EventType",
        "ResourceType",
        "Resources",
        "EventStatus",
        "NotBefore",
        "Description",
        "EventSource",
        "DurationInSeconds",
    }
    assert set(event) == every - absent


@pytest.mark.parametrize(
    ("api_version", "types", "resources"),
    [
        ("2017-03-01", {"Freeze", "Reboot"}, ["_sim-vm-0"]),
        ("2017-08-01", {"Freeze", "Reboot"}, ["sim-vm-0"]),
        ("2017-11-01", {"Freeze", "Reboot", "Preempt"}, ["sim-vm-0"]),
        ("2019-01-01", {"Freeze", "Reboot", "Preempt", "Terminate"}, ["sim-vm-0"]),
    ],
)
def test_event_types_and_resource_names_by_api_version(
    world: SimWorld, client: httpx.Client, api_version: str, types: set[str], resources: list[str]
) -> None:
    """Azure's version table: Preempt from 2017-11-01, Terminate from 2019-01-01, and before 2017-08-01 a
    leading underscore on resource names."""
    for event_type in ("Freeze", "Reboot", "Preempt", "Terminate"):
        world.add_event(EventPlan(event_type, resources=(SELF,)))
    events = get_document(client, api_version)["Events"]
    assert {event["EventType"] for event in events} == types
    assert {tuple(event["Resources"]) for event in events} == {tuple(resources)}


def test_approval_starts_the_event_and_keeps_its_id(world: SimWorld, client: httpx.Client) -> None:
    event_id = world.add_event(FREEZE)
    before = get_document(client)
    response = approve(client, event_id)
    assert response.status_code == 200
    after = get_document(client)
    assert after["DocumentIncarnation"] == before["DocumentIncarnation"] + 1
    (event,) = after["Events"]
    assert (event["EventId"], event["EventStatus"], event["NotBefore"]) == (event_id, "Started", "")
    (record,) = world.truth.approvals()
    assert record.valid and record.outcomes == {event_id: "started"}


def test_approving_twice_or_an_unknown_id_answers_200(world: SimWorld, client: httpx.Client) -> None:
    event_id = world.add_event(FREEZE)
    assert approve(client, event_id).status_code == 200
    incarnation = get_document(client)["DocumentIncarnation"]
    assert approve(client, event_id, "00000000-0000-4000-8000-00000000dead").status_code == 200
    assert get_document(client)["DocumentIncarnation"] == incarnation  # nothing changed
    outcomes = [a.outcomes for a in world.truth.approvals()]
    assert outcomes[-1] == {event_id: "already_started", "00000000-0000-4000-8000-00000000dead": "unknown"}


def test_approval_of_several_events_is_one_document_change(world: SimWorld, client: httpx.Client) -> None:
    first, second = world.add_event(FREEZE), world.add_event(FREEZE)
    incarnation = get_document(client)["DocumentIncarnation"]
    assert approve(client, first, second).status_code == 200
    document = get_document(client)
    assert document["DocumentIncarnation"] == incarnation + 1
    assert [e["EventStatus"] for e in document["Events"]] == ["Started", "Started"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"StartRequests": {"EventId": "x"}}',
        b'{"StartRequests": [{"EventID": "x"}]}',
        b'{"StartRequests": [{"EventId": 5}]}',
        b'{"StartRequests": ["x"]}',
        b'{"Other": []}',
    ],
)
def test_malformed_approval_is_400_and_changes_nothing(world: SimWorld, client: httpx.Client, body: bytes) -> None:
    event_id = world.add_event(FREEZE)
    response = client.post(EVENTS_PATH, params=API, content=body)
    assert response.status_code == 400
    assert "Bad request" in response.json()["error"]
    assert get_document(client)["Events"][0]["EventStatus"] == "Scheduled"
    (record,) = world.truth.approvals()
    assert not record.valid and record.body == body.decode()
    assert event_id


def test_approval_needs_the_metadata_header(world: SimWorld, server: SimulatorServer) -> None:
    event_id = world.add_event(FREEZE)
    response = httpx.post(
        server.url + EVENTS_PATH, params=API, trust_env=False, json={"StartRequests": [{"EventId": event_id}]}
    )
    assert response.status_code == 400
    assert world.snapshot().events[0].status == "Scheduled"


def test_keep_alive_connection_serves_many_requests(world: SimWorld, client: httpx.Client) -> None:
    world.add_event(FREEZE)
    for _ in range(20):
        assert len(get_document(client)["Events"]) == 1
    assert len(world.truth.requests()) == 20


def test_compute_metadata(server: SimulatorServer, client: httpx.Client) -> None:
    response = client.get("/metadata/instance/compute", params={"api-version": "2021-02-01"})
    assert response.status_code == 200
    body = response.json()
    for key in (
        "name",
        "vmId",
        "location",
        "subscriptionId",
        "resourceId",
        "vmSize",
        "vmScaleSetName",
        "resourceGroupName",
        "osType",
    ):
        assert isinstance(body[key], str), key
    assert body["name"] == "sim-vm-0"
    assert body["resourceId"].endswith("/providers/Microsoft.Compute/virtualMachines/sim-vm-0")


def test_unsupported_method_is_405(client: httpx.Client) -> None:
    assert client.put(EVENTS_PATH, params=API).status_code == 405
    assert client.post("/metadata/instance/compute", params={"api-version": "2021-02-01"}).status_code == 405


def test_not_before_is_on_the_real_clock_when_accelerated() -> None:
    clock = ManualClock(start=1_650_000_000.0, speed=60.0)
    world = SimWorld(clock=clock)
    world.add_event(EventPlan("Reboot", notice=900))
    with SimulatorServer(world) as server, httpx.Client(base_url=server.url, trust_env=False) as client:
        document = client.get(EVENTS_PATH, params=API, headers={"Metadata": "true"}).json()
    # 900 simulated seconds at speed 60 are 15 real seconds: 05:20:00 + 15 s.
    assert document["Events"][0]["NotBefore"] == "Fri, 15 Apr 2022 05:20:15 GMT"
