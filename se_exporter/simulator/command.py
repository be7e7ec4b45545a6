"""``se-exporter simulate``: run the IMDS simulator on a local port until SIGINT/SIGTERM.

Standalone: ``python -m se_exporter.simulator.command --web.listen-address 127.0.0.1:0``. The
first line on stdout is ``listening on http://HOST:PORT`` (useful with port 0); every change of
the document is logged to stderr unless ``--quiet``.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading

from se_exporter.config import flags
from se_exporter.errors import socket_problem
from se_exporter.platform import current
from se_exporter.process import StopRequest
from se_exporter.simulator.clock import SimClock
from se_exporter.simulator.enablement import EnablementTimes
from se_exporter.simulator.flags import add_arguments, build_faults, no_scenario_hint
from se_exporter.simulator.model import SimulatedVM
from se_exporter.simulator.scenario import Scenario, ScenarioError
from se_exporter.simulator.scenario_file import builtin_names, resolve_scenario
from se_exporter.simulator.server import SimulatorServer
from se_exporter.simulator.truth import Change, TruthEntry
from se_exporter.simulator.world import SimWorld


def _scenarios(specs: list[str]) -> list[Scenario]:
    names = [n for spec in specs for n in (builtin_names() if spec == "all" else (spec,))]
    return [resolve_scenario(name) for name in names]


def _log_change(record: TruthEntry) -> None:
    if isinstance(record, Change):
        print(
            f"change={record.kind} reason={record.reason} event_id={record.event_id} type={record.event_type} "
            f"status={record.status} not_before={record.not_before!r} incarnation={record.incarnation}",
            file=sys.stderr,
            flush=True,
        )


def run(args: argparse.Namespace, stop: threading.Event | None = None) -> int:
    """Run until ``stop`` is set (by default: until a stop signal); 0 on a clean stop, 2 for bad input (a port
    it cannot listen on included)."""
    if args.list_scenarios:
        for name in builtin_names():
            print(f"{name}: {resolve_scenario(name).description}")
        return 0
    rng = random.Random(args.seed)  # noqa: S311 - simulation, not security
    try:
        scenarios = _scenarios(args.scenarios)
        faults = build_faults(args, rng)
        world = SimWorld(
            vm=SimulatedVM(name=args.vm_name),
            clock=SimClock(args.speed),
            rng=rng,
            enablement=EnablementTimes(args.disable_after or None, args.enable_delay, args.list_delay),
            start_enabled=not args.start_disabled,
        )
        server = SimulatorServer(world, faults=faults, host=args.listen[0], port=args.listen[1])
    except (ScenarioError, ValueError) as exc:
        print(f"se-exporter: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        problem = socket_problem(exc)
        print(
            f"se-exporter: error: --web.listen-address: cannot listen on {args.listen[0]}:{args.listen[1]}: {problem}",
            file=sys.stderr,
        )
        return 2
    if not args.quiet:
        world.truth.add_listener(_log_change)
    if scenarios:
        world.loop(scenarios, gap=args.loop_gap, repeat=args.loop)
    else:
        print(no_scenario_hint(), file=sys.stderr, flush=True)
    return _serve_until(server, stop)


def _serve_until(server: SimulatorServer, stop: threading.Event | None) -> int:
    signals = StopRequest()
    if stop is None and threading.current_thread() is threading.main_thread():
        signals.install(current().stop_signals)
    try:
        with server:
            print(f"listening on {server.url}", flush=True)
            (stop or signals.event).wait()
    finally:
        signals.restore()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = flags.Parser(prog="se-exporter simulate", description="Fake Azure IMDS Scheduled Events.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
