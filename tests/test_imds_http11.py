"""imds/http11.py reads an answer as RFC 9112 frames it, within bounds, and says when its connection may
carry the next request. Table-driven over a socket pair: the answer's bytes as a peer sends them."""

from __future__ import annotations

import socket
import time

import pytest

from se_exporter.imds.http11 import MAX_HEAD_BYTES, Closed, Exchange, ProtocolError, encode_request

DOC = b'{"DocumentIncarnation": 1, "Events": []}'
OK = b"HTTP/1.1 200 OK\r\n"

# name: (what the peer sends, whether it then closes, status, body, reusable afterwards)
GOOD = {
    "content-length": (OK + b"Content-Length: 40\r\n\r\n" + DOC, False, 200, DOC, True),
    "chunked, extension, trailers": (
        OK
        + b"Transfer-Encoding: chunked\r\n\r\n10;x=y\r\n"
        + DOC[:16]
        + b"\r\n18\r\n"
        + DOC[16:]
        + b"\r\n0\r\nT: 1\r\n\r\n",
        False,
        200,
        DOC,
        True,
    ),
    "to the connection's end": (OK + b"\r\n" + DOC, True, 200, DOC, False),
    "connection: close": (
        OK + b"Connection: keep-alive, Close\r\nContent-Length: 40\r\n\r\n" + DOC,
        False,
        200,
        DOC,
        False,
    ),
    "HTTP/1.0": (b"HTTP/1.0 200 OK\r\nContent-Length: 40\r\n\r\n" + DOC, False, 200, DOC, False),
    "100 continue first": (
        b"HTTP/1.1 100 Continue\r\n\r\n" + OK + b"Content-Length: 40\r\n\r\n" + DOC,
        False,
        200,
        DOC,
        True,
    ),
    "204 has no body": (b"HTTP/1.1 204 No Content\r\n\r\n", False, 204, b"", True),
    "103 is an answer without a body": (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", False, 103, b"", True),
    "no reason phrase": (b"HTTP/1.1 503\r\nContent-Length: 4\r\n\r\noops", False, 503, b"oops", True),
    "the same length twice": (OK + b"Content-Length: 40\r\nContent-Length: 40\r\n\r\n" + DOC, False, 200, DOC, True),
    "more than the body": (OK + b"Content-Length: 40\r\n\r\n" + DOC + b"HTTP/1.1", False, 200, DOC, False),
}

BAD = {
    "not http": (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP/1.x answer"),
    "two lengths": (OK + b"Content-Length: 40\r\nContent-Length: 41\r\n\r\n" + DOC, "invalid Content-Length"),
    "a negative length": (OK + b"Content-Length: -1\r\n\r\n", "invalid Content-Length"),
    "gzip framing": (OK + b"Transfer-Encoding: gzip\r\n\r\n", "is not chunked"),
    "a header without a colon": (OK + b"Content-Length 40\r\n\r\n", "invalid header line"),
    "a space before the colon": (OK + b"Content-Length : 40\r\n\r\n", "invalid header line"),
    "too many headers": (OK + b"X: 1\r\n" * 101 + b"\r\n", "more than 100 headers"),
    "a head without end": (OK + b"X: " + b"a" * (MAX_HEAD_BYTES + 10), f"exceeds {MAX_HEAD_BYTES} bytes"),
    "a bad chunk size": (OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "invalid chunk size"),
    "a chunk longer than its size": (
        OK + b"Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
        "longer than its size",
    ),
    "a body cut short": (OK + b"Content-Length: 41\r\n\r\n" + DOC, "closed in the answer's body"),
    "endless trailers": (
        OK + b"Transfer-Encoding: chunked\r\n\r\n0\r\n" + b"T: 1\r\n" * 101 + b"\r\n",
        "trailer lines",
    ),
}


def exchange_with(answer: bytes, *, close: bool, deadline: float = 5.0) -> Exchange:
    ours, peer = socket.socketpair()
    peer.sendall(answer)
    if close:
        peer.shutdown(socket.SHUT_WR)
    exchange = Exchange(ours, time.monotonic() + deadline)
    exchange._peer = peer  # type: ignore[attr-defined]  # kept open for the test's length
    return exchange


@pytest.mark.parametrize("name", sorted(GOOD))
def test_an_answer_is_read_as_framed(name: str) -> None:
    answer, close, status, body, reusable = GOOD[name]
    exchange = exchange_with(answer, close=close)
    exchange.read_head("GET")
    assert exchange.status == status
    assert b"".join(exchange.body()) == body
    assert exchange.complete and exchange.reusable is reusable


@pytest.mark.parametrize("name", sorted(BAD))
def test_an_answer_framed_wrong_is_a_protocol_error(name: str) -> None:
    answer, words = BAD[name]
    exchange = exchange_with(answer, close=True)
    with pytest.raises(ProtocolError, match=words):
        exchange.read_head("GET")
        b"".join(exchange.body())
    assert not exchange.reusable


def test_a_peer_that_closes_before_answering_is_closed_and_one_that_says_nothing_a_timeout() -> None:
    with pytest.raises(Closed):
        exchange_with(b"", close=True).read_head("GET")
    exchange = exchange_with(OK, close=False, deadline=0.3)
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="did not arrive in time"):
        exchange.read_head("GET")
    assert time.monotonic() - began < 1.0


def test_a_request_is_encoded_once_with_its_host_and_length() -> None:
    assert encode_request("GET", "169.254.169.254", 80, "/m?a=1", {"Metadata": "true"}, body=None) == (
        b"GET /m?a=1 HTTP/1.1\r\nHost: 169.254.169.254\r\nAccept-Encoding: identity\r\nMetadata: true\r\n\r\n"
    )
    posted = encode_request("POST", "::1", 8080, "/m", {}, body=b"{}")
    assert posted.startswith(b"POST /m HTTP/1.1\r\nHost: [::1]:8080\r\n") and posted.endswith(
        b"Content-Length: 2\r\n\r\n{}"
    )
