"""``se-exporter simulate``'s flags: the world (scenarios, speed, VM name) and the faults it plays.

Each value is checked as it is parsed, so a bad flag is one line and exit 2, like the exporter's.
"""

from __future__ import annotations

import argparse
import random
import re
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


def _api_version(text: str) -> str:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise argparse.ArgumentTypeError(f"invalid api-version {text!r} (use a date like 2024-07-09)")
    return text


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
    parser.add_flags(
        (
            flags.Flag(
                "--web.listen-address",
                "listen",
                "host:port to serve the fake IMDS on (port 0: any free port; default 127.0.0.1:8080)",
                convert=listen_address,
                default=("127.0.0.1", 8080),
                metavar="HOST:PORT",
            ),
            flags.Flag(
                "--scenario",
                "scenarios",
                f"built-in scenario ({', '.join(builtin_names())}, or 'all') or YAML file; repeatable",
                metavar="NAME|FILE",
                kind="list",
            ),
            flags.Flag(
                "--speed",
                "speed",
                "simulated seconds per real second (default 1)",
                convert=speed,
                default=1.0,
                metavar="FACTOR",
            ),
            flags.Flag("--loop", "loop", "replay the scenarios forever", kind="switch"),
            flags.Flag(
                "--loop.gap",
                "loop_gap",
                "simulated pause between scenarios (default 10s)",
                convert=duration,
                default=10.0,
                metavar="DURATION",
            ),
            flags.Flag(
                "--vm.name",
                "vm_name",
                "name of the simulated VM (default sim-vm-0)",
                default="sim-vm-0",
                metavar="NAME",
            ),
            flags.Flag("--seed", "seed", "random seed for EventIds and fault dice", convert=int),
            flags.Flag(
                "--events.disable-after",
                "disable_after",
                "simulated time without requests that disables Scheduled Events; the next request enables them again "
                "and DocumentIncarnation starts over (Azure: 24h, the default; 0: never)",
                convert=duration,
                default=DISABLE_AFTER_SECONDS,
                metavar="DURATION",
            ),
            flags.Flag(
                "--events.enable-delay",
                "enable_delay",
                "how long the answers to an enabling request take, in simulated time (Azure: up to 2m, the default)",
                convert=duration,
                default=ANSWER_DELAY_SECONDS,
                metavar="DURATION",
            ),
            flags.Flag(
                "--events.list-delay",
                "list_delay",
                "how long after an enabling request events are listed, in simulated time (Azure: within 5m, the "
                "default)",
                convert=duration,
                default=EVENTS_DELAY_SECONDS,
                metavar="DURATION",
            ),
            flags.Flag(
                "--events.start-disabled",
                "start_disabled",
                "start with Scheduled Events disabled, as on a VM that never asked: the first request enables them",
                kind="switch",
            ),
            flags.Flag(
                "--fault.first-response-delay",
                "first_delay",
                "delay the first scheduled-events answer by this real duration",
                convert=duration,
                default=0.0,
                metavar="DURATION",
            ),
            flags.Flag(
                "--fault.status",
                "fault_status",
                "answer CODE (500, 503, 429, 410...) to the next COUNT polls",
                convert=_counted("status", int),
                metavar="CODE[:COUNT]",
                kind="list",
            ),
            flags.Flag(
                "--fault.error-rate",
                "error_rate",
                "probability (0-1) that any poll fails with --fault.error-code",
                convert=float,
                default=0.0,
                metavar="P",
            ),
            flags.Flag(
                "--fault.error-code",
                "error_code",
                "code for --fault.error-rate",
                convert=int,
                default=503,
                metavar="CODE",
            ),
            flags.Flag(
                "--fault.malformed",
                "fault_malformed",
                f"answer a broken body to the next COUNT polls; KIND: {', '.join(MALFORMED)}",
                convert=_counted("malformed", _malformed_kind),
                metavar="KIND[:COUNT]",
                kind="list",
            ),
            flags.Flag(
                "--fault.reset",
                "fault_reset",
                "reset the connection of the next COUNT polls",
                convert=int,
                default=0,
                metavar="COUNT",
            ),
            flags.Flag(
                "--fault.delay",
                "fault_delay",
                "delay the next COUNT polls by DURATION (real time)",
                convert=_counted("delay", duration),
                metavar="DURATION[:COUNT]",
                kind="list",
            ),
            flags.Flag(
                "--fault.rate-limit",
                "rate_limit",
                "answer 429 beyond this many requests per second (IMDS: 5; default 0 = off)",
                convert=int,
                default=0,
                metavar="N",
            ),
            flags.Flag(
                "--fault.refuse-api-version",
                "refuse_api_versions",
                "answer this api-version of scheduledevents as IMDS answers one it does not serve (400), as on a "
                "VM not enrolled in a preview (repeat for more)",
                convert=_api_version,
                metavar="VERSION",
                kind="list",
            ),
            flags.Flag("--list-scenarios", "list_scenarios", "print the built-in scenarios and exit", kind="switch"),
            flags.Flag("--quiet", "quiet", "do not log document changes on stderr", kind="switch"),
        )
    )


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
    plan.refuse_api_versions(set(args.refuse_api_versions))
    return plan
