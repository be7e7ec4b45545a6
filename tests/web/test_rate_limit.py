"""``rate_limit`` as exporter-toolkit defines it (web/rate_limit_test.go): a token bucket over every request,
429 Too Many Requests beyond it; on the injected clock for the bucket, on a real server for the answer."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from se_exporter.web.access import TokenBucket
from se_exporter.web.config import WebConfig
from se_exporter.web.server import WebServer

Serve = Callable[..., WebServer]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_then_one_token_per_interval() -> None:
    clock = Clock()
    bucket = TokenBucket(interval=2.0, burst=3, clock=clock)
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]
    clock.now += 1.9
    assert not bucket.allow()
    clock.now += 0.1
    assert [bucket.allow(), bucket.allow()] == [True, False]
    clock.now += 60  # tokens never pile up beyond the burst
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]


def test_beyond_the_burst_a_request_is_answered_too_many_requests_but_the_traffic_probe(
    serve: Serve, write_config: Callable[[str], WebConfig]
) -> None:
    """exporter-toolkit's case: with burst 10 and an interval of a minute, the 11th request is refused."""
    config = write_config("rate_limit:\n  interval: 1m\n  burst: 10\n")
    assert config.rate_limit == (60.0, 10)
    server = serve(config)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", trust_env=False, timeout=5) as client:
        codes = [client.get("/-/healthy").status_code for _ in range(11)]
        refused = client.get("/metrics")
        assert client.get("/-/traffic").status_code != 429  # a load balancer's probe is never refused
    assert codes == [200] * 10 + [429]
    assert (refused.status_code, refused.text) == (429, "Too Many Requests\n")


def test_an_interval_of_zero_is_no_limit(write_config: Callable[[str], WebConfig]) -> None:
    assert write_config("rate_limit:\n  interval: 0s\n  burst: 0\n").rate_limit is None
    assert write_config("rate_limit:\n  interval: 1000000000\n  burst: 2\n").rate_limit == (1.0, 2)  # Go's nanoseconds
