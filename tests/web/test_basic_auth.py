"""Basic auth (bcrypt) and extra headers from --web.config.file, over real HTTPS and HTTP."""

from __future__ import annotations

import threading
from collections.abc import Callable

import bcrypt
import httpx
import pytest

from se_exporter.web.access import BasicAuthenticator
from se_exporter.web.config import WebConfig
from se_exporter.web.server import WebServer
from tests.web.conftest import HASH, PASSWORD, client_context
from tests.web.pki import PKI

Serve = Callable[..., WebServer]
WriteConfig = Callable[[str], WebConfig]

TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
HEADERS = "http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n"
CHALLENGE = 'Basic realm="se-exporter"'


def users(**hashes: str) -> str:
    return "basic_auth_users:\n" + "".join(f'  {user}: "{hashed}"\n' for user, hashed in hashes.items())


def test_basic_auth_over_https(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(TLS + HEADERS + users(prometheus=HASH)))
    with httpx.Client(
        base_url=f"https://127.0.0.1:{server.port}", verify=client_context(pki), trust_env=False, timeout=5
    ) as client:
        for path in ("/metrics", "/", "/-/healthy", "/-/ready", "/nope"):  # every path is protected
            response = client.get(path)
            assert response.status_code == 401, path
            assert response.headers["WWW-Authenticate"] == CHALLENGE
            assert "se_web_test_up" not in response.text
        for auth in (("prometheus", "wrong"), ("nobody", PASSWORD), ("Prometheus", PASSWORD), ("prometheus", "")):
            response = client.get("/metrics", auth=auth)
            assert response.status_code == 401, auth
            assert response.headers["WWW-Authenticate"] == CHALLENGE
        response = client.get("/metrics", auth=("prometheus", PASSWORD))
        assert response.status_code == 200
        assert "se_web_test_up 1.0" in response.text
        assert "WWW-Authenticate" not in response.headers
        assert client.get("/-/healthy", auth=("prometheus", PASSWORD)).text == "Healthy\n"


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer abc",
        "Basic",
        "Basic !!!not-base64!!!",
        "Basic cHJvbWV0aGV1cw==",  # "prometheus" without a colon
        "Basic " + "A" * 10_000,
        "Basic éé",
    ],
)
def test_malformed_authorization_is_401(serve: Serve, write_config: WriteConfig, authorization: str) -> None:
    server = serve(write_config(users(prometheus=HASH)))
    response = httpx.get(
        f"http://127.0.0.1:{server.port}/metrics",
        trust_env=False,
        timeout=5,
        headers={b"Authorization": authorization.encode("utf-8")},
    )
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == CHALLENGE


def test_scheme_is_case_insensitive(serve: Serve, write_config: WriteConfig) -> None:
    server = serve(write_config(users(prometheus=HASH)))
    token = httpx.BasicAuth("prometheus", PASSWORD)._auth_header.split(" ", 1)[1]
    response = httpx.get(
        f"http://127.0.0.1:{server.port}/metrics",
        trust_env=False,
        timeout=5,
        headers={"Authorization": f"basic {token}"},
    )
    assert response.status_code == 200


def test_auth_excluded_paths_for_probes(serve: Serve, write_config: WriteConfig) -> None:
    server = serve(write_config("auth_excluded_paths: [/-/healthy, /-/ready]\n" + users(prometheus=HASH)))
    base = f"http://127.0.0.1:{server.port}"
    assert httpx.get(base + "/-/healthy", trust_env=False, timeout=5).status_code == 200
    assert httpx.get(base + "/-/ready", trust_env=False, timeout=5).status_code == 200
    for path in ("/metrics", "/", "/-/healthy/", "/metrics?p=/-/healthy", "/-/healthy/../metrics"):  # exact paths only
        assert httpx.get(base + path, trust_env=False, timeout=5).status_code == 401, path


def test_extra_headers_on_every_response(serve: Serve, write_config: WriteConfig, pki: PKI) -> None:
    server = serve(write_config(TLS + HEADERS + users(prometheus=HASH)))
    with httpx.Client(
        base_url=f"https://127.0.0.1:{server.port}", verify=client_context(pki), trust_env=False, timeout=5
    ) as client:
        for response in (
            client.get("/metrics"),
            client.get("/metrics", auth=("prometheus", PASSWORD)),
            client.get("/nope", auth=("prometheus", PASSWORD)),
        ):
            assert response.headers["X-Frame-Options"] == "deny"
            assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_headers_without_auth_or_tls(serve: Serve, write_config: WriteConfig) -> None:
    server = serve(write_config(HEADERS))
    response = httpx.get(f"http://127.0.0.1:{server.port}/", trust_env=False, timeout=5)
    assert response.status_code == 200
    assert response.headers["X-Frame-Options"] == "deny"


def test_successful_check_is_cached_so_the_second_scrape_costs_no_bcrypt(
    serve: Serve, write_config: WriteConfig, pki: PKI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted, not timed: the first scrape's bcrypt check is the only one (it was timed against a check of
    the hash, and failed under Wine on a loaded machine)."""
    calls = count_bcrypt(monkeypatch)
    server = serve(write_config(TLS + users(prometheus=HASH)))
    with httpx.Client(
        base_url=f"https://127.0.0.1:{server.port}", verify=client_context(pki), trust_env=False, timeout=10
    ) as client:
        codes = [client.get("/metrics", auth=("prometheus", PASSWORD)).status_code for _ in range(3)]
    assert codes == [200, 200, 200] and calls == [HASH.encode()]


def count_bcrypt(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    calls: list[bytes] = []
    real = bcrypt.checkpw

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", counting)
    return calls


def test_only_successes_are_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = BasicAuthenticator({"prometheus": HASH})
    calls = count_bcrypt(monkeypatch)
    assert auth.check(b"prometheus", PASSWORD.encode())
    assert auth.check(b"prometheus", PASSWORD.encode())
    assert len(calls) == 1
    assert not auth.check(b"prometheus", b"wrong")
    assert not auth.check(b"prometheus", b"wrong")
    assert len(calls) == 3  # failures are checked every time (and cannot evict good entries)
    assert not auth.check(b"prometheus", PASSWORD.encode() + b"x")  # a different password is not a hit


def test_unknown_user_is_checked_against_a_dummy_hash_of_the_same_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    cost10 = bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=10)).decode()
    auth = BasicAuthenticator({"prometheus": HASH, "other": cost10})
    calls = count_bcrypt(monkeypatch)
    assert not auth.check(b"mallory", PASSWORD.encode())
    assert not auth.check(b"mallory", PASSWORD.encode())
    assert len(calls) == 2  # never cached, always a full bcrypt
    assert calls[0].startswith(b"$2b$10$")  # the highest configured cost
    assert calls[0] not in (HASH.encode(), cost10.encode())


def test_cache_is_bounded_and_keeps_no_plaintext() -> None:
    hashes = {f"user{i}": HASH for i in range(5)}
    auth = BasicAuthenticator(hashes, cache_size=3)
    for user in hashes:
        assert auth.check(user.encode(), PASSWORD.encode())
    assert len(auth._cache) == 3
    assert all(PASSWORD.encode() not in key for key in auth._cache)


def test_passwords_longer_than_72_bytes_compare_like_htpasswd() -> None:
    long_password = b"p" * 100
    hashed = bcrypt.hashpw(long_password[:72], bcrypt.gensalt(rounds=4)).decode()
    auth = BasicAuthenticator({"prometheus": hashed})
    assert auth.check(b"prometheus", long_password)  # bcrypt only ever uses the first 72 bytes


def test_concurrent_scrapes_with_auth(serve: Serve, write_config: WriteConfig) -> None:
    """Eight scrapes with the same credentials at once, before they are known: they share one bcrypt check
    (a Prometheus HA pair's first scrapes got 429 when more than four waited for their own)."""
    server = serve(write_config(users(prometheus=HASH)))
    results: list[int] = []

    def scrape() -> None:
        response = httpx.get(
            f"http://127.0.0.1:{server.port}/metrics", trust_env=False, timeout=10, auth=("prometheus", PASSWORD)
        )
        results.append(response.status_code)

    threads = [threading.Thread(target=scrape) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert results == [200] * 8
