"""The ``se-exporter`` command: ``run`` (default), ``simulate`` and ``demo``."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from se_exporter import __version__, logs
from se_exporter.config import flags
from se_exporter.config.options import add_exporter_flags, config_from_args, untrusted_imds_url
from se_exporter.errors import ConfigError
from se_exporter.otel.sdk_logs import route_sdk_logs
from se_exporter.process import serve

COMMANDS = ("run", "simulate", "demo")
log = logging.getLogger("se_exporter")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the flag (the usage is behind --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="se-exporter",
        description="Prometheus metrics and OTLP logs for Azure Scheduled Events.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"se-exporter {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser("run", help="run the exporter (the default)", allow_abbrev=False)
    add_exporter_flags(run)
    simulate = commands.add_parser("simulate", help="run a local IMDS simulator", allow_abbrev=False)
    import se_exporter.simulator.command as simulator_command

    simulator_command.add_arguments(simulate)
    demo = commands.add_parser("demo", help="simulator and exporter in one process", allow_abbrev=False)
    import se_exporter.demo as demo_command

    demo_command.add_arguments(demo)
    return parser


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    if not argv or argv[0] not in (*COMMANDS, "-h", "--help", "--version"):
        argv.insert(0, "run")  # `se-exporter --flag …` runs the exporter
    parser = build_parser()
    args = parser.parse_args(argv)
    subparser = _subparser(parser, args.command)
    flags.apply_environment(subparser, args, argv[1:], environ)
    if args.command == "simulate":
        import se_exporter.simulator.command as simulator_command

        return simulator_command.run(args)
    handler = logs.configure(args.log_level, args.log_format)
    route_sdk_logs(handler, logs.LEVELS[args.log_level])
    try:
        if args.command == "demo":
            import se_exporter.demo as demo_command

            return demo_command.run(args, environ)
        return run_exporter(args, environ)
    except ConfigError as error:
        print(f"se-exporter: error: {error}", file=sys.stderr)
        return 2


def run_exporter(args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    from se_exporter.app import Exporter

    config = config_from_args(args)
    if untrusted_imds_url(config.imds_url):
        log.warning("--imds.url=%s is neither link-local nor loopback: whatever answers there decides what is "
                    "reported and approved; the real IMDS is http://169.254.169.254 (SECURITY.md)", config.imds_url)
    try:
        exporter = Exporter(config, environ=environ)
    except OSError as error:
        raise ConfigError(f"--web.listen-address: cannot listen on {args.listen_address}: {error}") from None
    # Start-up objects live forever: keep them out of every later full collection (its pauses
    # showed up as the per-poll p99 at 1000 events, see BENCHMARKS.md).
    gc.freeze()
    return serve(exporter.start, exporter.run, exporter.close)


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:  # argparse offers no public lookup of subparsers
        if isinstance(action, argparse._SubParsersAction):
            chosen: argparse.ArgumentParser = action.choices[command]
            return chosen
    raise AssertionError("parser has no subcommands")
