"""Command-line flags with SE_EXPORTER_* environment twins, and the value types every command shares (durations,
listen addresses; the exporter's own are in ``config/values.py``).

Flags follow node_exporter's style (``--web.listen-address``). Every flag also reads
``SE_EXPORTER_<FLAG>`` (upper case, ``.`` and ``-`` become ``_``); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, Protocol

ENV_PREFIX = "SE_EXPORTER_"
PROG = "se-exporter"
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_DURATION_SECONDS = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Flag:
    """One row of a command's flag table: the option, where its value goes, its kind and how its text becomes a
    value. The table is read by :func:`apply_environment` and :func:`refuse_repeats`, and handed to argparse,
    which only parses the command line."""

    option: str  # --web.listen-address; also names its environment twin
    dest: str
    help: str
    convert: Callable[[str], Any] | None = None
    default: Any = None
    metavar: str | None = None
    kind: Literal["value", "switch", "list"] = "value"  # a value given once; a true/false switch; repeatable
    choices: tuple[str, ...] | None = None

    @property
    def env(self) -> str:
        return env_name(self.option)

    def argparse_keywords(self) -> dict[str, Any]:
        """What ``add_argument`` is given for this row."""
        if self.kind == "switch":
            return {"dest": self.dest, "action": "store_true", "help": self.help}
        keywords = {"dest": self.dest, "default": self.default, "metavar": self.metavar, "help": self.help}
        if self.convert is not None:
            keywords["type"] = self.convert
        if self.choices is not None:
            keywords["choices"] = self.choices
        if self.kind == "list":  # a list of its own (argparse copies it before appending)
            keywords |= {"action": "append", "default": list(self.default or ())}
        return keywords


class _TakesCommands(Protocol):  # what argparse's add_subparsers returns (its class is private)
    def add_parser(self, name: str, **kwargs: Any) -> Parser: ...


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the flag (the usage is behind --help), its flags come from
    our tables (:attr:`flags`), and the subcommands' parsers are kept (:attr:`commands`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.flags: list[Flag] = []
        self.commands: dict[str, Parser] = {}
        super().__init__(*args, **kwargs)

    def add_flags(self, table: Sequence[Flag], title: str | None = None) -> None:
        """The flags of ``table``, listed in --help under ``title`` (argparse's argument group) if given."""
        holder = self.add_argument_group(title) if title else self
        for flag in table:
            holder.add_argument(flag.option, **flag.argparse_keywords())
        self.flags.extend(table)

    def add_commands(self, **kwargs: Any) -> None:
        """Subcommands (argparse's subparsers); each is then added with :meth:`add_command`."""
        self._commands: _TakesCommands = self.add_subparsers(**kwargs)

    def add_command(self, name: str, **kwargs: Any) -> Parser:
        self.commands[name] = self._commands.add_parser(name, **kwargs)
        return self.commands[name]

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
    parser: Parser, args: argparse.Namespace, argv: Sequence[str], environ: Mapping[str, str]
) -> None:
    """Fill every flag not given on the command line from its environment twin, validated."""
    for flag in parser.flags:
        if flag.env in environ and not _given(flag.option, argv):
            setattr(args, flag.dest, _convert(parser, flag, environ[flag.env]))


def refuse_repeats(parser: Parser, argv: Sequence[str]) -> None:
    """A single-value flag given twice is an error, as kingpin-based exporters make it (argparse keeps the
    last value silently: ``check --approval.config=bad --approval.config=good`` said ok)."""
    for flag in parser.flags:
        if flag.kind == "value" and sum(_is(arg, flag.option) for arg in argv) > 1:
            parser.error(f"flag {flag.option} cannot be repeated")


def _is(arg: str, option: str) -> bool:
    return arg == option or arg.startswith(option + "=")


def _given(option: str, argv: Sequence[str]) -> bool:
    return any(_is(arg, option) for arg in argv)


def _convert(parser: Parser, flag: Flag, raw: str) -> object:
    name = flag.env
    if flag.kind == "switch":
        if raw.lower() not in ("1", "true", "yes", "0", "false", "no", ""):
            parser.error(f"environment variable {name}={raw!r}: expected true or false")
        return raw.lower() in ("1", "true", "yes")
    try:
        value = flag.convert(raw) if flag.convert is not None else raw
    except (argparse.ArgumentTypeError, ValueError) as exc:
        parser.error(f"environment variable {name}={raw!r}: {exc}")
    if flag.choices is not None and value not in flag.choices:
        choices = ", ".join(map(str, flag.choices))
        parser.error(f"environment variable {name}={raw!r}: must be one of {choices}")
    return [value] if flag.kind == "list" else value
