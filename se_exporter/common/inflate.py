"""An HTTP answer's body decoded within a byte bound (the IMDS client's, the OTLP answers').

httpx's and urllib3's decoders inflate each chunk whole: one 64 KiB chunk of gzip is 64 MiB, and a 0.5 MB
gzip bomb 512 MiB. We never ask for compression, but a broken or hostile peer may send it anyway, so the raw
bytes are decoded here, never more than the bound at a time.
"""

from __future__ import annotations

import zlib

_INFLATED = {"gzip", "x-gzip", "deflate"}


class BodyTooLarge(Exception):
    def __init__(self, fitting: bytes) -> None:
        super().__init__()
        self.fitting = fitting  # the decoded bytes that still fit: the start of an error page explains it


class BoundedDecoder:
    """Identity, gzip or deflate, never producing more than ``limit`` bytes in all; ``ValueError`` for another
    encoding, ``zlib.error`` for data that is not what it says it is."""

    def __init__(self, encoding: str, limit: int) -> None:
        encoding = encoding.strip().lower()
        if encoding not in _INFLATED and encoding not in ("", "identity"):
            raise ValueError(f"Content-Encoding: {encoding} is not supported")
        self._zlib = zlib.decompressobj(wbits=47) if encoding in _INFLATED else None  # 47: gzip or zlib header
        self._room = limit

    def feed(self, data: bytes) -> bytes:
        """``data`` decoded; ``BodyTooLarge`` once the body would pass the limit."""
        if self._zlib is not None:
            # At most room + 1 bytes: one more than fits proves the body too large, without inflating it.
            data = self._zlib.decompress(data, self._room + 1)
        if len(data) > self._room:
            raise BodyTooLarge(data[: self._room])
        self._room -= len(data)
        return data
