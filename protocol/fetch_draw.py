"""The fetch draw: which announced batches a peer fetches when it samples (`fetch_sample`).

Every (seed, round, receiver, sender) gets `unit_interval(seed, round, me, sender, "fetch")`
(protocol/seeds.py): an unbiased draw anyone can recompute; the batch is fetched when it is
below the round's fetch probability, and the lowest of those sampled out are the top-ups.

It runs for every announcement every peer hears, so a `FetchDraw` hashes the round's shared
prefix `seed, round, me` once and each sender's `sender_suffix` after it. This is the only
Python copy of the draw: the admission inbox (`consider`, `sweep`) and the simulator's fast
path call it; the fast path's C loop (simulator/fastpath/) hashes `prefix` and
`sender_suffix(sender)` with OpenSSL, and the rules property
(tests/simulator/test_fastpath_rules.py) holds its priorities equal to these.
"""

from __future__ import annotations

import hashlib

__all__ = ["FetchDraw", "fetch_priority", "priority_of_digest", "sender_suffix"]


def sender_suffix(sender: str) -> bytes:
    """The sender's part of the drawn text, hashed after `FetchDraw.prefix`."""
    return f"{sender}\x1ffetch".encode()


def priority_of_digest(digest: bytes) -> float:
    """The draw in [0, 1) from the sha256 digest of the whole text (`derive_seed`'s 63 bits)."""
    return (int.from_bytes(digest[:8], "big") >> 1) / 2**63


class FetchDraw:
    """`fetch_priority(seed, round_number, me, sender)` for one receiver's round."""

    __slots__ = ("_hasher", "prefix")

    def __init__(self, seed: int, round_number: int, me: str) -> None:
        self.prefix = f"{seed}\x1f{round_number}\x1f{me}\x1f".encode()
        self._hasher = hashlib.sha256(self.prefix)

    def __call__(self, sender: str) -> float:
        hasher = self._hasher.copy()
        hasher.update(sender_suffix(sender))
        return priority_of_digest(hasher.digest())


def fetch_priority(seed: int, round_number: int, me: str, sender: str) -> float:
    """The draw of one (seed, round, receiver, sender); fetched when below the round's fetch
    probability (`protocol.admission.fetch_probability`)."""
    return FetchDraw(seed, round_number, me)(sender)
