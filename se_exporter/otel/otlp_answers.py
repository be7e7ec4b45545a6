"""What an OTLP collector answers, read without the generated protobuf classes (see ``otlp_proto``):
an export's partial success, a ``google.rpc.Status``'s message, a ``google.rpc.RetryInfo``'s delay.
Unknown fields are skipped, as protobuf readers do; bytes that are no protobuf message are a ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Iterator

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a message: an int for varint and fixed fields, bytes for the others.
    Raises ``ValueError`` on bytes that are no protobuf message."""
    view, at = memoryview(data), 0
    while at < len(view):
        key, at = _read_varint(view, at)
        field, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, at = _read_varint(view, at)
            yield field, value
        elif wire in (_FIXED64, _FIXED32):
            width = 8 if wire == _FIXED64 else 4
            if at + width > len(view):
                raise ValueError("truncated protobuf message")
            yield field, int.from_bytes(view[at : at + width], "little")
            at += width
        elif wire == _LEN:
            size, at = _read_varint(view, at)
            if at + size > len(view):
                raise ValueError("truncated protobuf message")
            yield field, bytes(view[at : at + size])
            at += size
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")


def _read_varint(view: memoryview, at: int) -> tuple[int, int]:
    number = shift = 0
    while at < len(view) and shift < 70:
        byte = view[at]
        at += 1
        number |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return number, at
        shift += 7
    raise ValueError("truncated protobuf varint")


def partial_success(answer: bytes) -> tuple[int, str]:
    """An export answer's partial success: (items rejected, the collector's message); ``ValueError`` if
    the answer is no protobuf message."""
    rejected, message = 0, ""
    for field, value in fields(answer):
        if field == 1 and isinstance(value, bytes):
            for inner, item in fields(value):
                if inner == 1 and isinstance(item, int):
                    rejected = item - (1 << 64) if item >= 1 << 63 else item
                elif inner == 2 and isinstance(item, bytes):
                    message = item.decode("utf-8", "replace")
    return rejected, message


def retry_delay(info: bytes) -> float:
    """The delay of a ``google.rpc.RetryInfo`` (a ``Duration`` in field 1), in seconds."""
    seconds = nanos = 0
    for field, value in fields(info):
        if field == 1 and isinstance(value, bytes):
            for inner, item in fields(value):
                if inner == 1 and isinstance(item, int):
                    seconds = item
                elif inner == 2 and isinstance(item, int):
                    nanos = item
    return float(seconds) + float(nanos) / 1e9


def status_message(answer: bytes) -> str:
    """The message of a ``google.rpc.Status``; ``ValueError`` if the answer is no protobuf message."""
    message = ""
    for field, value in fields(answer):
        if field == 2 and isinstance(value, bytes):
            message = value.decode("utf-8", "replace")
    return message
