"""Name-based ids (UUID version 5, RFC 9562) as text: the stable ``log.record.uid`` of every record.

Equal to ``str(uuid.uuid5(namespace, name))``, which receivers, the spool and earlier versions rely on
(a uid must never change), in a third of its time: when 1,000 events appear at once, every one of
them needs one. ``tests/test_uids.py`` holds the two equal.
"""

from __future__ import annotations

import uuid

from se_exporter.common.digests import sha1_digest


def uuid5_text(namespace: uuid.UUID, name: str) -> str:
    digest = bytearray(sha1_digest(namespace.bytes + name.encode())[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # the RFC's variant
    text = digest.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
