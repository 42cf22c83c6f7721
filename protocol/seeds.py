"""Deterministic seeds: every random choice of the protocol derives from these, never from
Python's salted `hash()` or a clock, so two peers (and two runs) make the same choices."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from sha256 of the parts joined by U+001F."""
    text = "\x1f".join(str(part) for part in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1


def unit_interval(*parts: object) -> float:
    """`derive_seed(*parts)` scaled to [0, 1): a per-(parts) draw anyone can recompute."""
    return derive_seed(*parts) / 2**63
