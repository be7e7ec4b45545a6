"""The exporter's configuration: flags (see flags.py) turned into a validated, typed value."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from se_exporter.config import flags, values
from se_exporter.errors import ConfigError
from se_exporter.imds.impact import DISRUPTIVE_IMPACTS
from se_exporter.logs import FORMATS, LEVELS


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    listen_host: str = ""
    listen_port: int | None = 10160  # None: no port is served (--web.listen-address= with --textfile.path)
    telemetry_path: str = "/metrics"
    imds_url: str = "http://169.254.169.254"
    api_versions: tuple[str, ...] = ("2020-07-01",)  # newest first
    poll_interval: float = 1.0
    imds_timeout: float = 5.0
    vm_name: str | None = None
    state_file: Path | None = None
    approval_config: Path | None = None
    actions_config: Path | None = None
    web_config_file: Path | None = None
    traffic_lead_time: float = 300.0
    traffic_impacts: tuple[str, ...] = tuple(DISRUPTIVE_IMPACTS)
    log_level: str = "info"
    log_format: str = "logfmt"
    textfile_path: Path | None = None


_DEFAULT = ExporterConfig()
# The exporter's flags, each a row of the table argparse is given (help titles first); their dests are
# ExporterConfig's fields, but for --web.listen-address (listen_host and listen_port).
EXPORTER_FLAGS: tuple[tuple[str, tuple[flags.Flag, ...]], ...] = (
    (
        "web",
        (
            flags.Flag(
                "--web.listen-address",
                "listen_address",
                "address to serve metrics on (default :10160; empty: no port, with --textfile.path)",
                convert=flags.listen_address,
                default=(_DEFAULT.listen_host, _DEFAULT.listen_port),
                metavar="ADDR",
            ),
            flags.Flag(
                "--web.telemetry-path",
                "telemetry_path",
                "path under which to expose metrics (default /metrics)",
                convert=values.path_flag,
                metavar="PATH",
            ),
            flags.Flag(
                "--web.config.file",
                "web_config_file",
                "TLS, basic auth and headers (Prometheus exporter-toolkit format; default and empty: none)",
                convert=values.optional_file,
                metavar="FILE",
            ),
            flags.Flag(
                "--textfile.path",
                "textfile_path",
                "also write the metrics to FILE (*.prom) after every poll, for node_exporter's textfile collector",
                convert=values.textfile_flag,
                metavar="FILE",
            ),
        ),
    ),
    (
        "IMDS",
        (
            flags.Flag(
                "--imds.url",
                "imds_url",
                "IMDS base URL (default http://169.254.169.254)",
                convert=values.url_flag,
                metavar="URL",
            ),
            flags.Flag(
                "--imds.api-version",
                "api_versions",
                "Scheduled Events api-versions, newest first: the first this VM's IMDS accepts is used, the "
                "first asked again hourly (default 2020-07-01; e.g. 2024-07-09,2020-07-01 for Spot eviction-risk "
                "notices where IMDS serves them)",
                convert=values.api_versions_flag,
                metavar="VERSIONS",
            ),
            flags.Flag(
                "--imds.timeout",
                "imds_timeout",
                "read timeout of an IMDS request after the first (default 5s)",
                convert=values.positive_duration,
                metavar="DURATION",
            ),
            flags.Flag(
                "--poll.interval",
                "poll_interval",
                "time between polls: 250ms, 1s, 2m or seconds (default 1s)",
                convert=values.poll_interval,
                metavar="DURATION",
            ),
            flags.Flag(
                "--vm.name",
                "vm_name",
                "this VM's name as listed in Resources (default: learned from IMDS compute metadata)",
                metavar="NAME",
            ),
        ),
    ),
    (
        "state and approval",
        (
            flags.Flag(
                "--state.file",
                "state_file",
                "file to keep event lifecycles in across restarts (default: none)",
                convert=Path,
                metavar="FILE",
            ),
            flags.Flag(
                "--approval.config",
                "approval_config",
                "approval policy (YAML); approval is off without it",
                convert=Path,
                metavar="FILE",
            ),
            flags.Flag(
                "--actions.config",
                "actions_config",
                "commands to run on transitions (YAML); none without it",
                convert=Path,
                metavar="FILE",
            ),
        ),
    ),
    (
        "traffic (/-/traffic, for a load balancer's health probe)",
        (
            flags.Flag(
                "--traffic.lead-time",
                "traffic_lead_time",
                "answer 503 from this long before the NotBefore of a disruptive event (default 5m)",
                convert=flags.duration,
                metavar="DURATION",
            ),
            flags.Flag(
                "--traffic.impacts",
                "traffic_impacts",
                f"impacts that take the VM out of traffic (default {','.join(_DEFAULT.traffic_impacts)})",
                convert=values.impacts_flag,
                metavar="LIST",
            ),
        ),
    ),
    (
        "logging",
        (
            flags.Flag("--log.level", "log_level", "", choices=tuple(LEVELS)),
            flags.Flag("--log.format", "log_format", "", choices=tuple(FORMATS)),
        ),
    ),
)


def add_exporter_flags(
    parser: flags.Parser, *, imds_url: bool = True, helps: Mapping[str, str] = MappingProxyType({})
) -> None:
    """The exporter's flags, defaults from ``ExporterConfig``; ``imds_url=False`` leaves out --imds.url (the
    demo brings its own IMDS); ``helps`` replaces the help text of the flags it names (a command whose
    default differs says so)."""
    for title, table in EXPORTER_FLAGS:
        rows = [flag for flag in table if imds_url or flag.option != "--imds.url"]
        rows = [dataclasses.replace(flag, help=helps[flag.option]) if flag.option in helps else flag for flag in rows]
        parser.add_flags([_with_default(flag) for flag in rows], title)


def config_from_args(args: argparse.Namespace) -> ExporterConfig:
    """The configuration the exporter's flags in ``args`` describe (those a command left out keep their default)."""
    given = {flag.dest: getattr(args, flag.dest) for _, table in EXPORTER_FLAGS for flag in table if flag.dest in args}
    host, port = given.pop("listen_address")
    if port is None and args.textfile_path is None:
        raise ConfigError(
            "--web.listen-address is empty and no --textfile.path is given: nothing would expose the metrics"
        )
    return ExporterConfig(listen_host=host, listen_port=port, **given | {"vm_name": args.vm_name or None})


def _with_default(flag: flags.Flag) -> flags.Flag:
    if flag.dest == "listen_address":
        return flag
    return dataclasses.replace(flag, default=getattr(_DEFAULT, flag.dest))
