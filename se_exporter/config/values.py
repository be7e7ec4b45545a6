"""The value types of the exporter's flags: each turns the text of a flag (or its variable) into a value, or says
in one line why it cannot (argparse prints it with the flag's name)."""

from __future__ import annotations

import argparse
import ipaddress
import itertools
import re
from pathlib import Path
from urllib.parse import urlsplit

from se_exporter.config import flags
from se_exporter.imds import IMDS_MIN_REQUEST_SPACING, api_versions
from se_exporter.imds.impact import IMPACTS

HEALTHY_PATH = "/-/healthy"  # served by the web server; --web.telemetry-path may not take these or "/"
READY_PATH = "/-/ready"
TRAFFIC_PATH = "/-/traffic"  # for a load balancer's health probe: served without basic auth
_API_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def path_flag(text: str) -> str:
    if not text.startswith("/") or text in ("/", HEALTHY_PATH, READY_PATH, TRAFFIC_PATH):
        raise argparse.ArgumentTypeError(
            f"{text!r} must start with / and not be /, {HEALTHY_PATH}, {READY_PATH} or {TRAFFIC_PATH}"
        )
    return text


def optional_file(text: str) -> Path | None:
    """A file flag where empty means none, as node_exporter reads ``--web.config.file=``."""
    return Path(text) if text else None


def textfile_flag(text: str) -> Path:
    if not text.endswith(".prom"):
        raise argparse.ArgumentTypeError(
            f"{text!r} must end in .prom: node_exporter's textfile collector reads no other file"
        )
    return Path(text)


def url_flag(text: str) -> str:
    if not re.match(r"^https?://[^/\s]+$", text.rstrip("/")):
        raise argparse.ArgumentTypeError(f"invalid URL {text!r} (use e.g. http://169.254.169.254)")
    return text.rstrip("/")


def untrusted_imds_url(url: str) -> bool:
    """True when ``url`` is neither link-local (the real IMDS) nor loopback (the simulator)."""
    host = urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host != "localhost"  # a name: DNS, and possibly a proxy, decide who answers
    return not (address.is_link_local or address.is_loopback)


def api_versions_flag(text: str) -> tuple[str, ...]:
    """A comma-separated list of api-versions, newest first; each a date IMDS could serve. A fallback must have
    every field (2020-07-01 or later): a switch to an older one would change every listed event."""
    chosen = tuple(part.strip() for part in text.split(","))
    for version in chosen:
        if not _API_VERSION.match(version):
            shown = f"invalid api-version {version!r}" if version else "an empty api-version"
            raise argparse.ArgumentTypeError(f"{shown} in {text!r} (use dates like 2020-07-01, newest first)")
        if (why := api_versions.refusal(version)) is not None:
            raise argparse.ArgumentTypeError(why)
    for newer, older in itertools.pairwise(chosen):
        if older == newer:
            raise argparse.ArgumentTypeError(f"api-version {older} is listed twice in {text!r}")
        if older > newer:
            raise argparse.ArgumentTypeError(
                f"{text!r} must list the newest api-version first: {older} comes after {newer}"
            )
        if lacking := api_versions.lacks(older):
            raise argparse.ArgumentTypeError(
                f"api-version {older} cannot follow {newer}: it has no {', '.join(lacking)}, so a switch to it "
                f"would change every listed event (a fallback must be {api_versions.DEFAULT} or later)"
            )
    return chosen


def impacts_flag(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    if not chosen:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no impact (use a comma-separated list of {', '.join(IMPACTS)})"
        )
    if unknown := [impact for impact in chosen if impact not in IMPACTS]:
        named = ", ".join(repr(impact) for impact in dict.fromkeys(unknown))
        raise argparse.ArgumentTypeError(
            f"{named} {'is not an impact' if len(unknown) == 1 else 'are not impacts'} (use {', '.join(IMPACTS)})"
        )
    return tuple(dict.fromkeys(chosen))


def positive_duration(text: str) -> float:
    seconds = flags.duration(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be greater than zero")
    return seconds


def poll_interval(text: str) -> float:
    seconds = flags.duration(text)
    if seconds < IMDS_MIN_REQUEST_SPACING:
        raise argparse.ArgumentTypeError(
            f"poll interval {text!r} is below 250ms: IMDS allows 5 requests/s and throttles beyond"
        )
    return seconds
