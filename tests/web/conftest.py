"""Fixtures for the web tests: a test-time PKI, a tiny registry and real servers on 127.0.0.1:0."""

from __future__ import annotations

import shutil
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Gauge

from se_exporter.web.config import WebConfig, load_web_config
from se_exporter.web.endpoints import make_app
from se_exporter.web.server import WebServer
from tests.web.pki import PKI, make_pki

TESTDATA = Path(__file__).resolve().parents[1] / "testdata" / "web"
PASSWORD = "hunter2"  # the bcrypt hashes in tests/testdata/web are of this password (cost 4)
HASH = "$2b$04$9n.tLK.N.rNcUgbzg6t/QOZ.72VH6qG.URWZM18k7qE60i6d/.wmC"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def config_dir(pki: PKI, tmp_path: Path) -> Path:
    """A directory holding a copy of the PKI, where web config files refer to it by relative paths."""
    directory = tmp_path / "conf"
    shutil.copytree(pki.dir, directory)
    return directory


@pytest.fixture
def write_config(config_dir: Path) -> Callable[[str], WebConfig]:
    def write(text: str) -> WebConfig:
        path = config_dir / "web.yml"
        path.write_text(text)
        return load_web_config(path)

    return write


def tiny_app() -> Any:
    registry = CollectorRegistry(auto_describe=True)
    Gauge("se_web_test_up", "A gauge for the web tests.", registry=registry).set(1)
    return make_app(registry, "/metrics", lambda: True, "test")


@pytest.fixture
def serve() -> Iterator[Callable[..., WebServer]]:
    servers: list[WebServer] = []

    def start(web_config: WebConfig | None, **kwargs: Any) -> WebServer:
        server = WebServer(tiny_app(), "127.0.0.1", 0, web_config, **kwargs)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def client_context(pki: PKI, cert: str | None = None, **versions: ssl.TLSVersion) -> ssl.SSLContext:
    """A verifying client context trusting the test CA, optionally presenting ``cert``.crt/.key."""
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert:
        context.load_cert_chain(str(pki.path(f"{cert}.crt")), str(pki.path(f"{cert}.key")))
    for attribute, version in versions.items():
        setattr(context, attribute, version)
    return context
