"""Command line: every bad flag or environment value is one clear line and exit code 2."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from se_exporter import __version__
from se_exporter.cli import build_parser, main, subparser
from se_exporter.config.flags import apply_environment, duration, env_name
from se_exporter.config.options import ExporterConfig, config_from_args


def parse(argv: list[str], environ: dict[str, str] | None = None) -> ExporterConfig:
    parser = build_parser()
    args = parser.parse_args(["run", *argv])
    apply_environment(subparser(parser, "run"), args, argv, environ or {})
    return config_from_args(args)


BAD = [
    (["--poll.interval=soon"], "argument --poll.interval: invalid duration 'soon'"),
    (["--poll.interval=100ms"], "argument --poll.interval: poll interval '100ms' is below 250ms"),
    (["--web.listen-address=10160"], "argument --web.listen-address: invalid listen address '10160'"),
    (["--web.listen-address=::1:80"], "write IPv6 hosts in brackets"),
    (["--web.listen-address=:99999"], "invalid listen address ':99999'"),
    (["--web.telemetry-path=metrics"], "argument --web.telemetry-path: 'metrics' must start with /"),
    (["--imds.url=169.254.169.254"], "argument --imds.url: invalid URL '169.254.169.254'"),
    (["--imds.api-version=latest"], "argument --imds.api-version: invalid api-version 'latest'"),
    (["--imds.api-version=2018-08-01"], "argument --imds.api-version: api-version 2018-08-01 is older than 2019-01-01"),
    (["--imds.api-version=2024-07-09,bogus"], "--imds.api-version: invalid api-version 'bogus' in '2024-07-09,bogus'"),
    (["--imds.api-version=2024-07-09,"], "--imds.api-version: an empty api-version in '2024-07-09,'"),
    (["--imds.api-version=2024-07-09,2024-07-09"], "--imds.api-version: api-version 2024-07-09 is listed twice"),
    (["--imds.api-version=2020-07-01,2024-07-09"], "must list the newest api-version first: 2024-07-09 comes after"),
    (
        ["--imds.api-version=2024-07-09,2019-08-01"],
        "api-version 2019-08-01 cannot follow 2024-07-09: it has no DurationInSeconds, so a switch",
    ),
    (["--imds.api-version=2024-07-09,2017-08-01"], "api-version 2017-08-01 is older than 2019-01-01"),
    (["--imds.timeout=0s"], "argument --imds.timeout: duration '0s' must be greater than zero"),
    (["--traffic.impacts=reboot,bogus"], "argument --traffic.impacts: 'bogus' is not an impact (use live_migration"),
    (["--traffic.impacts=rebot,bogus,rebot"], "argument --traffic.impacts: 'rebot', 'bogus' are not impacts (use "),
    (["--traffic.impacts=,"], "argument --traffic.impacts: ',' names no impact"),
    (["--poll.interval=99999999999h"], "argument --poll.interval: duration '99999999999h' is too long (at most 168h)"),
    (["--imds.timeout=1e400"], "argument --imds.timeout: invalid duration '1e400'"),
    (["--log.level=loud"], "argument --log.level: invalid choice: 'loud'"),
    (["--log.format=xml"], "argument --log.format: invalid choice: 'xml'"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["demo", "--demo.speed=0"], "argument --demo.speed: invalid speed '0': must be a number > 0"),
    (["demo", "--demo.speed=nan"], "argument --demo.speed: invalid speed 'nan': must be a number > 0"),
    (["simulate", "--speed=-1"], "argument --speed: invalid speed '-1': must be a number > 0"),
]


@pytest.mark.parametrize(("argv", "message"), BAD)
def test_bad_flags_exit_2_with_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv, environ={})
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1, err


ENV_BAD = [
    ({"SE_EXPORTER_POLL_INTERVAL": "abc"}, "environment variable SE_EXPORTER_POLL_INTERVAL='abc': invalid duration"),
    ({"SE_EXPORTER_LOG_LEVEL": "loud"}, "environment variable SE_EXPORTER_LOG_LEVEL='loud': must be one of"),
    ({"SE_EXPORTER_WEB_LISTEN_ADDRESS": "x"}, "SE_EXPORTER_WEB_LISTEN_ADDRESS='x': invalid listen address"),
]


@pytest.mark.parametrize(("environ", "message"), ENV_BAD)
def test_bad_environment_values_name_the_variable(
    environ: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main([], environ=environ)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


def test_defaults_match_the_design() -> None:
    config = parse([])
    assert (config.listen_host, config.listen_port, config.telemetry_path) == ("", 10160, "/metrics")
    assert (config.imds_url, config.api_versions, config.poll_interval) == (
        "http://169.254.169.254",
        ("2020-07-01",),
        1.0,
    )
    assert (config.vm_name, config.state_file, config.approval_config) == (None, None, None)
    assert (config.log_level, config.log_format) == ("info", "logfmt")


def test_environment_twins_and_flags_win() -> None:
    environ = {
        "SE_EXPORTER_POLL_INTERVAL": "2m",
        "SE_EXPORTER_VM_NAME": "vm-env",
        "SE_EXPORTER_WEB_LISTEN_ADDRESS": "[::1]:9999",
        "SE_EXPORTER_STATE_FILE": "/tmp/s.json",
        "SE_EXPORTER_IMDS_API_VERSION": "2019-08-01",
        "SE_EXPORTER_LOG_FORMAT": "json",
    }
    config = parse([], environ)
    assert (config.poll_interval, config.vm_name) == (120, "vm-env")
    assert (config.listen_host, config.listen_port) == ("::1", 9999)
    assert (config.state_file, config.api_versions, config.log_format) == (Path("/tmp/s.json"), ("2019-08-01",), "json")
    config = parse(["--imds.api-version= 2024-07-09 , 2020-07-01"])
    assert config.api_versions == ("2024-07-09", "2020-07-01")
    flagged = parse(["--poll.interval=250ms", "--vm.name", "vm-flag"], environ)
    assert (flagged.poll_interval, flagged.vm_name) == (0.25, "vm-flag")


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("1s", 1), ("2m", 120), ("1h", 3600), ("1.5", 1.5), ("30", 30)]
)
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


def test_env_name_rule() -> None:
    assert env_name("--web.listen-address") == "SE_EXPORTER_WEB_LISTEN_ADDRESS"
    assert env_name("--imds.api-version") == "SE_EXPORTER_IMDS_API_VERSION"


def test_module_entry_point_and_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "se_exporter", "--version"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0
    assert result.stdout.strip() == f"se-exporter {__version__}"


def test_listen_failure_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main([f"--web.listen-address=127.0.0.1:{port}", "--imds.url=http://127.0.0.1:9"], environ={})
    assert code == 2
    assert "--web.listen-address: cannot listen on" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("http://10.0.0.4", True),
        ("http://imds.example.com", True),
        ("http://169.254.169.254", False),
        ("http://127.0.0.1:8080", False),
        ("http://localhost:8080", False),
        ("http://[::1]:8080", False),
        ("http://[fe80::1]", False),
    ],
)
def test_an_imds_url_that_is_neither_link_local_nor_loopback_is_warned_about(
    url: str, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as busy:  # the exporter stops at the listen step: no request is ever sent
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code = main([f"--web.listen-address=127.0.0.1:{busy.getsockname()[1]}", f"--imds.url={url}"], environ={})
    assert code == 2
    assert ("is neither link-local nor loopback" in capsys.readouterr().err) is warned


def se_exporter(*args: str, timeout: float = 30, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SE_EXPORTER_", "OTEL_"))} | variables
    return subprocess.run(
        [sys.executable, "-m", "se_exporter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--poll.interval=soon"],
        ["--poll.interval=soon"],
        ["demo", "--demo.speed=0"],
        ["simulate", "--speed=0"],
        ["simulate", "--scenario=no-such-scenario"],
        ["run", "--approval.config=/nonexistent/policy.yaml"],
    ],
)
def test_one_error_prefix_for_every_command(args: list[str]) -> None:
    result = se_exporter(*args)
    assert result.returncode == 2
    assert result.stderr.startswith("se-exporter: error: ") and result.stderr.count("\n") == 1, result.stderr


@pytest.mark.posix
def test_an_unwritable_state_file_is_one_line(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    result = se_exporter(
        f"--state.file={not_a_directory}/state.db",
        "--imds.url=http://127.0.0.1:9",
        "--web.listen-address=127.0.0.1:0",
    )
    assert result.returncode == 2
    assert (
        result.stderr == f"se-exporter: error: --state.file: cannot write {not_a_directory}/state.db: Not a directory\n"
    )


@pytest.mark.parametrize("command", ["demo", "simulate"])
def test_a_busy_port_is_one_line_and_exit_2_for_every_command(command: str) -> None:
    """Running the demo twice ended in a traceback (exit 1); simulate exited 1."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = se_exporter(command, f"--web.listen-address=127.0.0.1:{port}")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"se-exporter: error: --web.listen-address: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert "Traceback" not in result.stderr


def test_help_is_the_exporters_and_names_every_other_command() -> None:
    result = se_exporter("--help")
    assert result.returncode == 0 and result.stdout == se_exporter("run", "--help").stdout
    assert result.stdout.startswith("usage: se-exporter [run] ")
    for flag in ("--web.listen-address", "--poll.interval", "--state.file", "--approval.config", "--log.format"):
        assert flag in result.stdout
    # Issue 40: --help did not list --version, which worked.
    assert "\n  --version             show program's version number and exit\n" in result.stdout
    assert se_exporter("run", "--version").stdout == se_exporter("--version").stdout
    for command in ("simulate", "demo", "check"):
        assert f"\n  {command} " in result.stdout.split("other commands:")[1]


def test_demo_does_not_offer_a_flag_it_would_ignore() -> None:
    assert "--imds.url" not in se_exporter("demo", "--help").stdout
    result = se_exporter("demo", "--imds.url=http://127.0.0.1:9")
    assert result.returncode == 2 and "unrecognized arguments: --imds.url" in result.stderr
    assert "--imds.url" in se_exporter("run", "--help").stdout


@pytest.mark.posix
def test_simulate_without_a_scenario_says_how_to_pick_one() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "se_exporter", "simulate", "--web.listen-address=127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        hint = proc.stderr.readline()
        assert proc.stdout.readline().startswith("listening on http://127.0.0.1:")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert "no --scenario given, so the event list stays empty" in hint
    assert "--scenario NAME (cancelled-maintenance," in hint and "--scenario all" in hint


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"]])
def test_version_and_help_import_neither_the_simulator_nor_otel_nor_approval(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "se_exporter", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0
    imported = {line.rpartition("|")[2].strip() for line in result.stderr.splitlines() if "|" in line}
    heavy = sorted(
        m
        for m in imported
        if m.startswith(("se_exporter.simulator", "se_exporter.approval", "opentelemetry", "se_exporter.app", "httpx"))
    )
    assert not heavy, heavy


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "--approval.config=bad.yaml", "--approval.config=good.yaml"], "--approval.config"),
        (["run", "--vm.name=a", "--poll.interval=1s", "--vm.name", "b"], "--vm.name"),
        (["demo", "--web.listen-address=:1", "--web.listen-address=:2"], "--web.listen-address"),
    ],
)
def test_a_single_value_flag_given_twice_is_refused(args: list[str], message: str) -> None:
    """Issue 29, point 8: the last value won silently (check said ok for a bad file given first)."""
    result = se_exporter(*args)
    assert result.returncode == 2
    assert result.stderr == f"se-exporter: error: flag {message} cannot be repeated (see --help)\n"


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_the_otlp_endpoints_credentials_are_never_shown(protocol: str) -> None:
    """Issue 29, point 9: the userinfo of a mistyped endpoint was printed in the start-up error."""
    endpoint = "htp://otel:SECRET@collector.example:4318" if protocol == "http/protobuf" else "otel:SECRET@:4317"
    result = se_exporter(
        "run",
        "--imds.url=http://127.0.0.1:9",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "SECRET" not in result.stderr and "***@" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("args", "variables", "error"),
    [
        (
            ["--textfile.path=/var/lib/se.txt"],
            {},
            "argument --textfile.path: '/var/lib/se.txt' must end in .prom: node_exporter's textfile collector "
            "reads no other file (see --help)",
        ),
        (
            [],
            {"SE_EXPORTER_TEXTFILE_PATH": "se.txt"},
            "environment variable SE_EXPORTER_TEXTFILE_PATH='se.txt': 'se.txt' must end in .prom: node_exporter's "
            "textfile collector reads no other file (see --help)",
        ),
        (
            ["--web.listen-address="],
            {},
            "--web.listen-address is empty and no --textfile.path is given: nothing would expose the metrics",
        ),
        (
            ["--web.listen-address=", "--textfile.path={missing}"],
            {},
            "--textfile.path: cannot write {missing}: No such file or directory",
        ),
    ],
    ids=["not-prom", "variable", "no-output", "missing-directory"],
)
def test_textfile_mistakes_are_one_line(args: list[str], variables: dict[str, str], error: str, tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "se-exporter.prom"  # as the exporter prints a path (Windows: backslashes)
    given = [arg.format(missing=missing) for arg in args]
    result = se_exporter("run", "--imds.url=http://127.0.0.1:9", *given, **cast(dict[str, Any], variables))
    assert (result.returncode, result.stderr) == (2, f"se-exporter: error: {error.format(missing=missing)}\n")


@pytest.mark.parametrize("argv", [["--web.config.file="], []], ids=["empty", "absent"])
def test_an_empty_web_config_file_means_none_as_node_exporter_reads_it(argv: list[str]) -> None:
    assert parse(argv).web_config_file is None
    assert parse([], {"SE_EXPORTER_WEB_CONFIG_FILE": ""}).web_config_file is None


def test_every_commands_flags_are_in_our_table_with_their_kind_and_twin() -> None:
    """Issue 57, point 3: the flags, their SE_EXPORTER_* twins and their kinds come from our own table
    (argparse only parses); --help lists exactly the flags in it."""
    parser = build_parser()
    kinds = {flag.option: flag.kind for sub in parser.commands.values() for flag in sub.flags}
    assert kinds["--web.listen-address"] == "value" and kinds["--loop"] == "switch"
    assert kinds["--scenario"] == "list"
    for name, sub in parser.commands.items():
        listed = set(re.findall(r"\[(--[\w.-]+)", sub.format_usage())) - {"--help", "--version"}
        table = {flag.option for flag in sub.flags}
        assert listed == table, name
        twins = [flag.env for flag in sub.flags]
        assert len(twins) == len(set(twins)) and all(t.startswith("SE_EXPORTER_") for t in twins), name


def test_the_demos_help_says_what_the_demo_does(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo loads its own policy when none is given, and its gap is a duration like every other."""
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--help"], environ={})
    assert caught.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "approval is off without it" not in shown
    assert "approval policy (YAML); default in the demo: its demo policy, which approves live migrations" in shown
    assert "--demo.gap DURATION simulated time between scenarios: 250ms, 1s, 2m or seconds (default 1m)" in shown
    with pytest.raises(SystemExit):
        main(["run", "--help"], environ={})
    assert "approval policy (YAML); approval is off without it" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(("given", "seconds"), [("1m", 60.0), ("90s", 90.0), ("2", 2.0), ("0", 0.0)])
def test_the_demos_gap_is_a_duration(given: str, seconds: float) -> None:
    args = build_parser().parse_args(["demo", f"--demo.gap={given}"])
    assert args.demo_gap == seconds


def test_a_bad_demo_gap_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["demo", "--demo.gap=soon"], environ={})
    assert caught.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "argument --demo.gap: invalid duration 'soon'" in line
