"""Helpers shared by the deployment-artifact tests (Dockerfile, compose, Kubernetes, systemd)."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_DIR = DEPLOY / "compose"
K8S_DIR = DEPLOY / "kubernetes"
SYSTEMD_DIR = DEPLOY / "systemd"
RULES_FILE = REPO / "alerts" / "se-exporter.rules.yml"
DASHBOARDS_DIR = REPO / "dashboards"

# Paths written by other engineers: while one is absent, checks that need it skip.
EXPORTER_PORT = 10160  # docs/design.md: --web.listen-address default :10160


def project_version() -> str:
    """The version, as pyproject.toml reads it (``[tool.setuptools.dynamic]``): se_exporter.__version__."""
    import se_exporter

    return se_exporter.__version__


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_yaml_all(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def split_host_port(address: str, default_port: int | None = None) -> tuple[str, int]:
    """``host:port``, ``:port``, ``[v6]:port`` or a URL (``http://host:port/path``) as (host, port)."""
    if "://" in address:
        scheme, _, rest = address.partition("://")
        address = rest.split("/", 1)[0]
        default_port = {"http": 80, "https": 443}.get(scheme, default_port)
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif address.count(":") == 1:
        host, _, port = address.partition(":")
    else:
        host, port = address, ""
    if not port.isdigit():
        if default_port is None:
            raise ValueError(f"no port in {address!r}")
        return host, default_port
    return host, int(port)


_INTERPOLATION = re.compile(r"\$\{(?P<name>\w+)(?::?[-?](?P<default>[^}]*))?\}|\$(?P<bare>\w+)")


def interpolate(value: Any) -> Any:
    """Compose-style ``${VAR:-default}`` interpolation, using the defaults (not the caller's env)."""
    if isinstance(value, str):
        return _INTERPOLATION.sub(lambda m: m.group("default") or "", value.replace("$$", "\0")).replace("\0", "$")
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------------------------
# Dockerfile


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        text = self.args.strip()
        if text.startswith("["):
            value = json.loads(text)
            assert isinstance(value, list)
            return [str(v) for v in value]
        return None


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile: continuation lines joined, comments dropped."""
    logical: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        logical.append((start, buffer + stripped))
        buffer = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for number, text in logical:
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            base = words[-3] if len(words) >= 3 and words[-2].upper() == "AS" else words[-1]
            name = words[-1] if len(words) >= 3 and words[-2].upper() == "AS" else None
            base = re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)), base)
            stages.append(Stage(base=base, name=name))
        elif not stages and keyword == "ARG":
            key, _, value = args.strip().partition("=")
            global_args[key] = value.strip('"')
        else:
            stages[-1].instructions.append(Instruction(keyword, args.strip(), number))
    return global_args, stages


def key_values(instructions: list[Instruction]) -> dict[str, str]:
    """ENV / LABEL / ARG ``key=value`` pairs (shell-style quoting) of some instructions."""
    pairs: dict[str, str] = {}
    for instruction in instructions:
        for word in shlex.split(instruction.args):
            key, sep, value = word.partition("=")
            pairs[key] = value if sep else ""
    return pairs


def healthcheck_command(stage: Stage) -> tuple[dict[str, str], list[str]]:
    """(options, exec-form command) of the stage's HEALTHCHECK."""
    (instruction,) = stage.all("HEALTHCHECK")
    options: dict[str, str] = {}
    rest = instruction.args
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        key, _, value = option[2:].partition("=")
        options[key] = value
        rest = rest.lstrip()
    assert rest.startswith("CMD "), f"HEALTHCHECK must use CMD, got {rest!r}"
    command = Instruction("CMD", rest[4:], instruction.line).exec_form()
    assert command is not None, "HEALTHCHECK CMD must be in exec form (JSON array): no shell in the loop"
    return options, command
