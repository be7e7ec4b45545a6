"""``se-exporter simulate``'s flags: the world (scenarios, speed, VM name) and the faults it plays.

Each value is checked as it is parsed, so a bad flag is one line and exit 2, like the exporter's.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from typing import Any

from se_exporter.config import flags
from se_exporter.config.flags import duration
from se_exporter.simulator.clock import check_speed
from se_exporter.simulator.enablement import ANSWER_DELAY_SECONDS, DISABLE_AFTER_SECONDS, EVENTS_DELAY_SECONDS
from se_exporter.simulator.faults import MALFORMED, FaultPlan, FaultRule
from se_exporter.simulator.scenario_file import builtin_names


def no_scenario_hint() -> str:
    return (
        "se-exporter simulate: no --scenario given, so the event list stays empty. Play one with --scenario NAME "
        f"({', '.join(builtin_names())}), every built-in with --scenario all (add --loop to repeat), a YAML file "
        "with --scenario FILE, or POST /_sim/play while it runs; --list-scenarios describes them."
    )


def speed(text: str) -> float:
    """argparse type of a time-acceleration factor (``simulate --speed``, ``demo --demo.speed``)."""
    try:
        return check_speed(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid speed {text!r}: must be a number > 0") from None


def listen_address(text: str) -> tuple[str, int]:
    """The exporter's ``host:port`` syntax; an empty host means every (IPv4) interface."""
    host, port = flags.listen_address(text)
    if port is None:
        raise argparse.ArgumentTypeError("the simulator needs an address to serve on (e.g. :8080)")
    return host or "0.0.0.0", port


def _malformed_kind(text: str) -> str:
    if text not in MALFORMED:
        raise ValueError(text)
    return text


def _counted(kind: str, parse_value: Callable[[str], object]) -> Callable[[str], tuple[Any, int | None]]:
    """Parser for ``VALUE[:COUNT]`` fault flags (count 1 if omitted, ``*`` unlimited)."""

    def parse(text: str) -> tuple[Any, int | None]:
        value, _, count = text.partition(":")
        try:
            return parse_value(value), None if count == "*" else int(count or 1)
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(f"invalid --fault.{kind} {text!r} (expected VALUE[:COUNT])") from None

    return parse


def add_arguments(parser: flags.Parser) -> None:
    """Register the ``simulate`` flags on ``parser``."""
    add = parser.add_argument
    add(
        "--web.listen-address",
        dest="listen",
        type=listen_address,
        default=("127.0.0.1", 8080),
        metavar="HOST:PORT",
        help="host:port to serve the fake IMDS on (port 0: any free port; default 127.0.0.1:8080)",
    )
    add(
        "--scenario",
        dest="scenarios",
        action="append",
        default=[],
        metavar="NAME|FILE",
        help=f"built-in scenario ({', '.join(builtin_names())}, or 'all') or YAML file; repeatable",
    )
    add("--speed", type=speed, default=1.0, metavar="FACTOR", help="simulated seconds per real second (default 1)")
    add("--loop", action="store_true", help="replay the scenarios forever")
    add(
        "--loop.gap",
        dest="loop_gap",
        type=duration,
        default=10.0,
        metavar="DURATION",
        help="simulated pause between scenarios (default 10s)",
    )
    add(
        "--vm.name",
        dest="vm_name",
        default="sim-vm-0",
        metavar="NAME",
        help="name of the simulated VM (default sim-vm-0)",
    )
    add("--seed", type=int, default=None, help="random seed for EventIds and fault dice")
    add(
        "--events.disable-after",
        dest="disable_after",
        type=duration,
        default=DISABLE_AFTER_SECONDS,
        metavar="DURATION",
        help="simulated time without requests that disables Scheduled Events; the next request enables them "
        "again and DocumentIncarnation starts over (Azure: 24h, the default; 0: never)",
    )
    add(
        "--events.enable-delay",
        dest="enable_delay",
        type=duration,
        default=ANSWER_DELAY_SECONDS,
        metavar="DURATION",
        help="how long the answers to an enabling request take, in simulated time (Azure: up to 2m, the default)",
    )
    add(
        "--events.list-delay",
        dest="list_delay",
        type=duration,
        default=EVENTS_DELAY_SECONDS,
        metavar="DURATION",
        help="how long after an enabling request events are listed, in simulated time (Azure: within 5m, the default)",
    )
    add(
        "--events.start-disabled",
        dest="start_disabled",
        action="store_true",
        help="start with Scheduled Events disabled, as on a VM that never asked: the first request enables them",
    )
    add(
        "--fault.first-response-delay",
        dest="first_delay",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="delay the first scheduled-events answer by this real duration",
    )
    add(
        "--fault.status",
        dest="fault_status",
        action="append",
        default=[],
        type=_counted("status", int),
        metavar="CODE[:COUNT]",
        help="answer CODE (500, 503, 429, 410...) to the next COUNT polls",
    )
    add(
        "--fault.error-rate",
        dest="error_rate",
        type=float,
        default=0.0,
        metavar="P",
        help="probability (0-1) that any poll fails with --fault.error-code",
    )
    add(
        "--fault.error-code",
        dest="error_code",
        type=int,
        default=503,
        metavar="CODE",
        help="code for --fault.error-rate",
    )
    add(
        "--fault.malformed",
        dest="fault_malformed",
        action="append",
        default=[],
        metavar="KIND[:COUNT]",
        type=_counted("malformed", _malformed_kind),
        help=f"answer a broken body to the next COUNT polls; KIND: {', '.join(MALFORMED)}",
    )
    add(
        "--fault.reset",
        dest="fault_reset",
        type=int,
        default=0,
        metavar="COUNT",
        help="reset the connection of the next COUNT polls",
    )
    add(
        "--fault.delay",
        dest="fault_delay",
        action="append",
        default=[],
        type=_counted("delay", duration),
        metavar="DURATION[:COUNT]",
        help="delay the next COUNT polls by DURATION (real time)",
    )
    add(
        "--fault.rate-limit",
        dest="rate_limit",
        type=int,
        default=0,
        metavar="N",
        help="answer 429 beyond this many requests per second (IMDS: 5; default 0 = off)",
    )
    add("--list-scenarios", action="store_true", help="print the built-in scenarios and exit")
    add("--quiet", action="store_true", help="do not log document changes on stderr")


def build_faults(args: argparse.Namespace, rng: random.Random) -> FaultPlan:
    """The fault plan the flags describe; raises ValueError for a bad combination."""
    plan = FaultPlan(first_response_delay_s=args.first_delay, rate_limit_per_s=args.rate_limit or None, rng=rng)
    for code, count in args.fault_status:
        plan.add(FaultRule("status", count, status=int(code)))
    for kind, count in args.fault_malformed:
        plan.add(FaultRule("malformed", count, malformed=kind))
    if args.fault_reset:
        plan.add(FaultRule("reset", args.fault_reset))
    for seconds, count in args.fault_delay:
        plan.add(FaultRule("delay", count, delay_s=seconds))
    if args.error_rate:
        plan.add(FaultRule("status", None, probability=args.error_rate, status=args.error_code))
    return plan
