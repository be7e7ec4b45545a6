"""The systemd unit: systemd-analyze verify / security when available, plus static hardening checks."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from se_exporter.app import STOP_SECONDS
from tests.deploy.support import SYSTEMD_DIR
from tests.support.packaging import Distributions, install_into_clean_venv
from tests.support.readme import DOCS, marked
from tests.support.tools import require, unavailable

pytestmark = pytest.mark.debian

UNIT = SYSTEMD_DIR / "se-exporter.service"
ENV_FILE = SYSTEMD_DIR / "se-exporter.env"
BINARY = "/opt/se-exporter/bin/se-exporter"  # where docs/deploy.md installs it


def _directives(path: Path) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values (a key may repeat); continuation lines joined."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"directive outside a section: {line}"
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def _systemd_analyze() -> str:
    tool = require("systemd-analyze")
    probe = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        unavailable(f"systemd-analyze does not run here: {probe.stderr.strip()[:200]}")
    return tool


def _unit_with_stub_binary(tmp_path: Path) -> Path:
    """A copy of the unit whose ExecStart binary exists (verify checks it is executable)."""
    stub = tmp_path / "se-exporter"
    stub.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    stub.chmod(0o755)
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text(encoding="utf-8").replace(BINARY, str(stub)), encoding="utf-8")
    return unit


def test_the_documented_install_puts_the_binary_where_the_unit_runs_it(tmp_path: Path, built: Distributions) -> None:
    install = marked(DOCS / "deploy.md", "systemd-install").splitlines()
    (venv,) = [line.split()[-1] for line in install if line.startswith("python3 -m venv ")]
    assert f"{venv}/bin/pip install ." in "\n".join(install)
    assert shlex.split(_directives(UNIT)["Service"]["ExecStart"][0])[0] == f"{venv}/bin/se-exporter" == BINARY
    assert "systemd-analyze verify /etc/systemd/system/se-exporter.service" in install
    # The documented install, rebased under tmp_path: the console script lands where ExecStart expects it.
    script = install_into_clean_venv(built.wheel, tmp_path / venv.lstrip("/"))
    assert script == tmp_path / BINARY.lstrip("/")
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0 and result.stdout.startswith("se-exporter "), result.stderr
    _verify(UNIT.read_text(encoding="utf-8").replace(BINARY, str(script)), tmp_path)


def _verify(unit_text: str, directory: Path) -> None:
    tool = _systemd_analyze()
    unit = directory / UNIT.name
    unit.write_text(unit_text, encoding="utf-8")
    result = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False)
    output = result.stdout + result.stderr
    if result.returncode != 0 and ("System has not been booted" in output or "Failed to connect" in output):
        unavailable(f"systemd-analyze verify cannot run in this environment: {output.strip()[:200]}")
    # Unknown keys and unparsable values are only warnings (exit 0): treat any mention as a failure.
    complaints = [line for line in output.splitlines() if unit.name in line or str(unit) in line]
    assert result.returncode == 0 and not complaints, output


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    _verify(_unit_with_stub_binary(tmp_path).read_text(encoding="utf-8"), tmp_path)


def test_systemd_analyze_security(tmp_path: Path) -> None:
    tool = _systemd_analyze()
    unit = _unit_with_stub_binary(tmp_path)
    result = subprocess.run(
        [tool, "security", "--offline=yes", "--threshold=20", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    output = result.stdout + result.stderr
    if "--offline" in output and "unrecognized" in output:
        unavailable("this systemd-analyze has no offline security analysis (systemd < 250; Debian 12 has 252)")
    match = re.search(r"Overall exposure level for \S+: (\d+(?:\.\d+)?)", output)
    assert match, output
    assert float(match.group(1)) <= 2.0, f"exposure {match.group(1)} > 2.0 (was 1.3):\n{output}"


def test_hardening_directives() -> None:
    service = _directives(UNIT)["Service"]

    def value(key: str) -> str:
        assert key in service, f"{key}= missing"
        return service[key][-1]

    expected = {
        "DynamicUser": "yes",
        "StateDirectory": "se-exporter",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "Restart": "on-failure",
        "EnvironmentFile": "-/etc/default/se-exporter",
    }
    for key, wanted in expected.items():
        assert value(key) == wanted, f"{key}={value(key)!r}, expected {wanted!r}"
    assert set(value("RestrictAddressFamilies").split()) == {"AF_INET", "AF_INET6", "AF_UNIX"}
    assert "@system-service" in service["SystemCallFilter"][0].split()
    assert re.fullmatch(r"\d+[KMG]?", value("MemoryMax")), "MemoryMax must be an absolute limit"

    exec_start = shlex.split(value("ExecStart"))
    assert exec_start[0] == BINARY
    assert "--state.file=${STATE_DIRECTORY}/state.db" in exec_start
    extra = [word for word in exec_start[1:] if word.startswith("$") and not word.startswith("${")]
    assert extra, "ExecStart must append a variable (from the environment file) for extra flags"
    env_text = ENV_FILE.read_text(encoding="utf-8")
    for word in extra:
        assert re.search(rf"^#?{word[1:]}=", env_text, re.M), f"{ENV_FILE.name} must show {word[1:]}="


def _flag_twins() -> set[str]:
    """SE_EXPORTER_<FLAG> suffixes of the exporter's flags (from the parser, else docs/design.md's table)."""
    try:
        from se_exporter.config.flags import Parser
        from se_exporter.config.options import add_exporter_flags
    except ImportError:
        return {
            "WEB_LISTEN_ADDRESS",
            "WEB_TELEMETRY_PATH",
            "IMDS_URL",
            "IMDS_API_VERSION",
            "POLL_INTERVAL",
            "VM_NAME",
            "STATE_FILE",
            "APPROVAL_CONFIG",
            "LOG_LEVEL",
            "LOG_FORMAT",
        }
    parser = Parser()
    add_exporter_flags(parser)
    return {flag.env.removeprefix("SE_EXPORTER_") for flag in parser.flags}


def test_env_file_syntax() -> None:
    """EnvironmentFile= format: KEY=VALUE lines, comments; every SE_EXPORTER_* key is a real flag twin."""
    known = _flag_twins()
    for number, line in enumerate(ENV_FILE.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        body = line.lstrip("#").strip() if re.match(r"^#\s*[A-Z_]+=", line) else line
        if body.startswith("#"):
            continue
        assert re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", body), f"line {number}: {line!r}"
        key = body.partition("=")[0]
        if key.startswith("SE_EXPORTER_"):
            assert key.removeprefix("SE_EXPORTER_") in known, f"line {number}: {key} is no flag twin"
        assert key != "SE_EXPORTER_STATE_FILE", "the unit sets --state.file (flags win over the variable)"


def test_the_textfile_drop_in_verifies_with_the_unit(tmp_path: Path) -> None:
    """systemd reads a drop-in as more lines of the unit: the unit followed by it must verify, and it must
    set what docs/deploy.md says (a directory node_exporter can read, kept at stop, and no port)."""
    drop_in = (SYSTEMD_DIR / "textfile.conf").read_text(encoding="utf-8")
    _verify(_unit_with_stub_binary(tmp_path).read_text(encoding="utf-8") + "\n" + drop_in, tmp_path)
    service = _directives(SYSTEMD_DIR / "textfile.conf")["Service"]
    assert service["RuntimeDirectory"] == ["se-exporter"] and service["RuntimeDirectoryPreserve"] == ["yes"]
    assert service["RuntimeDirectoryMode"] == ["0755"] and service["UMask"] == ["0022"]
    assert service["Environment"] == [
        "SE_EXPORTER_TEXTFILE_PATH=/run/se-exporter/se-exporter.prom",
        "SE_EXPORTER_WEB_LISTEN_ADDRESS=",
    ]
    link = "ln -s /run/se-exporter/se-exporter.prom /var/lib/prometheus/node-exporter/se-exporter.prom"
    assert link in (DOCS / "deploy.md").read_text(encoding="utf-8") and link in drop_in


def test_systemd_waits_for_the_whole_stop() -> None:
    (timeout,) = _directives(UNIT)["Service"]["TimeoutStopSec"]
    assert timeout.endswith("s") and int(timeout[:-1]) >= STOP_SECONDS + 5, "the whole stop, and the interpreter's exit"
