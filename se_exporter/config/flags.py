"""Command-line flags with SE_EXPORTER_* environment twins, and their value types.

Flags follow node_exporter's style (``--web.listen-address``). Every flag also reads
``SE_EXPORTER_<FLAG>`` (upper case, ``.`` and ``-`` become ``_``); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from typing import NoReturn

ENV_PREFIX = "SE_EXPORTER_"
PROG = "se-exporter"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_DURATION_SECONDS = 7 * 24 * 3600.0


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the flag (the usage is behind --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{PROG}: error: {message} (see --help)\n")


def duration(text: str) -> float:
    """``250ms``, ``1s``, ``2m``, ``1h`` or plain seconds, as float seconds (at most a week: beyond, no timer
    of the platform's takes it)."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (use e.g. 250ms, 1s, 2m or plain seconds)")
    seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds > MAX_DURATION_SECONDS:
        raise argparse.ArgumentTypeError(f"duration {text!r} is too long (at most 168h)")
    return seconds


def listen_address(text: str) -> tuple[str, int | None]:
    """``:10160``, ``127.0.0.1:10160`` or ``[::1]:10160`` as (host, port); a host of "" means every address.
    An empty address serves no port at all: ("", None) (with ``--textfile.path``, the file is the output)."""
    if not text.strip():
        return "", None
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise argparse.ArgumentTypeError(f"invalid listen address {text!r} (use host:port, e.g. :10160)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"invalid listen address {text!r} (write IPv6 hosts in brackets)")
    return host, int(port_text)


def env_name(option: str) -> str:
    return ENV_PREFIX + re.sub(r"[.-]", "_", option.lstrip("-")).upper()


def apply_environment(
    parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str], environ: Mapping[str, str]
) -> None:
    """Fill every flag not given on the command line from its environment twin, validated."""
    for action in parser._actions:  # argparse has no public API to list a parser's actions
        long_options = [o for o in action.option_strings if o.startswith("--")]
        if not long_options or action.dest in ("help", "version"):
            continue
        name = env_name(long_options[0])
        if name not in environ or _given(long_options, argv):
            continue
        setattr(args, action.dest, _convert(parser, action, name, environ[name]))


def refuse_repeats(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """A single-value flag given twice is an error, as kingpin-based exporters make it (argparse keeps the
    last value silently: ``check --approval.config=bad --approval.config=good`` said ok)."""
    for action in parser._actions:  # argparse has no public API to list a parser's actions
        if type(action) is not argparse._StoreAction:  # repeatable (append) and switch flags may repeat
            continue
        options = [o for o in action.option_strings if o.startswith("--")]
        if sum(arg == opt or arg.startswith(opt + "=") for arg in argv for opt in options) > 1:
            parser.error(f"flag {options[0]} cannot be repeated")


def _given(options: list[str], argv: Sequence[str]) -> bool:
    return any(arg == opt or arg.startswith(opt + "=") for arg in argv for opt in options)


def _convert(parser: argparse.ArgumentParser, action: argparse.Action, name: str, raw: str) -> object:
    if isinstance(action, argparse._StoreTrueAction):
        if raw.lower() not in ("1", "true", "yes", "0", "false", "no", ""):
            parser.error(f"environment variable {name}={raw!r}: expected true or false")
        return raw.lower() in ("1", "true", "yes")
    try:
        value = action.type(raw) if callable(action.type) else raw
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(f"environment variable {name}={raw!r}: {exc}")
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        parser.error(f"environment variable {name}={raw!r}: must be one of {choices}")
    if action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
        return [value]
    return value
