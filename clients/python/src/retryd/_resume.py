"""Resume digests (WatchHoldsRequest.resume_digests): a reopened watch says which holds the
mirror already has, so retryd resends only the buckets that differ (after a restart a mirror
that is right costs one message, not one per hold). The vectors every library checks are in
clients/conformance/resume_vectors.json."""

from __future__ import annotations

import hashlib
from typing import Iterable

BUCKETS = 256


def digest(hold_id: str, until_ms: int) -> int:
    """First 8 bytes, big-endian, of SHA-256(id UTF-8, 0x00, `until` in Unix ms as decimal ASCII)."""
    h = hashlib.sha256(hold_id.encode("utf-8") + b"\x00" + str(until_ms).encode("ascii")).digest()
    return int.from_bytes(h[:8], "big")


def bucket(d: int) -> int:
    """A digest's bucket: its first byte."""
    return d >> 56


def bucket_digests(digests: Iterable[int]) -> list[int]:
    """The 256 bucket digests: XOR of the digests in each (0 when empty)."""
    out = [0] * BUCKETS
    for d in digests:
        out[d >> 56] ^= d
    return out


def until_ms(ts: object) -> int:
    """A Timestamp as the server sent it, in Unix ms (not corrected for clock skew)."""
    return ts.seconds * 1000 + ts.nanos // 1_000_000  # type: ignore[attr-defined]
