"""``se-exporter demo``: the simulator and the exporter in one process, looping real scenarios."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from se_exporter.config.flags import Flag, Parser, duration
from se_exporter.config.options import add_exporter_flags, config_from_args
from se_exporter.simulator.clock import SimClock
from se_exporter.simulator.flags import speed
from se_exporter.simulator.model import SimulatedVM
from se_exporter.simulator.scenario_file import builtin_scenario
from se_exporter.simulator.server import SimulatorServer
from se_exporter.simulator.world import SimWorld

if TYPE_CHECKING:
    from se_exporter.process import StopRequest

log = logging.getLogger(__name__)
DEMO_POLICY = Path(__file__).parents[1] / "approval" / "demo-policy.yaml"  # the package's approval/
DEMO_VM = "sim-vm-0"
# Something starts at once (a Spot eviction's 30 s notice), then a Spot eviction-risk notice and the eviction
# that follows it, a hardware failure appearing Started while the exporter watches, then the documented
# maintenance kinds. Not the degraded host's Redeploy: its
# notice is days (platform-redeploy-failure).
DEMO_ORDER = (
    "spot-preempt",
    "spot-eviction-risk",
    "hardware-failure",
    "user-reboot",
    "freeze-live-migration",
    "freeze-no-impact",
    "reschedule",
    "host-maintenance-freeze",
    "terminate",
    "cancelled-maintenance",
    "user-redeploy",
)  # every impact and every cause


def add_arguments(parser: Parser) -> None:
    demo_policy = (
        "approval policy (YAML); default in the demo: its demo policy, which approves live migrations, "
        "user-initiated events and freezes of at most 8 s (se_exporter/approval/demo-policy.yaml)"
    )
    # The demo's IMDS is its own simulator; it shows approvals too, under its own policy unless given one.
    add_exporter_flags(parser, imds_url=False, helps={"--approval.config": demo_policy})
    parser.add_flags(
        (
            Flag(
                "--demo.speed",
                "demo_speed",
                "simulated seconds per real second (default 30: a 15-minute notice lasts 30 s)",
                convert=speed,
                default=30.0,
                metavar="FACTOR",
            ),
            Flag(
                "--demo.gap",
                "demo_gap",
                "simulated time between scenarios: 250ms, 1s, 2m or seconds (default 1m)",
                convert=duration,
                default=60.0,
                metavar="DURATION",
            ),
        ),
        "demo",
    )
    # At 30x a Freeze stays Started for about a second: poll fast enough to see it.
    parser.set_defaults(poll_interval=0.25)


def run(args: argparse.Namespace, environ: Mapping[str, str], stop: StopRequest) -> int:
    from se_exporter.app import Exporter
    from se_exporter.process import serve

    world = SimWorld(vm=SimulatedVM(name=DEMO_VM), clock=SimClock(args.demo_speed))
    world.loop([builtin_scenario(name) for name in DEMO_ORDER], gap=args.demo_gap)
    simulator = SimulatorServer(world).start()
    config = dataclasses.replace(config_from_args(args), imds_url=simulator.url)
    if config.approval_config is None:  # show approvals too: the user's reboot is approved at once
        config = dataclasses.replace(config, approval_config=DEMO_POLICY)
    exporter = Exporter(config, environ=environ, stop=stop.event)

    def start() -> None:
        exporter.start()
        url = exporter.url  # None with --web.listen-address= empty: the textfile is the output
        try_it = f"curl -s {url}" if url else f"cat {config.textfile_path}"
        print(
            f"se-exporter demo: simulated IMDS at {simulator.url} playing {', '.join(DEMO_ORDER)}"
            f" at {args.demo_speed:g}x\n"
            f"  metrics:  {url or config.textfile_path}\n"
            f"  approval: {config.approval_config}\n"
            f"  try:      {try_it} | grep -E 'pending|event_info|transitions_total'\n"
            "  Ctrl-C to stop.",
            file=sys.stderr,
            flush=True,
        )

    def close() -> None:
        exporter.close()
        simulator.stop()

    return serve(stop, start, exporter.run, close)
