"""--web.config.file: the exporter-toolkit format, validated strictly (one fixture per mistake)."""

from __future__ import annotations

import logging
import os
import shutil
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest

from se_exporter.errors import ConfigError
from se_exporter.web.config import WebConfig, load_web_config, parse_web_config
from tests.web.conftest import HASH, TESTDATA

BAD = sorted((TESTDATA / "bad").glob("*.yml"))


def expected_message(fixture: Path) -> str:
    first = fixture.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# expect: "), f"{fixture.name} must start with '# expect: <message part>'"
    return first.removeprefix("# expect: ")


def test_there_is_one_bad_fixture_per_mistake() -> None:
    assert len(BAD) >= 30


@pytest.mark.parametrize("fixture", BAD, ids=[path.stem for path in BAD])
def test_bad_config_is_a_config_error_naming_the_key(fixture: Path, config_dir: Path) -> None:
    path = config_dir / fixture.name  # next to the PKI: relative paths in the fixture resolve there
    shutil.copy(fixture, path)
    with pytest.raises(ConfigError) as error:
        load_web_config(path)
    message = str(error.value)
    assert message.startswith(f"web config {path}: "), message
    expected = expected_message(fixture).replace("{dir}/", "{dir}" + os.sep)  # a path as this platform writes it
    assert expected.format(dir=config_dir) in message, message


def test_bad_hash_is_never_echoed(config_dir: Path) -> None:
    path = config_dir / "web.yml"
    path.write_text("basic_auth_users:\n  alice: my-plaintext-password\n")
    with pytest.raises(ConfigError) as error:
        load_web_config(path)
    assert "my-plaintext-password" not in str(error.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"web config .*nope\.yml: cannot read the file: No such file"):
        load_web_config(tmp_path / "nope.yml")


def test_config_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_bytes(b"basic_auth_users:\n  caf\xe9: x\n")
    with pytest.raises(ConfigError, match=r"web config .*web\.yml: the file is not UTF-8 text$"):
        load_web_config(path)


def test_full_config_resolves_relative_paths_against_its_directory(
    config_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shutil.copy(TESTDATA / "good" / "full.yml", config_dir / "web.yml")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the working directory must not matter
    with caplog.at_level(logging.INFO, logger="se_exporter.web.config"):
        config = load_web_config(Path("..") / "conf" / "web.yml")
    tls = config.tls
    assert tls is not None
    assert tls.cert_file is not None and tls.cert_file.resolve() == (config_dir / "server.crt").resolve()
    assert tls.client_ca_file is not None and tls.client_ca_file.resolve() == (config_dir / "ca.crt").resolve()
    assert tls.client_auth_type == "RequireAndVerifyClientCert"
    assert (tls.min_version, tls.max_version) == (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3)
    assert tls.prefer_server_cipher_suites is False
    assert config.scheme == "https"
    # Blank Content-Security-Policy means unset, as in exporter-toolkit.
    assert config.headers == (
        ("X-Frame-Options", "deny"),
        ("X-Content-Type-Options", "nosniff"),
        ("Strict-Transport-Security", "max-age=31536000"),
    )
    assert set(config.basic_auth_users) == {"alice", "bob"}
    assert config.auth_excluded_paths == frozenset({"/-/healthy"})
    assert "curve_preferences is accepted but ignored" in caplog.text
    assert "$2b$" not in repr(config)  # hashes stay out of logs and reprs


def test_empty_file_is_plain_http_without_auth(config_dir: Path) -> None:
    shutil.copy(TESTDATA / "good" / "empty.yml", config_dir / "web.yml")
    assert load_web_config(config_dir / "web.yml") == WebConfig(source="ignored")


def test_empty_tls_section_is_no_tls(config_dir: Path) -> None:
    shutil.copy(TESTDATA / "good" / "auth_only.yml", config_dir / "web.yml")
    config = load_web_config(config_dir / "web.yml")
    assert config.tls is None and config.scheme == "http"
    assert dict(config.basic_auth_users) == {"prometheus": HASH}


def test_absolute_paths_are_kept(config_dir: Path, tmp_path: Path) -> None:
    config = parse_web_config(
        f"tls_server_config:\n  cert_file: {config_dir / 'server.crt'}\n  key_file: {config_dir / 'server.key'}\n",
        base_dir=tmp_path,
    )
    assert config.tls is not None and config.tls.cert_file == config_dir / "server.crt"


def test_allowed_sans_match_dns_and_ip(config_dir: Path) -> None:
    shutil.copy(TESTDATA / "good" / "full.yml", config_dir / "web.yml")
    tls = load_web_config(config_dir / "web.yml").tls
    assert tls is not None
    assert tls.allows_peer({"subjectAltName": (("DNS", "scraper.example"),)})
    assert tls.allows_peer({"subjectAltName": (("IP Address", "10.0.0.1"),)})
    assert not tls.allows_peer({"subjectAltName": (("DNS", "intruder.example"),)})
    assert not tls.allows_peer({"subject": ((("commonName", "scraper.example"),),)})  # CN is not a SAN
    assert not tls.allows_peer(None)


def test_a_header_value_yaml_reads_as_a_number_is_its_text(write_config: Callable[[str], WebConfig]) -> None:
    """exporter-toolkit's own headers fixture writes ``X-XSS-Protection: 1``: Go reads it as the string "1"."""
    config = write_config(
        "http_server_config:\n  headers:\n    X-XSS-Protection: 1\n    Strict-Transport-Security: 3.5\n"
    )
    assert config.headers == (("X-XSS-Protection", "1"), ("Strict-Transport-Security", "3.5"))
