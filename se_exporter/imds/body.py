"""Reading an IMDS answer's body: bounded in bytes after decoding, and in total time.

Every read is bounded by the request's deadline (``common/deadline.py``), and the answer as a whole is
checked against it here too. A compressed chunk decoded whole can be gigabytes: httpx's decoders inflate
each chunk they get in one call, and one 64 KiB chunk of gzip inflates to 64 MiB. We never ask for
compression, but a broken or hostile peer may send it anyway, so the raw bytes (``iter_raw``) are decoded
here, never more than the cap at a time, and the cap applies to what the body decodes to.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable

import httpx

from se_exporter.errors import IMDSTimeout, InvalidDocument

# A usual document is a few kB, but one listing thousands of events (a large scale set) is not: 5,000
# events with every field are ~1.4 MB. 4 MiB holds ~15,000 and still caps what a broken peer makes us hold.
MAX_BODY_BYTES = 4 << 20
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class BodyTooLarge(Exception):
    def __init__(self, fitting: list[bytes]) -> None:
        super().__init__()
        self.fitting = fitting  # the decoded bytes that still fit: the start of an error page explains it


def read_body(
    answer: httpx.Response,
    deadline: float,
    what: str = "IMDS answer",
    monotonic: Callable[[], float] = time.monotonic,
) -> bytes:
    """The decoded body of the streamed ``answer`` (``what``: "IMDS GET /path", for messages).

    A success whose body is too large or undecodable is an ``InvalidDocument``; an error page is cut
    (its start explains it); past ``deadline`` (on ``monotonic``) the answer is abandoned as an
    ``IMDSTimeout``.
    """
    success = 200 <= answer.status_code < 300
    encoding = answer.headers.get("content-encoding", "identity").strip().lower()
    decoder = _Decoder(encoding)
    chunks: list[bytes] = []
    size = 0
    try:
        for raw in answer.iter_raw():
            if monotonic() > deadline:
                raise IMDSTimeout(f"{what} did not finish its answer in time (a slow or dripping answer)")
            for chunk in decoder.feed(raw, MAX_BODY_BYTES - size):
                size += len(chunk)
                chunks.append(chunk)
    except BodyTooLarge as full:
        chunks += full.fitting
        if success:
            raise InvalidDocument(f"IMDS body exceeds {MAX_BODY_BYTES} bytes (decoded); not read further") from None
    except zlib.error as exc:
        if success:
            raise InvalidDocument(f"IMDS body cannot be decoded (Content-Encoding: {encoding}): {exc}") from None
    except ValueError as exc:  # an encoding we do not decode
        if success:
            raise InvalidDocument(str(exc)) from None
    return b"".join(chunks)  # an undecodable or oversized error page: its status code says enough


class _Decoder:
    """Identity, gzip or deflate, never producing more than it is allowed to at once."""

    def __init__(self, encoding: str) -> None:
        self._zlib = zlib.decompressobj(_WBITS[encoding]) if encoding in _WBITS else None
        self._unsupported = None if encoding in _WBITS or encoding in ("", "identity") else encoding

    def feed(self, data: bytes, room: int) -> list[bytes]:
        if self._unsupported is not None:
            raise ValueError(f"IMDS body cannot be decoded (Content-Encoding: {self._unsupported} is not supported)")
        if self._zlib is None:
            if len(data) > room:
                raise BodyTooLarge([data[:room]])
            return [data]
        out: list[bytes] = []
        while data:
            # At most room + 1 bytes: one more than fits proves the body too large, without inflating it.
            chunk = self._zlib.decompress(data, room + 1)
            if len(chunk) > room:
                raise BodyTooLarge([*out, chunk[:room]])
            room -= len(chunk)
            out.append(chunk)
            data = self._zlib.unconsumed_tail
        return out
