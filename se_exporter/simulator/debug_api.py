"""The ``/_sim/*`` debug API, for tests that run the simulator in another process.

================  ======  =====================================================================
path              method  what
================  ======  =====================================================================
/_sim/truth       GET     ``{"changes": [...], "approvals": [...]}`` (ground truth)
/_sim/requests    GET     every IMDS request served: method, path, status, fault, times
/_sim/state       GET     simulated now, speed, DocumentIncarnation, events with simulated times
/_sim/faults      GET     the fault plan
/_sim/faults      POST    change it: ``{"rules": [...], "replace": bool,
                          "first_response_delay_s": s, "rate_limit_per_s": n}``
/_sim/play        POST    ``{"scenario": name-or-scenario-object, "delay": s}`` →
                          ``{"event_ids": {alias: EventId}}``
================  ======  =====================================================================

No ``Metadata`` header is needed and these requests are not recorded as IMDS requests.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from se_exporter.simulator.faults import FaultPlan
from se_exporter.simulator.scenario import Scenario, ScenarioError
from se_exporter.simulator.scenario_file import builtin_scenario, scenario_from_dict
from se_exporter.simulator.world import SimWorld

Answer = tuple[int, Any]


def handle(world: SimWorld, faults: FaultPlan, method: str, path: str, body: bytes) -> Answer:
    """Route one debug request; returns (status, JSON payload)."""
    routes: dict[tuple[str, str], Callable[[], Answer]] = {
        ("GET", "/_sim/truth"): lambda: (200, world.truth.to_json()),
        ("GET", "/_sim/requests"): lambda: (200, world.truth.requests_json()),
        ("GET", "/_sim/state"): lambda: (200, _state(world)),
        ("GET", "/_sim/faults"): lambda: (200, faults.to_json()),
        ("POST", "/_sim/faults"): lambda: _update_faults(faults, body),
        ("POST", "/_sim/play"): lambda: _play(world, body),
    }
    route = routes.get((method, path))
    if route is not None:
        return route()
    if any(p == path for _, p in routes):
        return 405, {"error": f"{method} not allowed on {path}"}
    return 404, {"error": f"no debug endpoint {path}"}


def _state(world: SimWorld) -> dict[str, Any]:
    snapshot = world.snapshot()
    return {
        "sim_time": snapshot.sim_time,
        "speed": world.clock.speed,
        "incarnation": snapshot.incarnation,
        "vm": world.vm.compute_document(),
        "events": [
            {
                "event_id": e.event_id,
                "status": e.status,
                "resources": list(e.resources),
                "not_before_sim": e.not_before,
                "appeared_at": e.appeared_at,
                "started_at": e.started_at,
                "plan": dataclasses.asdict(e.plan),
            }
            for e in snapshot.events
        ],
    }


def _json_body(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8") or "null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"body is not valid JSON: {exc}") from None


def _update_faults(faults: FaultPlan, body: bytes) -> Answer:
    try:
        faults.update_from_json(_json_body(body))
    except ValueError as exc:
        return 400, {"error": str(exc)}
    return 200, faults.to_json()


def _play(world: SimWorld, body: bytes) -> Answer:
    try:
        data = _json_body(body)
        if not isinstance(data, dict) or "scenario" not in data:
            raise ValueError('body must be {"scenario": name-or-object, "delay": seconds}')
        delay = data.get("delay", 0.0)
        if isinstance(delay, bool) or not isinstance(delay, int | float) or delay < 0:
            raise ValueError("delay: must be a number >= 0")
        ids = world.play(_scenario(data["scenario"]), delay=float(delay))
    except ValueError as exc:  # ScenarioError included
        return 400, {"error": str(exc)}
    return 200, {"event_ids": ids}


def _scenario(spec: Any) -> Scenario:
    if isinstance(spec, str):
        return builtin_scenario(spec)
    if isinstance(spec, dict):
        return scenario_from_dict(spec, source="scenario")
    raise ScenarioError("scenario: must be a built-in name or a scenario object")
