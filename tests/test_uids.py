"""A uid never changes: the fast uuid5 text is the standard library's, for any name and namespace; the digests
behind it and the content hashes are hashlib's."""

from __future__ import annotations

import hashlib
import uuid

from hypothesis import given
from hypothesis import strategies as st

from se_exporter.common.digests import sha1_digest, sha256_hex
from se_exporter.common.uids import uuid5_text


@given(st.uuids(), st.text())
def test_equal_to_the_standard_librarys_uuid5(namespace: uuid.UUID, name: str) -> None:
    assert uuid5_text(namespace, name) == str(uuid.uuid5(namespace, name))


def test_a_known_transition_uid() -> None:
    """Pinned: the uid every version so far gave this transition (a receiver may hold it already)."""
    namespace = uuid.UUID("6f1d3c52-5a57-4d0e-9a35-9b1f2b8c1e01")  # store.py's
    assert uuid5_text(namespace, "EV-1/scheduled") == "f7bef77e-ed40-54e8-a514-9f817cef2398"


@given(st.binary(max_size=300))
def test_digests_without_openssl_are_hashlibs(data: bytes) -> None:
    """common/digests.py: CPython's own SHA-1 and SHA-256 (no libcrypto), the same digests as hashlib's."""
    assert sha1_digest(data) == hashlib.sha1(data).digest()
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
