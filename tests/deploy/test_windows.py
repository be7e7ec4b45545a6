"""The Windows service: WinSW's configuration, and the docs' commands that install, check and remove it
name exactly the paths, names and port the configuration uses."""

from __future__ import annotations

import ntpath
import re
import xml.etree.ElementTree as ET

import pytest
import yaml

from se_exporter.app import STOP_SECONDS
from se_exporter.approval.policy import parse_policy
from tests.deploy.support import EXPORTER_PORT, REPO
from tests.support.readme import DOCS, code_blocks

pytestmark = pytest.mark.pure

XML = REPO / "deploy" / "windows" / "se-exporter-service.xml"
DOC = DOCS / "windows.md"
SERVICE = ET.parse(XML).getroot()


def block(marker: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    inner = text[text.index(f"<!-- {marker} -->") : text.index(f"<!-- /{marker} -->")]
    (commands,) = code_blocks(inner, "powershell")
    return commands.strip().splitlines()


def expand(path: str) -> str:
    """A path as written in PowerShell ($env:X) or in WinSW's XML (%X%), in one spelling."""
    return re.sub(r"\$env:(\w+)", r"%\1%", path.strip('"')).lower()


def child(name: str) -> str:
    element = SERVICE.find(name)
    assert element is not None and element.text, f"<{name}> missing"
    return element.text.strip()


WRAPPER = next(expand(line.split()[-1]) for line in block("windows-install") if line.startswith("Invoke-WebRequest"))
WRAPPER_DIR, WRAPPER_EXE = ntpath.split(WRAPPER)


def test_the_configuration_is_a_winsw_service_that_stops_gracefully() -> None:
    assert SERVICE.tag == "service" and child("id") == "se-exporter"
    assert child("startmode") == "Automatic"
    assert child("serviceaccount/username") == r"NT AUTHORITY\LocalService"
    stop = re.fullmatch(r"(\d+)sec", child("stoptimeout"))
    assert stop and int(stop.group(1)) >= STOP_SECONDS + 5, "the whole stop, and the interpreter's exit"
    log = SERVICE.find("log")
    assert log is not None and log.get("mode") == "roll-by-size"
    assert not [e for e in SERVICE.iter("env") if e.get("name") == "SE_EXPORTER_STATE_FILE"], (
        "the service's default state file comes from the platform module, not from the XML"
    )


def test_install_puts_the_program_where_the_service_runs_it() -> None:
    install = block("windows-install")
    venv = expand(next(line for line in install if line.startswith("py -3.12 -m venv")).split(maxsplit=4)[-1])
    assert expand(child("executable")) == ntpath.join(venv, "scripts", "se-exporter.exe")
    pip = next(line for line in install if "pip.exe" in line).split()[1]
    assert expand(pip) == ntpath.join(venv, "scripts", "pip.exe")


def test_install_names_the_wrapper_after_its_configuration() -> None:
    install = block("windows-install")
    assert WRAPPER_EXE.removesuffix(".exe") == XML.stem, "WinSW reads the XML named like the executable"
    copy = next(line for line in install if line.startswith("Copy-Item"))
    assert copy.split()[1] == r"deploy\windows\se-exporter-service.xml"
    assert expand(copy.split()[2]) == WRAPPER_DIR + "\\"
    for verb in ("install", "start"):
        assert f'& "$env:ProgramFiles\\se-exporter\\service\\{WRAPPER_EXE}" {verb}'.lower() in [
            line.lower() for line in install
        ]


def test_the_data_directory_is_the_services_and_the_firewall_opens_its_port() -> None:
    install = block("windows-install")
    (grant,) = [line for line in install if line.startswith("icacls")]
    assert expand(grant.split('"')[1]) == "%programdata%\\se-exporter"
    assert child("serviceaccount/username") in grant
    (rule,) = [line for line in install if line.startswith("New-NetFirewallRule")]
    assert f"-LocalPort {EXPORTER_PORT}" in rule and "-Direction Inbound" in rule


def test_the_checks_read_the_log_the_configuration_writes() -> None:
    check = block("windows-check")
    assert "Get-Service se-exporter" in check
    (tail,) = [line for line in check if line.startswith("Get-Content")]
    log_file = expand(tail.split('"')[1])
    assert log_file == ntpath.join(expand(child("logpath")), XML.stem + ".err.log")
    assert f"http://localhost:{EXPORTER_PORT}/-/ready" in "\n".join(check)


def test_uninstall_undoes_the_install() -> None:
    uninstall = block("windows-uninstall")
    install = block("windows-install")
    (rule,) = [line for line in install if line.startswith("New-NetFirewallRule")]
    display = rule.split('"')[1]
    assert f'Remove-NetFirewallRule -DisplayName "{display}"' in uninstall
    assert [line.rsplit(" ", 1)[-1] for line in uninstall[:2]] == ["stop", "uninstall"]


def test_the_windows_hook_example_is_a_valid_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("se_exporter.approval.policy.shutil.which", lambda command: "/found")
    (policy,) = [b for b in code_blocks(DOC.read_text(encoding="utf-8"), "yaml") if "hook:" in b]
    parsed = parse_policy(yaml.safe_load(policy), "docs/windows.md")
    assert parsed.hook is not None and parsed.hook.command[0] == "powershell.exe"
    assert parsed.hook.command[-1].endswith("drain-me.ps1")


def test_the_platform_knows_the_account_the_service_runs_as() -> None:
    """`se-exporter check` names it when it refuses a per-user Python (se_exporter/platform/windows.py)."""
    from se_exporter.platform import WindowsPlatform

    assert WindowsPlatform.service_account == child("serviceaccount/username")
