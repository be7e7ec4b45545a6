"""Reading an IMDS body: the cap applies to the decoded bytes, enforced while decoding, and the whole
answer has a deadline (a peer dripping bytes never trips a per-read timeout). An httpx answer streamed
from memory."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from collections.abc import Callable, Iterator

import httpx
import pytest

from se_exporter.errors import IMDSTimeout, InvalidDocument
from se_exporter.imds.client import MAX_BODY_BYTES, read_body

pytestmark = pytest.mark.pure  # httpx answers from memory: the same on every OS

DOC = b'{"DocumentIncarnation": 3, "Events": []}'


def stream(chunks: list[bytes], on_chunk: object = None) -> Iterator[bytes]:
    for chunk in chunks:
        if callable(on_chunk):
            on_chunk()
        yield chunk


def answer(
    chunks: list[bytes], status: int = 200, encoding: str | None = None, on_chunk: object = None
) -> httpx.Response:
    headers = {"content-encoding": encoding} if encoding else {}
    return httpx.Response(status, headers=headers, content=stream(chunks, on_chunk))


def split(data: bytes, size: int = 65536) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("encoding", [None, "identity", "gzip", "x-gzip", "deflate", "GZIP "])
def test_a_small_document_reads_back_whatever_its_encoding(encoding: str | None) -> None:
    compressors: dict[str, Callable[[bytes], bytes]] = {
        "gzip": gzip.compress,
        "x-gzip": gzip.compress,
        "deflate": zlib.compress,
        "GZIP ": gzip.compress,
    }
    raw = compressors.get(encoding or "", bytes)(DOC)
    assert read_body(answer(split(raw, 7), encoding=encoding), deadline=float("inf")) == DOC


def test_a_gzip_bomb_is_refused_while_decoding_without_inflating_it() -> None:
    bomb = gzip.compress(b"\0" * (1 << 30), compresslevel=9)  # 1 GiB of zeros, about 1 MB compressed
    assert len(bomb) < 2 << 20
    tracemalloc.start()
    try:
        with pytest.raises(InvalidDocument, match=f"exceeds {MAX_BODY_BYTES} bytes \\(decoded\\)"):
            read_body(answer(split(bomb), encoding="gzip"), deadline=float("inf"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_BODY_BYTES, f"peak {peak} bytes while refusing the bomb"


def test_an_oversized_error_page_is_cut_not_refused() -> None:
    bomb = gzip.compress(b"x" * (64 << 20))
    body = read_body(answer(split(bomb), status=503, encoding="gzip"), deadline=float("inf"))
    assert len(body) <= MAX_BODY_BYTES and body.startswith(b"xxx")


def test_an_unsupported_encoding_is_an_invalid_document() -> None:
    with pytest.raises(InvalidDocument, match="Content-Encoding: br is not supported"):
        read_body(answer([b"\x1b\x00"], encoding="br"), deadline=float("inf"))


def test_a_dripping_answer_ends_at_the_deadline() -> None:
    now = [0.0]

    def one_second_per_byte() -> None:
        now[0] += 1.0

    drip = answer([bytes([b]) for b in DOC], on_chunk=one_second_per_byte)
    with pytest.raises(IMDSTimeout, match="GET /metadata/scheduledevents did not finish its answer in time"):
        read_body(drip, deadline=5.0, what="IMDS GET /metadata/scheduledevents", monotonic=lambda: now[0])
    assert now[0] == 6.0  # abandoned at the first chunk past the deadline, not at the end of the body
