"""The whole web config follows its file (issue 53, point 6), as exporter-toolkit reads it for every request:
users, auth types, TLS settings, headers, rate limit. A file that no longer parses fails every request but
the liveness and traffic probes, is said once, and sets web_config_last_reload_successful to 0; the last
good config is never kept for auth. Time is the injected clock; the server is real."""

from __future__ import annotations

import logging
import os
import shutil
import ssl
from collections.abc import Callable
from pathlib import Path

import bcrypt
import httpx
import pytest

from se_exporter.web.config import LiveWebConfig, load_web_config
from se_exporter.web.server import WebServer
from tests.web.conftest import HASH, PASSWORD, TESTDATA, client_context
from tests.web.pki import PKI

Serve = Callable[..., WebServer]
NEW_PASSWORD = "correct horse battery staple"
TLS_CONFIG = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rewrite(path: Path, text: str) -> None:
    """A new version of the file, as a Kubernetes Secret's update or an editor leaves it (another inode)."""
    new = path.with_suffix(".new")
    new.write_text(text)
    os.replace(new, path)


def live(path: Path, clock: Clock) -> LiveWebConfig:
    return LiveWebConfig(path, load_web_config(path), clock=clock, check_every=1.0)


def test_a_change_is_in_force_after_the_next_check_and_not_before(config_dir: Path) -> None:
    path, clock = config_dir / "web.yml", Clock()
    path.write_text(f'basic_auth_users:\n  prometheus: "{HASH}"\n')
    config = live(path, clock)
    rewrite(path, f'basic_auth_users:\n  alice: "{HASH}"\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n')
    clock.now += 0.5
    assert set((config.current() or pytest.fail()).basic_auth_users) == {"prometheus"}, "checked at most once a second"
    clock.now += 0.5
    current = config.current()
    assert current is not None and set(current.basic_auth_users) == {"alice"}
    assert current.headers == (("X-Frame-Options", "deny"),)
    assert config.reload_successful


def test_a_file_that_no_longer_parses_puts_nothing_in_force_says_so_once_and_mends(
    config_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, clock = config_dir / "web.yml", Clock()
    path.write_text(f'basic_auth_users:\n  prometheus: "{HASH}"\n')
    config = live(path, clock)
    rewrite(path, "basic_auth_users:\n  prometheus: not-a-hash\n")
    with caplog.at_level(logging.ERROR, logger="se_exporter.web.config"):
        for _ in range(5):
            clock.now += 1
            assert config.current() is None, "the last good config is never kept for auth"
    assert not config.reload_successful
    assert config.problem is not None and "basic_auth_users.prometheus: is not a bcrypt hash" in config.problem
    said = [r for r in caplog.records if r.name == "se_exporter.web.config" and r.levelno >= logging.ERROR]
    assert len(said) == 1, "said once, not at every request"
    rewrite(path, f'basic_auth_users:\n  prometheus: "{HASH}"\n')
    clock.now += 1
    assert config.current() is not None and config.reload_successful


@pytest.mark.parametrize(("before", "after", "switch"), [("", TLS_CONFIG, "on"), (TLS_CONFIG, "", "off")])
def test_switching_tls_on_or_off_needs_a_restart(config_dir: Path, before: str, after: str, switch: str) -> None:
    path, clock = config_dir / "web.yml", Clock()
    path.write_text(before or "{}\n")
    config = live(path, clock)
    rewrite(path, after or "{}\n")
    clock.now += 1
    assert config.current() is None
    assert config.problem is not None and f"switching TLS {switch} needs a restart" in config.problem


def test_a_rotated_password_and_a_broken_file_on_a_real_server(serve: Serve, config_dir: Path) -> None:
    path, clock = config_dir / "web.yml", Clock()
    path.write_text(f'basic_auth_users:\n  prometheus: "{HASH}"\nauth_excluded_paths: [/-/ready]\n')
    server = serve(live(path, clock))
    base = f"http://127.0.0.1:{server.port}"

    def get(path: str, password: str | None = None) -> httpx.Response:
        auth = ("prometheus", password) if password else None
        return httpx.get(base + path, auth=auth, trust_env=False, timeout=5)

    assert get("/metrics", PASSWORD).status_code == 200
    new_hash = bcrypt.hashpw(NEW_PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    rewrite(path, f'basic_auth_users:\n  prometheus: "{new_hash}"\n')  # a Secret rotated; /-/ready no longer open
    clock.now += 1
    assert get("/metrics", PASSWORD).status_code == 401, "the old password, cached as good, is not kept"
    assert get("/metrics", NEW_PASSWORD).status_code == 200
    assert get("/-/ready").status_code == 401

    rewrite(path, "basic_auth_users: [oops\n")
    clock.now += 1
    broken = get("/metrics", NEW_PASSWORD)
    assert (broken.status_code, broken.text) == (500, "Internal Server Error\n")
    assert get("/-/ready", NEW_PASSWORD).status_code == 500
    assert get("/-/healthy").status_code == 200, "the process is alive: a liveness probe must not restart it"

    rewrite(path, f'basic_auth_users:\n  prometheus: "{new_hash}"\n')
    clock.now += 1
    assert get("/metrics", NEW_PASSWORD).status_code == 200


def test_a_new_client_auth_type_is_in_force_for_new_connections(serve: Serve, config_dir: Path, pki: PKI) -> None:
    path, clock = config_dir / "web.yml", Clock()
    path.write_text(TLS_CONFIG)
    server = serve(live(path, clock))

    def status(context: ssl.SSLContext) -> int | str:
        try:
            with httpx.Client(verify=context, trust_env=False, timeout=5) as client:
                return client.get(f"https://127.0.0.1:{server.port}/metrics").status_code
        except httpx.TransportError as error:
            return type(error).__name__

    assert status(client_context(pki)) == 200
    rewrite(path, TLS_CONFIG + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n")
    clock.now += 1
    assert status(client_context(pki)) != 200, "a client without a certificate is refused now"
    assert status(client_context(pki, "client")) == 200


def test_the_exporter_reports_the_reload_on_metrics(tmp_path: Path, config_dir: Path) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from se_exporter.lifecycle import EventStore
    from se_exporter.metrics.collector import SnapshotCollector
    from se_exporter.metrics.counters import Counters
    from se_exporter.poller import PollStatus

    class Poller:
        status = PollStatus()

    path, clock = config_dir / "web.yml", Clock()
    shutil.copy(TESTDATA / "good" / "auth_only.yml", path)
    config = live(path, clock)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(
        SnapshotCollector(
            store=EventStore(), poller=Poller(), counters=Counters(), clock=clock, version="t", web_config=config
        )
    )
    gauge = "azure_scheduled_events_web_config_last_reload_successful"
    assert f"{gauge} 1.0" in generate_latest(registry).decode()
    rewrite(path, "tls_server_config: [\n")
    clock.now += 1
    config.current()
    assert f"{gauge} 0.0" in generate_latest(registry).decode()
