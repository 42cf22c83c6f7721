"""Every link's base latency, kept once per pair in a triangle of floats.

The in-memory network gives each pair of peers a fixed base latency, a pure function of the two
ids (`pair_latency_s`: blake2b of the sorted pair, scaled into the model's range). Gossip needs,
for each publish, the latencies from the sender to every subscriber. Kept per sender (one
array of N floats each) that is N x N floats, 800 MB at 10,000 peers, and the pair cache that
spared rebuilding them after churn took another ~250 MB (10,000 peers must fit in 8 GiB).
Here each unordered pair is stored once, in one flat array: N x (N + 1) / 2 floats, 400 MB at
10,000 peers, and a sender's row is gathered from it with numpy when it publishes (~60 us at
10,000 subscribers). The values are the function's own, so every report stays byte for byte.

Layout: peers are numbered in order of first sight; peer `hi`'s row holds its pairs with every
peer `lo <= hi` (itself included: the DHT's round trip to itself has a latency too), at
`hi * (hi + 1) // 2 + lo`. A new peer appends its row, so the numbering never has to be known
in advance and no earlier entry moves.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence

import numpy as np


def pair_latency_s(a: str, b: str, low_ms: float, high_ms: float) -> float:
    """The base latency of the link between `a` and `b` (the same either way round), seconds."""
    key = (a, b) if a < b else (b, a)
    digest = hashlib.blake2b(f"{key[0]}|{key[1]}".encode(), digest_size=8).digest()
    fraction = int.from_bytes(digest, "big") / 2**64
    return (low_ms + fraction * (high_ms - low_ms)) / 1000


class PairLatencies:
    """`pair_latency_s` for every pair of the peers numbered so far, stored once per pair."""

    __slots__ = ("high_ms", "ids", "low_ms", "number", "values")

    def __init__(self, low_ms: float, high_ms: float) -> None:
        self.low_ms = low_ms
        self.high_ms = high_ms
        self.number: dict[str, int] = {}
        self.ids: list[str] = []
        self.values = array("d")

    def number_of(self, peer: str) -> int:
        """`peer`'s number, numbering it (and computing its row) on first sight."""
        number = self.number.get(peer)
        if number is None:
            number = self.number[peer] = len(self.ids)
            self.ids.append(peer)
            low, high = self.low_ms, self.high_ms
            self.values.extend([pair_latency_s(other, peer, low, high) for other in self.ids])
        return number

    def get(self, a: str, b: str) -> float:
        """The base latency between `a` and `b`; computed, not stored, for a peer never numbered."""
        i, j = self.number.get(a), self.number.get(b)
        if i is None or j is None:
            return pair_latency_s(a, b, self.low_ms, self.high_ms)
        lo, hi = (i, j) if i <= j else (j, i)
        return self.values[hi * (hi + 1) // 2 + lo]

    def row(self, sender: str, members: Sequence[int] | np.ndarray) -> np.ndarray:
        """The latencies from `sender` to each peer number of `members`, in that order (float64)."""
        s = self.number_of(sender)
        numbers = np.asarray(members, dtype=np.int64)
        lo = np.minimum(numbers, s)
        hi = np.maximum(numbers, s)
        index = hi * (hi + 1) // 2 + lo
        return np.frombuffer(self.values, dtype=np.float64)[index]
