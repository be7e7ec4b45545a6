"""The exporter's configuration: flags (see flags.py) turned into a validated, typed value."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

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
    api_version: str = "2020-07-01"
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


def add_exporter_flags(parser: flags.Parser, *, imds_url: bool = True) -> None:
    """The exporter's flags; ``imds_url=False`` leaves out --imds.url (the demo brings its own IMDS)."""
    d = ExporterConfig()
    web = parser.flag_group("web")
    web.add_argument(
        "--web.listen-address",
        dest="listen_address",
        type=flags.listen_address,
        default=(d.listen_host, d.listen_port),
        metavar="ADDR",
        help="address to serve metrics on (default :10160; empty: no port, with --textfile.path)",
    )
    web.add_argument(
        "--web.telemetry-path",
        dest="telemetry_path",
        type=values.path_flag,
        default=d.telemetry_path,
        metavar="PATH",
        help="path under which to expose metrics (default /metrics)",
    )
    web.add_argument(
        "--web.config.file",
        dest="web_config_file",
        type=values.optional_file,
        default=None,
        metavar="FILE",
        help="TLS, basic auth and headers (Prometheus exporter-toolkit format; default and empty: none)",
    )
    web.add_argument(
        "--textfile.path",
        dest="textfile_path",
        type=values.textfile_flag,
        default=None,
        metavar="FILE",
        help="also write the metrics to FILE (*.prom) after every poll, for node_exporter's textfile collector",
    )
    imds = parser.flag_group("IMDS")
    if imds_url:
        imds.add_argument(
            "--imds.url",
            dest="imds_url",
            type=values.url_flag,
            default=d.imds_url,
            metavar="URL",
            help="IMDS base URL (default http://169.254.169.254)",
        )
    imds.add_argument(
        "--imds.api-version",
        dest="api_version",
        type=values.api_version_flag,
        default=d.api_version,
        metavar="VERSION",
        help="Scheduled Events api-version (default 2020-07-01)",
    )
    imds.add_argument(
        "--imds.timeout",
        dest="imds_timeout",
        type=values.positive_duration,
        default=d.imds_timeout,
        metavar="DURATION",
        help="read timeout of an IMDS request after the first (default 5s)",
    )
    imds.add_argument(
        "--poll.interval",
        dest="poll_interval",
        type=values.poll_interval,
        default=d.poll_interval,
        metavar="DURATION",
        help="time between polls: 250ms, 1s, 2m or seconds (default 1s)",
    )
    imds.add_argument(
        "--vm.name",
        dest="vm_name",
        default=None,
        metavar="NAME",
        help="this VM's name as listed in Resources (default: learned from IMDS compute metadata)",
    )
    state = parser.flag_group("state and approval")
    state.add_argument(
        "--state.file",
        dest="state_file",
        type=Path,
        default=None,
        metavar="FILE",
        help="file to keep event lifecycles in across restarts (default: none)",
    )
    state.add_argument(
        "--approval.config",
        dest="approval_config",
        type=Path,
        default=None,
        metavar="FILE",
        help="approval policy (YAML); approval is off without it",
    )
    state.add_argument(
        "--actions.config",
        dest="actions_config",
        type=Path,
        default=None,
        metavar="FILE",
        help="commands to run on transitions (YAML); none without it",
    )
    traffic = parser.flag_group("traffic (/-/traffic, for a load balancer's health probe)")
    traffic.add_argument(
        "--traffic.lead-time",
        dest="traffic_lead_time",
        type=flags.duration,
        default=d.traffic_lead_time,
        metavar="DURATION",
        help="answer 503 from this long before the NotBefore of a disruptive event (default 5m)",
    )
    traffic.add_argument(
        "--traffic.impacts",
        dest="traffic_impacts",
        type=values.impacts_flag,
        default=d.traffic_impacts,
        metavar="LIST",
        help=f"impacts that take the VM out of traffic (default {','.join(d.traffic_impacts)})",
    )
    logging_group = parser.flag_group("logging")
    logging_group.add_argument("--log.level", dest="log_level", choices=list(LEVELS), default=d.log_level)
    logging_group.add_argument("--log.format", dest="log_format", choices=list(FORMATS), default=d.log_format)


def config_from_args(args: argparse.Namespace) -> ExporterConfig:
    host, port = args.listen_address
    if port is None and args.textfile_path is None:
        raise ConfigError(
            "--web.listen-address is empty and no --textfile.path is given: nothing would expose the metrics"
        )
    return ExporterConfig(
        listen_host=host,
        listen_port=port,
        telemetry_path=args.telemetry_path,
        imds_url=getattr(args, "imds_url", ExporterConfig().imds_url),
        api_version=args.api_version,
        poll_interval=args.poll_interval,
        imds_timeout=args.imds_timeout,
        vm_name=args.vm_name or None,
        state_file=args.state_file,
        approval_config=args.approval_config,
        actions_config=args.actions_config,
        web_config_file=args.web_config_file,
        traffic_lead_time=args.traffic_lead_time,
        traffic_impacts=args.traffic_impacts,
        log_level=args.log_level,
        log_format=args.log_format,
        textfile_path=args.textfile_path,
    )
