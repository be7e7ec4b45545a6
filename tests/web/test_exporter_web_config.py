"""--web.config.file through the real command line: HTTPS with basic auth, and a bad file stops start-up."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.exporter_process import REPO, ExporterProcess
from tests.support.fake_imds import FakeIMDS
from tests.support.wait import wait_for
from tests.web.conftest import HASH, PASSWORD
from tests.web.pki import PKI

pytestmark = [pytest.mark.debian, pytest.mark.posix]


def test_https_with_basic_auth(
    pki: PKI, config_dir: Path, fake_imds: FakeIMDS, start_exporter: Callable[..., ExporterProcess]
) -> None:
    web = config_dir / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        f"basic_auth_users:\n  prometheus: {HASH}\n"
    )
    exporter = start_exporter(f"--imds.url={fake_imds.url}", env={"SE_EXPORTER_WEB_CONFIG_FILE": str(web)})
    url = f"https://localhost:{exporter.port}"
    verify = ssl.create_default_context(cafile=str(pki.ca_file))
    with httpx.Client(verify=verify, trust_env=False, timeout=5) as client:
        wait_for(lambda: client.get(url + "/-/healthy").status_code == 401, 20, "the HTTPS port")
        denied = client.get(url + "/metrics", auth=("prometheus", "wrong"))
        assert denied.status_code == 401
        assert denied.headers["WWW-Authenticate"] == 'Basic realm="se-exporter"'
        scraped = client.get(url + "/metrics", auth=("prometheus", PASSWORD))
        assert scraped.status_code == 200 and "azure_scheduled_events_imds_up" in scraped.text
    assert "listening on https://" in exporter.logs()


def test_bad_web_config_stops_start_up(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  prometheus: not-a-bcrypt-hash\n")
    result = subprocess.run(
        [sys.executable, "-m", "se_exporter", f"--web.config.file={web}", "--web.listen-address=127.0.0.1:0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert f"web config {web}: basic_auth_users.prometheus" in result.stderr


def test_a_rotated_password_takes_effect_without_a_restart(
    config_dir: Path, fake_imds: FakeIMDS, start_exporter: Callable[..., ExporterProcess]
) -> None:
    """A Kubernetes Secret update: the new password is in force within seconds; a broken file in between fails
    every scrape, says so once in the log, and the gauge says whether the file in force parsed."""
    import bcrypt

    web = config_dir / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: {HASH}\n")
    exporter = start_exporter(f"--imds.url={fake_imds.url}", f"--web.config.file={web}")
    url = f"http://127.0.0.1:{exporter.port}/metrics"

    def status(password: str) -> int:
        return httpx.get(url, auth=("prometheus", password), trust_env=False, timeout=5).status_code

    wait_for(lambda: status(PASSWORD) == 200, 20, "the first scrape")
    new_hash = bcrypt.hashpw(b"rotated", bcrypt.gensalt(rounds=4)).decode()
    (config_dir / "web.new").write_text(f"basic_auth_users:\n  prometheus: {new_hash}\n")
    (config_dir / "web.new").replace(web)
    wait_for(lambda: status("rotated") == 200, 20, "the rotated password in force")
    assert status(PASSWORD) == 401
    web.write_text("basic_auth_users: [\n")
    wait_for(lambda: status("rotated") == 500, 20, "every request failing while the file does not parse")
    assert exporter.logs().count("web config changed and cannot be used") == 1
    web.write_text(f"basic_auth_users:\n  prometheus: {new_hash}\n")
    wait_for(lambda: status("rotated") == 200, 20, "the mended file in force")
    scraped = httpx.get(url, auth=("prometheus", "rotated"), trust_env=False, timeout=5).text
    assert "azure_scheduled_events_web_config_last_reload_successful 1.0" in scraped
