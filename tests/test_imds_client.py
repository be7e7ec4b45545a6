"""The IMDS client with its production transport against the loopback fake IMDS: the requests IMDS
receives, the answers it gives, and the typed error each failure becomes (``errors.py``)."""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from se_exporter.errors import IMDSConnectionError, IMDSHTTPError, IMDSStopped, IMDSTimeout, InvalidDocument
from se_exporter.imds.client import MAX_BODY_BYTES, Backoff, ClientSettings, IMDSClient, RateLimiter
from se_exporter.simulator.imds import invalid_version_body
from tests.support.fake_imds import Answer, FakeIMDS, Seen
from tests.support.raw_peer import RawPeer

IMDS = Path(__file__).parent / "testdata" / "imds"
EVENTS = "/metadata/scheduledevents"


class Client(IMDSClient):
    """The real client, remembering what it told the metrics about each answer."""

    def __init__(
        self,
        url: str,
        stop: threading.Event | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        **settings: object,
    ) -> None:
        self.responses: list[tuple[str, str]] = []
        super().__init__(
            ClientSettings(base_url=url, **settings),  # type: ignore[arg-type]
            RateLimiter(min_interval=0),
            on_response=lambda m, c, _s: self.responses.append((m, c)),
            stop=stop,
            monotonic=monotonic,
        )


def test_get_sends_metadata_header_and_api_version(fake_imds: FakeIMDS) -> None:
    fake_imds.respond = lambda seen: Answer(body=(IMDS / "docs-example-2-scheduled.json").read_bytes())
    client = Client(fake_imds.url, api_versions=("2019-08-01",))
    assert client.get_document().incarnation == 2
    (request,) = fake_imds.requests
    assert (request.method, request.path) == ("GET", f"{EVENTS}?api-version=2019-08-01")
    assert request.headers["Metadata"] == "true" and request.headers["User-Agent"].startswith("se-exporter/")
    assert "Cookie" not in request.headers and "Content-Type" not in request.headers and request.body == b""
    assert client.responses == [("GET", "200")]


def test_the_first_call_may_take_long_then_the_timeout_holds(fake_imds: FakeIMDS) -> None:
    """Microsoft: the first call after Scheduled Events is enabled may take up to 2 minutes."""
    fake_imds.respond = lambda seen: Answer(body=b'{"DocumentIncarnation": 1, "Events": []}', delay=1.0)
    client = Client(fake_imds.url, timeout=0.5, first_call_timeout=5.0)
    assert client.get_document().incarnation == 1
    with pytest.raises(IMDSTimeout, match="timed out"):
        client.get_document()
    assert client.responses == [("GET", "200"), ("GET", "error")]


@pytest.mark.parametrize("answer", [Answer(body=b"{}", delay=600), Answer(body=b" " * 10_000 + b"{}", drip=0.05)])
def test_a_stop_ends_a_get_under_way_as_stopped_not_as_a_failure(fake_imds: FakeIMDS, answer: Answer) -> None:
    """Held (no byte for 10 minutes) or dripped (a byte every 50 ms, every read succeeding): the stop, set by
    another thread once IMDS has the request, ends the GET, whose 2-minute first-call deadline is far off."""
    asked, stop = threading.Event(), threading.Event()

    def respond(_seen: object) -> Answer:
        asked.set()
        return answer

    fake_imds.respond = respond
    client = Client(fake_imds.url, stop=stop)
    outcome: list[BaseException] = []

    def get() -> None:
        try:
            client.get_document()
        except IMDSStopped as error:
            outcome.append(error)

    getter = threading.Thread(target=get)
    getter.start()
    assert asked.wait(60)
    stop.set()
    getter.join(60)  # the deadline is 120 s away: an ended thread means the stop ended it
    assert not getter.is_alive() and "the exporter is stopping" in str(outcome[0])
    assert client.responses == [("GET", "error")]


def test_approve_posts_start_requests(fake_imds: FakeIMDS) -> None:
    Client(fake_imds.url).approve(["a", "b"])
    (request,) = fake_imds.requests
    assert (request.method, request.path) == ("POST", f"{EVENTS}?api-version=2020-07-01")
    assert request.headers["Metadata"] == "true" and request.headers["Content-Type"] == "application/json"
    assert request.headers["Content-Length"] == str(len(request.body))
    assert json.loads(request.body) == {"StartRequests": [{"EventId": "a"}, {"EventId": "b"}]}


@pytest.mark.parametrize("code", [500, 503, 429, 410, 400])
def test_approve_is_one_request_whatever_the_answer(fake_imds: FakeIMDS, code: int) -> None:
    """Retries belong to the approver, which decides afresh before each one (approval.poster)."""
    fake_imds.respond = lambda seen: Answer(status=code, body=b'{"error": "x"}')
    with pytest.raises(IMDSHTTPError) as caught:
        Client(fake_imds.url).approve(["a"])
    assert len(fake_imds.requests) == 1
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
def test_http_errors_are_typed_and_explained(fake_imds: FakeIMDS, code: int, reason: str, explained: str) -> None:
    fake_imds.respond = lambda seen: Answer(status=code, body=b"nope")
    client = Client(fake_imds.url)
    with pytest.raises(IMDSHTTPError) as caught:
        client.get_document()
    assert caught.value.reason == reason and explained in str(caught.value) and "'nope'" in str(caught.value)
    assert caught.value.retryable == (code not in {400, 404})
    assert client.responses == [("GET", str(code))]


def test_a_reset_connection_is_a_connection_error(fake_imds: FakeIMDS) -> None:
    fake_imds.respond = lambda seen: Answer(reset=True)
    client = Client(fake_imds.url)
    with pytest.raises(IMDSConnectionError, match=f"IMDS GET {EVENTS} failed"):
        client.get_document()
    assert client.responses == [("GET", "error")]


def test_nobody_listening_is_a_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: the connection is refused
    with pytest.raises(IMDSConnectionError, match="ConnectionRefusedError"):
        Client(f"http://127.0.0.1:{port}").get_document()


def test_an_answer_that_is_not_http_is_a_connection_error() -> None:
    with RawPeer(lambda: [b"SSH-2.0-OpenSSH_9.2\r\n"]) as peer, pytest.raises(IMDSConnectionError):
        Client(peer.url, timeout=2.0, first_call_timeout=2.0).get_document()


def test_oversized_body_is_invalid_and_not_read_whole(fake_imds: FakeIMDS) -> None:
    huge = b'{"DocumentIncarnation": 1, "Events": [' + b" " * (MAX_BODY_BYTES + 10) + b"]}"
    fake_imds.respond = lambda seen: Answer(body=huge)
    with pytest.raises(InvalidDocument, match="exceeds"):
        Client(fake_imds.url).get_document()


@pytest.mark.parametrize(("code", "error_type"), [(200, InvalidDocument), (503, IMDSHTTPError)])
def test_a_body_claiming_an_encoding_it_does_not_have_is_a_typed_error(
    fake_imds: FakeIMDS, code: int, error_type: type
) -> None:
    fake_imds.respond = lambda seen: Answer(status=code, body=b"not gzip", headers={"Content-Encoding": "gzip"})
    with pytest.raises(error_type, match="cannot be decoded" if code == 200 else "answered 503"):
        Client(fake_imds.url).get_document()


def test_compute_metadata_gives_identity(fake_imds: FakeIMDS) -> None:
    compute = {
        "name": "WestNO_0",
        "vmId": "id-1",
        "location": "westeurope",
        "subscriptionId": "sub",
        "resourceId": "/subscriptions/sub/x",
        "vmSize": "Standard_D2s_v5",
        "vmScaleSetName": "WestNO",
    }
    fake_imds.compute = Answer(body=json.dumps(compute).encode())
    identity = Client(fake_imds.url).get_identity()
    assert (identity.name, identity.vm_id, identity.location, identity.vm_scale_set_name) == (
        "WestNO_0",
        "id-1",
        "westeurope",
        "WestNO",
    )
    assert fake_imds.requests[0].path == "/metadata/instance/compute?api-version=2021-02-01"
    assert identity.affects(("westno_0", "WestNO_1")) is True
    assert identity.affects(("WestNO_1",)) is False


def test_compute_metadata_without_name_is_invalid(fake_imds: FakeIMDS) -> None:
    fake_imds.compute = Answer(body=b'{"vmId": "x"}')
    with pytest.raises(InvalidDocument, match="no VM name"):
        Client(fake_imds.url).get_identity()


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
    backoff = Backoff(base=1.0, cap=8.0, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(8)]
    ceilings = [1, 2, 4, 8, 8, 8, 8, 8]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    backoff.reset()
    assert backoff.next_delay() <= 1.0


NEWEST, FALLBACK = "2024-07-09", "2020-07-01"
EVENTS_DOC = b'{"DocumentIncarnation": 7, "Events": []}'
UNKNOWN_VERSION = json.dumps(invalid_version_body()).encode()  # IMDS's 400 for a version it does not serve


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def versioned(url: str, clock: Clock | None = None) -> Client:
    return Client(url, api_versions=(NEWEST, FALLBACK), monotonic=clock or Clock())


def version_of(seen: Seen) -> str:
    return seen.path.rsplit("api-version=", 1)[1]


@pytest.mark.parametrize(
    ("refusal", "falls_back"),
    [
        (Answer(400, UNKNOWN_VERSION), True),
        (Answer(404, b'{"error": "Not found"}'), True),
        (Answer(400, b'{"error": "Bad request. Required metadata header not specified"}'), False),
        (Answer(400, b""), False),
        (Answer(503, b"busy"), False),
        (Answer(429, b"too many"), False),
    ],
    ids=["400-unknown-version", "404", "400-no-metadata-header", "400-empty", "503", "429"],
)
def test_the_next_api_version_is_asked_in_the_same_poll_only_on_an_unknown_version_answer(
    fake_imds: FakeIMDS, refusal: Answer, falls_back: bool
) -> None:
    fake_imds.respond = lambda seen: refusal if version_of(seen) == NEWEST else Answer(body=EVENTS_DOC)
    client = versioned(fake_imds.url)
    if falls_back:
        assert client.get_document().incarnation == 7
        assert [version_of(seen) for seen in fake_imds.requests] == [NEWEST, FALLBACK]
        assert client.api_version == FALLBACK
    else:
        with pytest.raises(IMDSHTTPError) as raised:
            client.get_document()
        assert raised.value.status_code == refusal.status
        assert [version_of(seen) for seen in fake_imds.requests] == [NEWEST]
        assert client.api_version == NEWEST


def test_the_last_version_refused_is_the_polls_error(fake_imds: FakeIMDS) -> None:
    fake_imds.respond = lambda seen: Answer(400, UNKNOWN_VERSION)
    client = versioned(fake_imds.url)
    with pytest.raises(IMDSHTTPError, match=f"api-version was '{FALLBACK}'") as raised:
        client.get_document()
    assert raised.value.reason == "http_4xx" and not raised.value.retryable
    assert [version_of(seen) for seen in fake_imds.requests] == [NEWEST, FALLBACK]


def test_the_preferred_version_is_asked_again_hourly_and_used_once_accepted(
    fake_imds: FakeIMDS, caplog: pytest.LogCaptureFixture
) -> None:
    served = {FALLBACK}
    fake_imds.respond = lambda seen: (
        Answer(body=EVENTS_DOC) if version_of(seen) in served else Answer(400, UNKNOWN_VERSION)
    )
    clock = Clock()
    client = versioned(fake_imds.url, clock)
    caplog.set_level(logging.DEBUG, logger="se_exporter.imds.client")

    def asked() -> list[str]:
        versions = [version_of(seen) for seen in fake_imds.requests]
        fake_imds.requests.clear()
        return versions

    client.get_document()
    assert asked() == [NEWEST, FALLBACK]
    clock.now += 3599.0
    client.get_document()
    client.approve(["E1"])
    assert asked() == [FALLBACK, FALLBACK], "within the hour: the version in use, for the GET and the POST"
    clock.now += 1.0
    client.get_document()
    assert asked() == [NEWEST, FALLBACK], "an hour on: the preferred first, refused again"
    clock.now += 1800.0
    client.get_document()
    assert asked() == [FALLBACK], "the next retry is an hour after the last one"
    served.add(NEWEST)  # the VM is enrolled in the preview
    clock.now += 1800.0
    client.get_document()
    client.get_document()
    client.approve(["E1"])
    assert asked() == [NEWEST, NEWEST, NEWEST]
    assert client.api_version == NEWEST
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [
        f"IMDS Scheduled Events api-version {FALLBACK} in use: IMDS refused {NEWEST} (400 "
        f"{UNKNOWN_VERSION[:120].decode()!r}); the preferred version is asked again every 3600 s",
        f"IMDS Scheduled Events api-version {NEWEST} in use again: IMDS accepts it now",
    ], "said once per choice, not once per poll or per retry"


def test_an_hourly_retry_that_fails_in_any_way_falls_back_within_the_poll(fake_imds: FakeIMDS) -> None:
    answers = {NEWEST: Answer(400, UNKNOWN_VERSION)}
    fake_imds.respond = lambda seen: answers.get(version_of(seen), Answer(body=EVENTS_DOC))
    clock = Clock()
    client = versioned(fake_imds.url, clock)
    client.get_document()
    answers[NEWEST] = Answer(503, b"busy")
    clock.now += 3600.0
    fake_imds.requests.clear()
    assert client.get_document().incarnation == 7, "the poll's events all the same"
    assert [version_of(seen) for seen in fake_imds.requests] == [NEWEST, FALLBACK]
    assert client.api_version == FALLBACK
