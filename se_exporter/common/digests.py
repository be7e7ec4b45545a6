"""SHA-1 and SHA-256 without OpenSSL: importing ``hashlib`` imports ``_hashlib``, which loads OpenSSL's
libcrypto (about 3.8 MiB resident on every VM, BENCHMARKS.md) for a digest per transition. CPython's
own implementations, the modules ``hashlib`` itself falls back to, give the same digests;
``tests/test_uids.py`` holds them equal to ``hashlib``'s. A CPython built without them gets ``hashlib``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol


class Hash(Protocol):
    def digest(self) -> bytes: ...

    def hexdigest(self) -> str: ...


def _constructor(name: str, modules: tuple[str, ...]) -> Callable[..., Hash]:
    for module in modules:
        try:
            constructor: Callable[..., Hash] = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        return constructor
    import hashlib

    fallback: Callable[..., Hash] = getattr(hashlib, name)
    return fallback


_sha1 = _constructor("sha1", ("_sha1",))
_sha256 = _constructor("sha256", ("_sha2", "_sha256"))  # _sha2 from CPython 3.12 on


def sha1_digest(data: bytes) -> bytes:
    return _sha1(data, usedforsecurity=False).digest()


def sha256_hex(data: bytes) -> str:
    return _sha256(data, usedforsecurity=False).hexdigest()
