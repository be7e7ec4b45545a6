"""A faithful simulator of the Azure IMDS Scheduled Events service, for the demo and for tests.

Typical use::

    from se_exporter.simulator import ManualClock, SimWorld, SimulatorServer, builtin_scenario

    clock = ManualClock(speed=1.0)
    world = SimWorld(clock=clock, rng=random.Random(0))
    ids = world.play(builtin_scenario("freeze-live-migration"))
    with SimulatorServer(world) as server:      # http://127.0.0.1:<ephemeral>
        ...  # point the client at server.url; clock.advance(900) starts the Freeze
        world.truth.changes()                   # ground truth

Modules: :mod:`.clock` (simulated time and how NotBefore is written), :mod:`.lifecycle` and
:mod:`.world` (the service), :mod:`.scenario` / :mod:`.scenario_file` (scenarios, YAML format,
built-ins), :mod:`.faults` (fault injection), :mod:`.imds` (request rules, bodies),
:mod:`.handler` / :mod:`.server` (HTTP), :mod:`.debug_api` (``/_sim/*``), :mod:`.truth`
(ground truth), :mod:`.command` (``se-exporter simulate``).
"""

from se_exporter.simulator.clock import Clock, ManualClock, SimClock, format_rfc1123
from se_exporter.simulator.faults import FaultPlan, FaultRule
from se_exporter.simulator.model import EVENT_SOURCES, EVENT_TYPES, SELF, EventPlan, SimEvent, SimulatedVM, Snapshot
from se_exporter.simulator.scenario import Reschedule, Scenario, ScenarioError, ScenarioEvent
from se_exporter.simulator.scenario_file import (
    builtin_names,
    builtin_scenario,
    load_scenario_file,
    parse_scenario,
    resolve_scenario,
    scenario_from_dict,
)
from se_exporter.simulator.server import SimulatorServer
from se_exporter.simulator.truth import ApprovalRecord, Change, GroundTruth, RequestRecord
from se_exporter.simulator.world import SimWorld

__all__ = [
    "EVENT_SOURCES",
    "EVENT_TYPES",
    "SELF",
    "ApprovalRecord",
    "Change",
    "Clock",
    "EventPlan",
    "FaultPlan",
    "FaultRule",
    "GroundTruth",
    "ManualClock",
    "RequestRecord",
    "Reschedule",
    "Scenario",
    "ScenarioError",
    "ScenarioEvent",
    "SimClock",
    "SimEvent",
    "SimWorld",
    "SimulatedVM",
    "SimulatorServer",
    "Snapshot",
    "builtin_names",
    "builtin_scenario",
    "format_rfc1123",
    "load_scenario_file",
    "parse_scenario",
    "resolve_scenario",
    "scenario_from_dict",
]
