"""The image's HEALTHCHECK probe (se_exporter/web/healthcheck.py): where it looks, and what it calls healthy.

tests/shipped/test_image.py runs it in the built image; here its rules, table-driven, against real servers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from se_exporter.web.config import WebConfig
from se_exporter.web.healthcheck import Target, exporter_argv, probe, target
from se_exporter.web.server import WebServer
from tests.support.exporter_process import refused_port
from tests.web.conftest import HASH


@pytest.mark.parametrize(
    ("cmdline", "argv"),
    [
        (["/usr/local/bin/se-exporter", "--web.listen-address=:9000"], ["--web.listen-address=:9000"]),
        (["se-exporter"], []),
        (["/run/podman-init", "--", "se-exporter", "demo", "--poll.interval=2s"], ["demo", "--poll.interval=2s"]),
        (["python", "-m", "se_exporter", "run", "--vm.name=a"], ["run", "--vm.name=a"]),
        (["C:\\se-exporter\\se-exporter.exe", "--web.listen-address=:1"], ["--web.listen-address=:1"]),
        (["sleep", "60"], []),
        ([], []),
    ],
)
def test_the_exporters_arguments_are_found_in_its_command_line(cmdline: list[str], argv: list[str]) -> None:
    assert exporter_argv(cmdline) == argv


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        ([], {}, Target("127.0.0.1", 10160, None)),
        (["demo"], {"SE_EXPORTER_WEB_LISTEN_ADDRESS": ":9100"}, Target("127.0.0.1", 9100, None)),
        (  # the flag wins over its variable, as in the exporter
            ["--web.listen-address", "127.0.0.2:9200"],
            {"SE_EXPORTER_WEB_LISTEN_ADDRESS": ":9100"},
            Target("127.0.0.2", 9200, None),
        ),
        (["run", "--web.listen-address=[::]:9300"], {}, Target("::1", 9300, None)),
        (["--web.listen-address=0.0.0.0:9400", "--poll.interval=2s"], {}, Target("127.0.0.1", 9400, None, None, 2.0)),
        (["--web.config.file=/etc/web.yml"], {}, Target("127.0.0.1", 10160, Path("/etc/web.yml"))),
        ([], {"SE_EXPORTER_WEB_CONFIG_FILE": "/w.yml"}, Target("127.0.0.1", 10160, Path("/w.yml"))),
        (  # no port: the textfile's age tells, against the poll interval
            ["--web.listen-address=", "--poll.interval=30s"],
            {"SE_EXPORTER_TEXTFILE_PATH": "/t/se.prom"},
            Target("127.0.0.1", None, None, Path("/t/se.prom"), 30.0),
        ),
    ],
)
def test_the_target_is_where_the_exporter_listens(argv: list[str], environ: dict[str, str], expected: Target) -> None:
    assert target(argv, environ) == expected


def test_a_plain_server_is_healthy_and_nothing_listening_is_not(serve: Callable[..., WebServer]) -> None:
    server = serve(None)
    assert probe(Target("127.0.0.1", server.port, None)) is None
    with refused_port() as unused:
        problem = probe(Target("127.0.0.1", unused, None))
    assert problem is not None and f"http://127.0.0.1:{unused}/-/healthy" in problem


def test_without_a_port_a_textfile_written_lately_is_healthy(tmp_path: Path) -> None:
    """Rewritten after every poll: older than three polls (at least a minute) means the exporter is stuck."""
    path = tmp_path / "se-exporter.prom"
    assert probe(Target("127.0.0.1", None, None, path, 30.0)) == f"{path}: No such file or directory"
    path.write_text("azure_scheduled_events_imds_up 1\n")
    assert probe(Target("127.0.0.1", None, None, path, 30.0)) is None
    aged = time.time() - 200
    os.utime(path, (aged, aged))
    assert probe(Target("127.0.0.1", None, None, path, 30.0)) == f"{path}: not written for 200 s (more than 90 s)"
    assert probe(Target("127.0.0.1", None, None, path, 1.0)) == f"{path}: not written for 200 s (more than 60 s)"


@pytest.mark.parametrize(
    "web_yml",
    [
        "tls_server_config: {cert_file: server.crt, key_file: server.key}\n",
        "tls_server_config: {cert_file: server.crt, key_file: server.key, client_ca_file: ca.crt,"
        " client_auth_type: RequireAndVerifyClientCert}\n",
        f"basic_auth_users: {{prometheus: '{HASH}'}}\n",
    ],
    ids=["tls", "client-certificates", "basic-auth"],
)
def test_tls_and_basic_auth_servers_are_healthy(
    web_yml: str, write_config: Callable[[str], WebConfig], config_dir: Path, serve: Callable[..., WebServer]
) -> None:
    server = serve(write_config(web_yml))
    assert probe(Target("127.0.0.1", server.port, config_dir / "web.yml")) is None
    # The same server probed as if it had no web config: TLS is not spoken, or auth is refused.
    if "basic_auth" in web_yml:
        assert probe(Target("127.0.0.1", server.port, None)) == f"http://127.0.0.1:{server.port}/-/healthy: HTTP 401"
    else:
        assert probe(Target("127.0.0.1", server.port, None)) is not None
