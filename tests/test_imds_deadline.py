"""Every IMDS request has a total deadline: a peer that drips its status line, its headers, endless
``100 Continue`` answers, a chunk-size line or trailers is a timeout within the deadline, never a
poll (or an approval POST) held for good. The real client and transport against a raw loopback peer."""

from __future__ import annotations

import time

import pytest

from se_exporter.errors import IMDSConnectionError, IMDSHTTPError, IMDSTimeout
from se_exporter.imds.client import ClientSettings, IMDSClient, RateLimiter
from tests.support.raw_peer import SLOW_ANSWERS, RawPeer

DEADLINE = 0.5


def client(url: str) -> IMDSClient:
    settings = ClientSettings(base_url=url, timeout=DEADLINE, first_call_timeout=DEADLINE)
    return IMDSClient(settings, RateLimiter(min_interval=0))


@pytest.mark.parametrize("answer", sorted(SLOW_ANSWERS))
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_slow_answer_is_a_timeout_within_the_deadline(answer: str, method: str) -> None:
    with RawPeer(SLOW_ANSWERS[answer]) as peer:
        imds = client(peer.url)
        started = time.monotonic()
        with pytest.raises(IMDSTimeout, match=r"timed out|in time"):
            imds.get_document() if method == "GET" else imds.approve(["E1"])
        took = time.monotonic() - started
        imds.close()
    # Ten times the deadline: a peer dripping a byte every 0.2 s holds a request without one for 40 s or ever.
    assert DEADLINE * 0.9 <= took < DEADLINE * 10, f"{answer}: {took:.2f} s"
    assert peer.received.startswith(method.encode() + b" /metadata/scheduledevents?api-version=")


@pytest.mark.parametrize("status", [b"302 Found", b"301 Moved Permanently"])
def test_an_answer_imds_never_gives_is_an_invalid_document_retried_at_the_usual_pace(status: bytes) -> None:
    """A redirect (never followed) or an informational answer was counted as http_4xx and polled at the
    slowest pace."""
    answer = b"HTTP/1.1 " + status + b"\r\nLocation: http://elsewhere/\r\nContent-Length: 0\r\n\r\n"
    with RawPeer(lambda: [answer]) as peer:
        imds = client(peer.url)
        with pytest.raises(IMDSHTTPError) as raised:
            imds.get_document()
        imds.close()
    assert raised.value.reason == "invalid_document" and raised.value.retryable


def test_an_informational_answer_is_skipped_and_a_peer_that_then_hangs_up_is_a_connection_error() -> None:
    """RFC 9110: a 1xx answer is interim and the client waits for the final one; this peer closes instead."""
    answer = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
    with RawPeer(lambda: [answer]) as peer:
        imds = client(peer.url)
        with pytest.raises(IMDSConnectionError, match="disconnected without sending a response") as raised:
            imds.get_document()
        imds.close()
    assert raised.value.reason == "connection" and raised.value.retryable
