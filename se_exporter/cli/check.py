"""``se-exporter check``: validate the files an operator writes, as ``promtool check config`` does.

Each file is read exactly as the exporter reads it at start (``operator_files.load_operator_files``: the same
schema, the same hook and certificate checks), without binding a port or calling IMDS. Every problem of
every file is one line on stderr naming the file and the key path, and the exit code is 2; otherwise
``ok`` on stdout and exit 0. Flags take their ``SE_EXPORTER_*`` environment twins like the exporter's,
so ``se-exporter check`` in a container checks what the exporter there would load. On Windows it also checks
that the service's account can run this Python (an interpreter installed for one user cannot be).
"""

from __future__ import annotations

import argparse
import sys

from se_exporter.config.flags import Flag, Parser
from se_exporter.config.values import optional_file
from se_exporter.errors import ConfigError

FILE_FLAGS = tuple(
    Flag(option, dest, help_text, convert=optional_file, metavar="FILE")
    for option, dest, help_text in (
        ("--approval.config", "approval_config", "approval policy (YAML)"),
        ("--actions.config", "actions_config", "actions on transitions (YAML)"),
        ("--web.config.file", "web_config_file", "TLS, basic auth and headers (exporter-toolkit format)"),
    )
)


def add_arguments(parser: Parser) -> None:
    parser.add_flags(FILE_FLAGS)


def run(args: argparse.Namespace) -> int:
    """0 and ``ok`` when every given file is valid; raises ``ConfigError`` (one line per problem) otherwise."""
    from se_exporter.config.options import ExporterConfig
    from se_exporter.operator_files import load_operator_files
    from se_exporter.platform import current

    files = {flag.dest: getattr(args, flag.dest) for flag in FILE_FLAGS}
    platform = current()
    interpreter = platform.service_interpreter_problem(sys.base_prefix)
    if interpreter:
        raise ConfigError(interpreter)
    if not any(files.values()) and platform.service_account is None:  # else the interpreter was something to check
        given = ", ".join(flag.option for flag in FILE_FLAGS)
        raise ConfigError(f"nothing to check: give {given} (or their SE_EXPORTER_* variables)")
    if any(files.values()):
        load_operator_files(ExporterConfig(**files))
    print("ok")
    return 0
