"""Fixtures: a simulated world on a hand-driven clock, served on an ephemeral loopback port."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from se_exporter.simulator import FaultPlan, ManualClock, SimulatedVM, SimulatorServer, SimWorld
from tests.support.wait import wait_for

START = 1_650_000_000.0  # Fri, 15 Apr 2022 05:20:00 GMT
EVENTS_PATH = "/metadata/scheduledevents"
API = {"api-version": "2020-07-01"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=START)


@pytest.fixture
def world(clock: ManualClock) -> SimWorld:
    return SimWorld(vm=SimulatedVM(name="sim-vm-0"), clock=clock, rng=random.Random(7))


@pytest.fixture
def faults() -> FaultPlan:
    return FaultPlan(rng=random.Random(3))


@pytest.fixture
def server(world: SimWorld, faults: FaultPlan) -> Iterator[SimulatorServer]:
    with SimulatorServer(world, faults=faults, tick_interval=0.01) as srv:
        yield srv


@pytest.fixture
def client(server: SimulatorServer) -> Iterator[httpx.Client]:
    # trust_env=False: IMDS clients must bypass proxies, and so must the tests.
    with httpx.Client(base_url=server.url, headers={"Metadata": "true"}, timeout=5, trust_env=False) as c:
        yield c


def get_document(client: httpx.Client, api_version: str = "2020-07-01") -> dict[str, Any]:
    response = client.get(EVENTS_PATH, params={"api-version": api_version})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def approve(client: httpx.Client, *event_ids: str) -> httpx.Response:
    return client.post(EVENTS_PATH, params=API, json={"StartRequests": [{"EventId": e} for e in event_ids]})


# Poll a condition until truthy or fail after ``timeout`` real seconds (no fixed sleeps).
eventually = functools.partial(wait_for, timeout=5.0, interval=0.01, retry_on=())
