"""The IMDS client at the transport seam (httpx.MockTransport): requests sent, errors raised."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from se_exporter.errors import IMDSConnectionError, IMDSHTTPError, IMDSTimeout, InvalidDocument
from se_exporter.imds.body import MAX_BODY_BYTES
from se_exporter.imds.client import ClientSettings, IMDSClient
from se_exporter.imds.pacing import Backoff, RateLimiter

IMDS = Path(__file__).parent / "testdata" / "imds"
Handler = Callable[[httpx.Request], httpx.Response]


def client_for(handler: Handler, seen: list[httpx.Request] | None = None, **settings: object) -> IMDSClient:
    def record(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            request.read()
            seen.append(request)
        return handler(request)

    responses: list[tuple[str, str, float]] = []
    client = IMDSClient(
        ClientSettings(**settings),  # type: ignore[arg-type]
        RateLimiter(min_interval=0),
        transport=httpx.MockTransport(record),
        on_response=lambda m, c, s: responses.append((m, c, s)),
    )
    client.responses = responses  # type: ignore[attr-defined]
    return client


def test_get_sends_metadata_header_and_api_version() -> None:
    seen: list[httpx.Request] = []
    body = (IMDS / "docs-example-2-scheduled.json").read_bytes()
    client = client_for(lambda r: httpx.Response(200, content=body), seen, api_version="2019-08-01")
    document = client.get_document()
    assert document.incarnation == 2
    (request,) = seen
    assert request.method == "GET"
    assert request.headers["Metadata"] == "true"
    assert request.headers["Host"] == "169.254.169.254"
    assert request.headers["User-Agent"].startswith("se-exporter/")
    assert "Cookie" not in request.headers and "Content-Type" not in request.headers
    assert str(request.url) == "http://169.254.169.254/metadata/scheduledevents?api-version=2019-08-01"
    assert client.responses[0][:2] == ("GET", "200")  # type: ignore[attr-defined]


def test_first_call_gets_the_long_read_timeout_then_the_short_one() -> None:
    seen: list[httpx.Request] = []
    client = client_for(lambda r: httpx.Response(200, json={"DocumentIncarnation": 1, "Events": []}), seen,
                        timeout=3.0, first_call_timeout=120.0)
    client.get_document()
    client.get_document()
    assert [r.extensions["timeout"]["read"] for r in seen] == [120.0, 3.0]
    assert seen[1].extensions["timeout"]["connect"] == 2.0


def test_approve_posts_start_requests() -> None:
    seen: list[httpx.Request] = []
    client = client_for(lambda r: httpx.Response(200), seen)
    client.approve(["a", "b"])
    (request,) = seen
    assert request.method == "POST"
    assert request.headers["Metadata"] == "true"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Content-Length"] == str(len(request.content))
    assert json.loads(request.content) == {"StartRequests": [{"EventId": "a"}, {"EventId": "b"}]}


@pytest.mark.parametrize("code", [500, 503, 429, 410, 400])
def test_approve_is_one_request_whatever_the_answer(code: int) -> None:
    """Retries belong to the approver, which decides afresh before each one (approval.poster)."""
    seen: list[httpx.Request] = []
    with pytest.raises(IMDSHTTPError) as caught:
        client_for(lambda r: httpx.Response(code, json={"error": "x"}), seen).approve(["a"])
    assert len(seen) == 1
    assert caught.value.retryable == (code != 400)


@pytest.mark.parametrize(
    ("code", "reason", "explained"),
    [
        (400, "http_4xx", "Metadata: true"),
        (404, "http_4xx", "answered 404"),
        (410, "http_4xx", "retried for up to 70 s"),
        (429, "throttled", "5 requests/s"),
        (500, "http_5xx", "answered 500"),
    ],
)
def test_http_errors_are_typed_and_explained(code: int, reason: str, explained: str) -> None:
    client = client_for(lambda r: httpx.Response(code, text="nope"))
    with pytest.raises(IMDSHTTPError) as caught:
        client.get_document()
    assert caught.value.reason == reason
    assert explained in str(caught.value)
    assert client.responses[-1][:2] == ("GET", str(code))  # type: ignore[attr-defined]


def test_410_is_retryable() -> None:
    assert IMDSHTTPError(410, "gone").retryable


@pytest.mark.parametrize(
    ("exception", "error_type"),
    [
        (httpx.ReadTimeout("slow"), IMDSTimeout),
        (httpx.ConnectTimeout("slow"), IMDSTimeout),
        (httpx.ConnectError("refused"), IMDSConnectionError),
        (httpx.RemoteProtocolError("reset"), IMDSConnectionError),
        (httpx.ReadError("reset"), IMDSConnectionError),
    ],
)
def test_transport_failures_are_typed(exception: Exception, error_type: type) -> None:
    def fail(request: httpx.Request) -> httpx.Response:
        raise exception

    client = client_for(fail)
    with pytest.raises(error_type):
        client.get_document()
    assert client.responses[-1][:2] == ("GET", "error")  # type: ignore[attr-defined]


def test_oversized_body_is_invalid_and_not_read_whole() -> None:
    huge = b'{"DocumentIncarnation": 1, "Events": [' + b" " * (MAX_BODY_BYTES + 10) + b"]}"
    with pytest.raises(InvalidDocument, match="exceeds"):
        client_for(lambda r: httpx.Response(200, content=huge)).get_document()


@pytest.mark.parametrize(("code", "error_type"), [(200, InvalidDocument), (503, IMDSHTTPError)])
def test_a_body_claiming_an_encoding_it_does_not_have_is_a_typed_error(code: int, error_type: type) -> None:
    class Streamed(httpx.SyncByteStream):  # as from the network: decoded only when read
        def __iter__(self) -> Iterator[bytes]:
            yield b"not gzip"

    client = client_for(lambda r: httpx.Response(code, stream=Streamed(), headers={"Content-Encoding": "gzip"}))
    with pytest.raises(error_type, match="cannot be decoded" if code == 200 else "answered 503"):
        client.get_document()


def test_compute_metadata_gives_identity() -> None:
    seen: list[httpx.Request] = []
    compute = {"name": "WestNO_0", "vmId": "id-1", "location": "westeurope", "subscriptionId": "sub",
               "resourceId": "/subscriptions/sub/x", "vmSize": "Standard_D2s_v5", "vmScaleSetName": "WestNO"}
    identity = client_for(lambda r: httpx.Response(200, json=compute), seen).get_identity()
    assert (identity.name, identity.vm_id, identity.location, identity.vm_scale_set_name) == (
        "WestNO_0", "id-1", "westeurope", "WestNO")
    assert str(seen[0].url) == "http://169.254.169.254/metadata/instance/compute?api-version=2021-02-01"
    assert identity.affects(("westno_0", "WestNO_1")) is True
    assert identity.affects(("WestNO_1",)) is False


def test_compute_metadata_without_name_is_invalid() -> None:
    with pytest.raises(InvalidDocument, match="no VM name"):
        client_for(lambda r: httpx.Response(200, json={"vmId": "x"})).get_identity()


def test_rate_limiter_spaces_requests() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(min_interval=0.25, monotonic=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limiter.acquire()
    assert slept == [0.25, 0.25, 0.25, 0.25]


def test_backoff_grows_jittered_and_capped() -> None:
    import random

    backoff = Backoff(base=1.0, cap=8.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(8)]
    ceilings = [1, 2, 4, 8, 8, 8, 8, 8]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    backoff.reset()
    assert backoff.next_delay() <= 1.0
