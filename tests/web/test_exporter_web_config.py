"""--web.config.file through the real command line: HTTPS with basic auth, and a bad file stops start-up."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.exporter_process import REPO, ExporterProcess
from tests.support.fake_imds import FakeIMDS
from tests.support.wait import wait_for
from tests.web.conftest import HASH, PASSWORD
from tests.web.pki import PKI


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
