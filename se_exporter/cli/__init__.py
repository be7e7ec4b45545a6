"""The ``se-exporter`` command: ``run`` (default), ``simulate``, ``demo`` and ``check``.

Only what the chosen command needs is imported: ``--version`` and ``--help`` touch neither the
simulator nor OpenTelemetry nor the approval package, and ``run`` never imports the simulator.
``se-exporter --help`` is the exporter's help (the default command), which lists the others. Every
error is one line per problem, ``se-exporter: error: ...``, with exit code 2.

``se-exporter check`` validates the files an operator writes, as ``promtool check config`` does.

Each file is read exactly as the exporter reads it at start (``app.load_operator_files``: the same
schema, the same hook and certificate checks), without binding a port or calling IMDS. Every problem of
every file is one line on stderr naming the file and the key path, and the exit code is 2; otherwise
``ok`` on stdout and exit 0. Flags take their ``SE_EXPORTER_*`` environment twins like the exporter's,
so ``se-exporter check`` in a container checks what the exporter there would load. On Windows it also checks
that the service's account can run this Python (an interpreter installed for one user cannot be)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from se_exporter import __version__
from se_exporter.config.flags import PROG, Flag, Parser
from se_exporter.errors import ConfigError

if TYPE_CHECKING:
    from se_exporter.process import StopRequest

COMMANDS = {
    "run": "run the exporter (the default)",
    "simulate": "run a local IMDS simulator",
    "demo": "simulator and exporter in one process",
    "check": "validate configuration files without starting (like promtool check config)",
}
_OTHERS = (
    "other commands:\n"
    + "\n".join(f"  {name:9} {summary}" for name, summary in COMMANDS.items() if name != "run")
    + f"\n\n{PROG} COMMAND --help shows a command's flags."
)
log = logging.getLogger("se_exporter")


def report(message: str) -> int:
    """The one way the command reports a problem it cannot go on with; returns the exit code, 2."""
    sys.stderr.write(f"{PROG}: error: {message}\n")
    return 2


def build_parser(commands: Sequence[str] = tuple(COMMANDS)) -> Parser:
    """The parser; each subcommand in ``commands`` gets its flags (the others only their name)."""
    parser = Parser(
        prog=PROG, description="Prometheus metrics and OTLP logs for Azure Scheduled Events.", allow_abbrev=False
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_commands(dest="command", metavar="COMMAND")
    for name, summary in COMMANDS.items():
        run = name == "run"  # the default: `se-exporter --help` is its help, and names the other commands
        sub = parser.add_command(
            name,
            help=summary,
            description=summary,
            allow_abbrev=False,
            prog=f"{PROG} [run]" if run else None,
            epilog=_OTHERS if run else None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if run:  # `se-exporter --help` is run's help: it lists --version too
            sub.add_argument("--version", action="version", version=f"{PROG} {__version__}")
        if name in commands:
            _add_arguments(name, sub)
    return parser


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    if argv == ["--version"]:  # before anything else is imported: packagers and probes call it
        print(f"{PROG} {__version__}")
        return 0
    from se_exporter.platform import current
    from se_exporter.process import StopRequest

    # First: a stop signal during start-up (a slow first IMDS answer, a state file to read) is a clean stop;
    # malloc's arenas are limited before that, since the stop request starts the first thread.
    platform = current()
    platform.limit_memory_arenas()  # before any thread starts
    stop = StopRequest().install(platform.stop_signals)
    try:
        return _command(argv, environ, stop)
    finally:
        stop.restore()


def _command(argv: list[str], environ: Mapping[str, str], stop: StopRequest) -> int:
    if not argv or argv[0] not in (*COMMANDS, "--version"):
        argv.insert(0, "run")  # `se-exporter --flag …` runs the exporter; `se-exporter --help` is its help
    command = argv[0] if argv[0] in COMMANDS else None
    parser = build_parser((command,) if command else ())
    args = parser.parse_args(argv)
    from se_exporter.config.flags import apply_environment, refuse_repeats

    refuse_repeats(subparser(parser, args.command), argv[1:])
    apply_environment(subparser(parser, args.command), args, argv[1:], environ)
    if args.command == "simulate":
        import se_exporter.simulator.command as simulator_command

        return simulator_command.run(args, stop.event)
    from se_exporter.errors import ConfigError

    _configure_logging(getattr(args, "log_level", "warn"), getattr(args, "log_format", "logfmt"))
    try:
        if args.command == "check":
            return _check(args, stop)
        if args.command == "demo":
            import se_exporter.cli.demo as demo_command

            return demo_command.run(args, environ, stop)
        return run_exporter(args, environ, stop)
    except ConfigError as error:
        for line in str(error).splitlines():  # one line per problem
            report(line)
        return 2


def _check(args: argparse.Namespace, stop: StopRequest) -> int:
    stop.restore()  # nothing to save: Ctrl-C or SIGTERM end it at once, with a non-zero code
    try:
        return _run_check(args)
    except KeyboardInterrupt:
        return report("interrupted") + 128


def run_exporter(args: argparse.Namespace, environ: Mapping[str, str], stop: StopRequest) -> int:
    import dataclasses
    import gc

    from se_exporter.app import Exporter
    from se_exporter.config.options import config_from_args
    from se_exporter.config.values import untrusted_imds_url
    from se_exporter.platform import current
    from se_exporter.process import serve

    config = config_from_args(args)
    if config.state_file is None and (default := current().default_state_file(environ)) is not None:
        config = dataclasses.replace(config, state_file=default)  # a Windows service keeps its state
        log.info("running as a service: state and log spool in %s", default.parent)
    if untrusted_imds_url(config.imds_url):
        log.warning(
            "--imds.url=%s is neither link-local nor loopback: whatever answers there decides what is "
            "reported and approved; the real IMDS is http://169.254.169.254 (SECURITY.md)",
            config.imds_url,
        )
    exporter = Exporter(config, environ=environ, stop=stop.event)
    # Start-up objects live forever: keep them out of every later full collection (its pauses
    # showed up as the per-poll p99 at 1000 events, see BENCHMARKS.md).
    gc.freeze()
    return serve(stop, exporter.start, exporter.run, exporter.close)


def _add_arguments(command: str, parser: Parser) -> None:
    if command == "run":
        from se_exporter.config.options import add_exporter_flags

        add_exporter_flags(parser)
    elif command == "simulate":
        import se_exporter.simulator.flags as simulator_flags

        simulator_flags.add_arguments(parser)
    elif command == "check":
        _add_check_arguments(parser)
    else:
        import se_exporter.cli.demo as demo_command

        demo_command.add_arguments(parser)


def _configure_logging(level: str, fmt: str) -> None:
    from se_exporter import logs
    from se_exporter.logs import route_sdk_logs

    handler = logs.configure(level, fmt)
    route_sdk_logs(handler, logs.LEVELS[level])


def subparser(parser: Parser, command: str) -> Parser:
    """The parser of ``command`` (the docs' flags table and the tests read the run command's)."""
    return parser.commands[command]


# ``se-exporter check``
CHECK_FILES = (
    ("--approval.config", "approval_config", "approval policy (YAML)"),
    ("--actions.config", "actions_config", "actions on transitions (YAML)"),
    ("--web.config.file", "web_config_file", "TLS, basic auth and headers (exporter-toolkit format)"),
)


def _add_check_arguments(parser: Parser) -> None:
    from se_exporter.config.values import optional_file  # here, not at import: --version needs no dependency

    parser.add_flags(
        [Flag(option, dest, text, convert=optional_file, metavar="FILE") for option, dest, text in CHECK_FILES]
    )


def _run_check(args: argparse.Namespace) -> int:
    """0 and ``ok`` when every given file is valid; raises ``ConfigError`` (one line per problem) otherwise."""
    from se_exporter.app import load_operator_files
    from se_exporter.config.options import ExporterConfig
    from se_exporter.platform import current

    files = {dest: getattr(args, dest) for _, dest, _ in CHECK_FILES}
    platform = current()
    interpreter = platform.service_interpreter_problem(sys.base_prefix)
    if interpreter:
        raise ConfigError(interpreter)
    if not any(files.values()) and platform.service_account is None:  # else the interpreter was something to check
        given = ", ".join(option for option, _, _ in CHECK_FILES)
        raise ConfigError(f"nothing to check: give {given} (or their SE_EXPORTER_* variables)")
    if any(files.values()):
        load_operator_files(ExporterConfig(**files))
    print("ok")
    return 0
