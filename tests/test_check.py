"""``se-exporter check``: the files an operator writes, validated as the exporter would read them (the same
code), without binding a port or calling IMDS: ``ok`` and 0, or every problem of every file and 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.approval.helpers import TESTDATA as POLICIES
from tests.web.conftest import HASH
from tests.web.conftest import TESTDATA as WEB_CONFIGS
from tests.web.pki import make_pki

GOOD_POLICY = "rules:\n  - name: user-initiated\n    event_sources: [User]\n"


def check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    return subprocess.run(
        [sys.executable, "-m", "se_exporter", "check", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**environ, **(env or {})},
        check=False,
    )


def test_valid_files_are_ok(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(GOOD_POLICY)
    (tmp_path / "web.yml").write_text(f'basic_auth_users:\n  prometheus: "{HASH}"\n')
    result = check(f"--approval.config={tmp_path / 'policy.yaml'}", f"--web.config.file={tmp_path / 'web.yml'}")
    assert (result.returncode, result.stdout, result.stderr) == (0, "ok\n", "")


@pytest.mark.parametrize("invalid", sorted((POLICIES / "invalid").glob("*.yaml")), ids=lambda path: path.stem)
def test_every_invalid_policy_is_refused_with_the_exporters_own_message(invalid: Path) -> None:
    expected = invalid.read_text(encoding="utf-8").splitlines()[0].removeprefix("# expect: ")
    result = check(f"--approval.config={invalid}")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"se-exporter: error: approval config {invalid}: ")
    assert expected in result.stderr


def test_every_problem_of_every_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text("rules:\n  - name: r\n    max_duration_seconds: 1:30\n")
    (tmp_path / "web.yml").write_text("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n")
    result = check(f"--approval.config={tmp_path / 'policy.yaml'}", f"--web.config.file={tmp_path / 'web.yml'}")
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("se-exporter: error: ") for line in lines)
    assert lines[0].startswith(f"se-exporter: error: web config {tmp_path / 'web.yml'}: tls_server_config.cert_file")
    assert lines[1] == (
        f"se-exporter: error: approval config {tmp_path / 'policy.yaml'}: "
        'rules[0].max_duration_seconds: must be an integer >= 0, got "1:30"'
    )


def test_a_hook_that_is_not_executable_is_refused_as_at_start(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(GOOD_POLICY + "hook:\n  command: [/no/such/drain]\n")
    result = check(f"--approval.config={tmp_path / 'policy.yaml'}")
    assert result.returncode == 2 and 'hook.command[0]: "/no/such/drain" is not an executable file' in result.stderr


@pytest.mark.parametrize("good", sorted((WEB_CONFIGS / "good").glob("*.yml")), ids=lambda path: path.stem)
def test_the_shipped_good_web_configs_are_ok_and_read_from_the_environment_twin(good: Path, tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    make_pki(tmp_path / "conf")  # the certificates they name by relative paths, next to them
    shutil.copy(good, tmp_path / "conf" / good.name)
    (tmp_path / "policy.yaml").write_text(GOOD_POLICY)
    result = check(
        env={
            "SE_EXPORTER_APPROVAL_CONFIG": str(tmp_path / "policy.yaml"),
            "SE_EXPORTER_WEB_CONFIG_FILE": str(tmp_path / "conf" / good.name),
        }
    )
    assert (result.returncode, result.stdout) == (0, "ok\n")
    assert "error" not in result.stderr  # the exporter's own notes (an option accepted and ignored) may show


def test_nothing_to_check_says_what_to_give() -> None:
    result = check()
    assert result.returncode == 2
    assert result.stderr == (
        "se-exporter: error: nothing to check: give --approval.config, --actions.config, --web.config.file "
        "(or their SE_EXPORTER_* variables)\n"
    )


def test_the_actions_file_is_checked_like_the_others(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parent / "testdata" / "actions" / "notify.yaml"
    assert check(f"--actions.config={shipped}").stdout == "ok\n"
    bad = tmp_path / "actions.yaml"
    bad.write_text("actions:\n  - name: notify\n    transitions: [rebooted]\n    command: [/bin/true]\n")
    result = check(f"--actions.config={bad}")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(
        f"se-exporter: error: actions config {bad}: actions[0].transitions[0]: must be one of"
    )


NUL_IN_COMMANDS = [
    (
        "--approval.config",
        'rules:\n  - name: r\n    event_types: [Reboot]\nhook:\n  command: ["/bin/tr\\0ue"]\n',
        "hook.command[0]",
    ),
    (
        "--actions.config",
        'actions:\n  - name: a\n    transitions: [started]\n    command: ["true", "a\\0"]\n',
        "actions[0].command[1]",
    ),
]


@pytest.mark.parametrize(("flag", "text", "key"), NUL_IN_COMMANDS, ids=["hook", "action"])
@pytest.mark.parametrize("command", ["check", "run"])
def test_a_nul_in_a_command_is_a_config_error_naming_the_key(
    flag: str, text: str, key: str, command: str, tmp_path: Path
) -> None:
    """Not a ValueError traceback from shutil.which (issue 28): one line, from check and at start-up alike."""
    path = tmp_path / "file.yaml"
    path.write_text(text)
    args = [command, f"{flag}={path}"] + (["--imds.url=http://127.0.0.1:9"] if command == "run" else [])
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    result = subprocess.run(
        [sys.executable, "-m", "se_exporter", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=environ,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert f": {key}: " in line and "holds a NUL character, which no command can take" in line
