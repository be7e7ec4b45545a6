"""The container image's HEALTHCHECK: ``python -m se_exporter.web.healthcheck``.

A HEALTHCHECK runs beside the exporter, not in it, and sees only the container's environment; the
flags are in the exporter's command line. So the probe reads that command line (``/proc/1/cmdline``:
the entrypoint is PID 1, or the argv after an init such as ``podman run --init``'s), and finds the
listen address and the web config file the way the exporter does: a flag wins over its
``SE_EXPORTER_*`` twin, then the default. It asks ``/-/healthy`` over HTTP, or HTTPS when the web
config sets TLS (no verification: it is the server in this container, not a peer to trust). 200 is
healthy; so is 401 when basic auth guards ``/-/healthy`` (the probe has no password, only hashes
exist), and a refused client certificate when the web config requires one: the server answered. httpx
asks, within one total deadline (``imds/client.py``).
Exit 0 when healthy, 1 with one line on stderr otherwise (Docker's and podman's contract).
"""

from __future__ import annotations

import os
import re
import ssl
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from se_exporter.config.flags import Parser, apply_environment
from se_exporter.config.options import add_exporter_flags
from se_exporter.config.values import HEALTHY_PATH
from se_exporter.errors import os_problem
from se_exporter.imds.client import DeadlineTransport, root_cause, within

TIMEOUT_SECONDS = 4.0  # under the image's --timeout=5s
_ENTRYPOINTS = ("se-exporter", "se-exporter.exe")


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int | None  # None: no port served; the textfile's age tells instead
    web_config_file: Path | None
    textfile: Path | None = None
    poll_interval: float = 1.0


def exporter_argv(cmdline: Sequence[str]) -> list[str]:
    """The exporter's own arguments in a process's argv (``se-exporter ...``, ``python -m se_exporter ...``,
    or either behind an init); ``[]`` when none is there."""
    for index, arg in enumerate(cmdline):
        if re.split(r"[\\/]", arg)[-1] in _ENTRYPOINTS:  # a POSIX or a Windows path
            return list(cmdline[index + 1 :])
        if arg == "-m" and cmdline[index + 1 : index + 2] == ["se_exporter"]:
            return list(cmdline[index + 2 :])
    return []


def target(argv: Sequence[str], environ: Mapping[str, str]) -> Target:
    """Where the exporter started with ``argv`` and ``environ`` listens (its own flags and parsing)."""
    parser = Parser(add_help=False, allow_abbrev=False)
    add_exporter_flags(parser)
    args, _ = parser.parse_known_args(argv)  # the command (run, demo) and its other flags are not ours
    apply_environment(parser, args, argv, environ)
    host, port = args.listen_address
    return Target(_loopback_for(host), port, args.web_config_file, args.textfile_path, args.poll_interval)


def _loopback_for(host: str) -> str:
    if host in ("", "0.0.0.0"):  # every address: the loopback one is among them
        return "127.0.0.1"
    return "::1" if host == "::" else host


def probe(where: Target) -> str | None:
    """``None`` when the exporter at ``where`` is healthy, else why not."""
    if where.port is None:
        return _textfile_problem(where.textfile, where.poll_interval)
    tls, auth = _web_config(where.web_config_file)
    host = f"[{where.host}]" if ":" in where.host else where.host
    url = f"{'https' if tls is not None else 'http'}://{host}:{where.port}{HEALTHY_PATH}"
    context = None
    if tls is not None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    transport = DeadlineTransport(httpx.Limits(max_connections=1), tls=context)
    try:
        with (
            httpx.Client(transport=transport, trust_env=False, timeout=TIMEOUT_SECONDS) as client,
            within(time.monotonic() + TIMEOUT_SECONDS),
        ):
            status = client.get(url).status_code
    except httpx.HTTPError as error:
        if tls == "RequireAndVerifyClientCert" and _refused_in_tls(error):
            return None  # it took the connection and refused us for want of a client certificate
        return f"{url}: {_words(error)}"
    if status == 200 or (status == 401 and auth):
        return None
    return f"{url}: HTTP {status}"


def _textfile_problem(path: Path | None, poll_interval: float) -> str | None:
    """Without a port, the exporter is alive while its textfile is rewritten after every poll (a failed poll
    is followed by a pause of at most the backoff's cap, 15 s or the interval)."""
    if path is None:
        return "no port is served (--web.listen-address is empty) and no --textfile.path is given"
    limit = max(60.0, 3 * poll_interval)
    try:
        age = time.time() - os.stat(path).st_mtime
    except OSError as error:
        return f"{path}: {os_problem(error)}"
    return f"{path}: not written for {age:.0f} s (more than {limit:.0f} s)" if age > limit else None


def _refused_in_tls(error: httpx.HTTPError) -> bool:
    """Whether the server took the connection and then ended it in TLS (an alert, a reset, a hang-up)."""
    root = root_cause(error)
    return isinstance(root, ssl.SSLError | ConnectionResetError) or isinstance(error, httpx.RemoteProtocolError)


def _words(error: httpx.HTTPError) -> str:
    root = root_cause(error)
    return f"{type(root).__name__}: {root}" if root is not error else f"{type(error).__name__}: {error}"


def _web_config(path: Path | None) -> tuple[str | None, bool]:
    """(the TLS client auth type, or None without TLS; whether basic auth is on)."""
    if path is None:
        return None, False
    from se_exporter.web.config import load_web_config

    config = load_web_config(path)
    return (config.tls.client_auth_type if config.tls else None), bool(config.basic_auth_users)


def _own_cmdline() -> list[str]:
    try:
        raw = Path("/proc/1/cmdline").read_bytes()
    except OSError:  # not Linux, or no /proc: only the environment tells
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def main() -> int:
    from se_exporter.errors import ConfigError

    try:
        problem = probe(target(exporter_argv(_own_cmdline()), os.environ))
    except ConfigError as error:
        problem = str(error)
    if problem:
        sys.stderr.write(f"unhealthy: {problem}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
