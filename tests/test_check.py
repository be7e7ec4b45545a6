"""``se-exporter check``: the files an operator writes, validated as the exporter would read them (the same
code), without binding a port or calling IMDS: ``ok`` and 0, or every problem of every file and 2."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from se_exporter.cli import main
from tests.approval.helpers import TESTDATA as POLICIES
from tests.support.wait import wait_for
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


# Run by the Windows interpreter under Wine too, one of each kind (a value, YAML itself, a key, an empty file):
# the other messages are the same logic on every OS (``pure``; tests/approval/test_approval_policy.py has each
# in-process), and every case starts an interpreter, 5 to 15 s under Wine.
ON_EVERY_OS = frozenset({"duration_string", "not_yaml", "unknown_top_key", "empty"})
INVALID_POLICIES = [
    pytest.param(path, id=path.stem, marks=() if path.stem in ON_EVERY_OS else pytest.mark.pure)
    for path in sorted((POLICIES / "invalid").glob("*.yaml"))
]


@pytest.mark.parametrize("invalid", INVALID_POLICIES)
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


@pytest.mark.posix
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


@pytest.mark.skipif(sys.platform == "win32", reason="on Windows the service's interpreter is always checked")
def test_nothing_to_check_says_what_to_give() -> None:
    result = check()
    assert result.returncode == 2
    assert result.stderr == (
        "se-exporter: error: nothing to check: give --approval.config, --actions.config, --web.config.file "
        "(or their SE_EXPORTER_* variables)\n"
    )


@pytest.mark.skipif(sys.platform != "win32", reason="Windows only: docs/windows.md's install runs a bare check")
def test_on_windows_a_bare_check_checks_the_interpreter_the_service_runs() -> None:
    result = check()
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr  # the suite's Python: all users


@pytest.mark.posix
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


@pytest.mark.parametrize(
    ("flag", "text", "keys"),
    [
        (
            "--actions.config",
            (Path(__file__).parent / "testdata" / "actions" / "four-broken.yaml").read_text(encoding="utf-8"),
            [
                "concurrency",
                "actions[0].transitions[0]",
                "actions[1].command",
                "actions[2].timeout_seconds",
                "actions[3].name",
            ],
        ),
        (
            "--approval.config",
            "rules:\n  - name: a\n    event_types: [Rebot]\n  - name: b\n    max_duration_seconds: x\n"
            "hook:\n  command: []\nleader: nobody\n",
            ["rules[0].event_types[0]", "rules[1].max_duration_seconds", "hook.command", "leader"],
        ),
        (
            "--web.config.file",
            "tls_server_config:\n  cert_file: 5\nbasic_auth_users: []\nheaders: 3\n",
            ["tls_server_config.cert_file", "basic_auth_users", "headers"],
        ),
        (  # issue 53: every problem inside one section too, not the first one per file
            "--web.config.file",
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
            "  client_auth_type: RequireAndVerifyClientCert\n  cipher_suites: [TLS_INVENTED]\n"
            "  curve_preferences: [CurveP999]\n  min_version: TLS99\n  nonsense: 1\n"
            "http_server_config:\n  headers:\n    X-Frame-Options: maybe\n"
            "basic_auth_users:\n  alice: plaintext\nrate_limit:\n  interval: soon\n  burst: 1\n",
            [  # in the file's order
                "tls_server_config.cipher_suites[0]",
                "tls_server_config.curve_preferences[0]",
                "tls_server_config.min_version",
                "tls_server_config.nonsense",
                "http_server_config.headers.X-Frame-Options",
                "basic_auth_users.alice",
                "rate_limit.interval",
            ],
        ),
    ],
    ids=["actions", "policy", "web", "web-one-section"],
)
def test_every_independent_problem_of_a_file_is_its_own_line(
    flag: str, text: str, keys: list[str], tmp_path: Path
) -> None:
    """Issue 29, point 6: a file with four broken actions reported one. Every problem is said, in the file's order."""
    path = tmp_path / "file.yaml"
    path.write_text(text, encoding="utf-8")
    result = check(f"{flag}={path}")
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert [line.split(f"{path}: ", 1)[1].split(": ")[0] for line in lines] == keys, result.stderr


def _billion_laughs() -> str:
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{', '.join(['*' + previous] * 9)}]")
    return "\n".join(lines) + "\nrules:\n  - name: *i\n"


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda p: p.mkdir(), "cannot read the file: it is a directory, not a regular file"),
        pytest.param(
            lambda p: os.mkfifo(p),
            "cannot read the file: it is a named pipe, not a regular file",
            marks=pytest.mark.posix,  # os.mkfifo
        ),
        pytest.param(
            lambda p: p.symlink_to("/dev/zero"),
            "cannot read the file: it is a character device, not a regular file",
            marks=pytest.mark.posix,  # /dev/zero
        ),
        (lambda p: p.write_bytes(b"#" * (1 << 20) + b"\n"), "cannot read the file: it is larger than 1 MiB"),
        (lambda p: p.write_text(_billion_laughs()), "too large: more than 100000 values once its aliases are expanded"),
    ],
    ids=["directory", "fifo", "dev-zero", "over-1-MiB", "billion-laughs"],
)
def test_files_are_read_with_bounds(make: Callable[[Path], object], problem: str, tmp_path: Path) -> None:
    """Issue 29, point 4: /dev/zero read until memory ran out, a FIFO blocked for ever, 9^9 values hung."""
    path = tmp_path / "policy.yaml"
    make(path)
    result = check(f"--approval.config={path}")
    assert (result.returncode, result.stderr) == (2, f"se-exporter: error: approval config {path}: {problem}\n")


def _catches_sigterm(pid: int) -> bool | None:
    """Whether the process has a handler for SIGTERM (its SigCgt mask); None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    except OSError:
        return None
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask & (1 << (signal.SIGTERM - 1)))


@pytest.mark.posix
def test_sigterm_ends_check_at_once(tmp_path: Path) -> None:
    """Issue 29, point 4: check ignored SIGTERM and Ctrl-C (the exporter's stop request caught them)."""
    names = "".join(f"    - W{n:06d}\n" for n in range(50_000))  # a valid file of about a second's parsing
    big = tmp_path / "policy.yaml"
    big.write_text(
        f"rules:\n  - name: r\n    event_types: [Reboot]\nhook:\n  command: [/bin/true]\n  inherit_env:\n{names}",
        encoding="utf-8",
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "se_exporter", "check", f"--approval.config={big}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environ,
    )
    seen: list[bool | None] = []

    def handler_installed_then_restored() -> bool:
        seen.append(_catches_sigterm(proc.pid))
        return True in seen and seen[-1] is False

    try:
        wait_for(handler_installed_then_restored, 10, "check restoring SIGTERM's default", interval=0.002)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=5)
        assert (proc.returncode, out) == (-signal.SIGTERM, b""), "check went on after SIGTERM (it said ok)"
    finally:
        proc.kill()
        proc.communicate()


def test_client_certificates_on_the_system_trust_store_are_ok_with_a_warning_that_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    make_pki(tmp_path / "conf")
    web = tmp_path / "conf" / "web.yml"
    shutil.copy(Path(__file__).parent / "testdata" / "web" / "good" / "client_auth_system_trust.yml", web)
    result = check(f"--web.config.file={web}")
    assert (result.returncode, result.stdout) == (0, "ok\n")
    assert "verified against the system's trust store, so any publicly trusted certificate passes" in result.stderr
    assert "set client_ca_file (your own CA) and client_allowed_sans" in result.stderr


CHECKED = Path(__file__).parent / "testdata" / "check"
FLAG = {"approval": "--approval.config", "actions": "--actions.config", "web": "--web.config.file"}
KIND = {"approval": "approval config", "actions": "actions config", "web": "web config"}


@pytest.mark.parametrize("bad", sorted(CHECKED.glob("*.yaml")), ids=lambda path: path.stem)
def test_check_reports_every_problem_of_a_file_in_one_run(bad: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A dozen files, each with two or more problems (unknown keys, bad values, duplicate names, cross-field
    rules): every one is said, one line each, key path first, in one run; the file's ``# problem:`` lines."""
    expected = [line.removeprefix("# problem: ") for line in bad.read_text().splitlines() if line.startswith("#")]
    assert len(expected) >= 2
    kind = bad.stem.split("-", 1)[0]
    assert main(["check", f"{FLAG[kind]}={bad}"], environ={}) == 2
    lead = f"se-exporter: error: {KIND[kind]} {bad}: "
    lines = capsys.readouterr().err.splitlines()
    assert all(line.startswith(lead) for line in lines), lines
    assert sorted(line.removeprefix(lead) for line in lines) == sorted(expected)
