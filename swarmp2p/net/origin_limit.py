"""A per-origin token bucket for inbound gossip, checked before the signature and the node's
decode: a key that floods pays only a dict lookup per message past its allowance,
not an Ed25519 verification and a msgpack decode.

An honest origin sends one announcement a round and a hello every few seconds (each arrives
once more per relaying neighbour, but duplicates are dropped by the seen-cache before this
check), so the default allowance (a burst of 50, then 10 a second) is far above what any
honest key needs. The table is capped (least recently seen origin forgotten) so that many
throwaway keys cannot grow it; a forgotten origin starts again with a full bucket, which
costs the attacker nothing it could not get with a fresh key anyway.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class OriginRateLimiter:
    def __init__(
        self,
        rate_per_s: float = 10.0,
        burst: float = 50.0,
        *,
        max_origins: int = 16384,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_per_s <= 0 or burst < 1 or max_origins < 1:
            raise ValueError("need rate_per_s > 0, burst >= 1 and max_origins >= 1")
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.max_origins = max_origins
        self._clock = clock
        # origin -> (tokens left, when counted); order: least recently seen first.
        self._buckets: OrderedDict[bytes, tuple[float, float]] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, origin: bytes) -> bool:
        """Take one token from `origin`'s bucket; False (drop the message) when it has none."""
        now = self._clock()
        bucket = self._buckets.pop(origin, None)
        if bucket is None:
            tokens = self.burst
            while len(self._buckets) >= self.max_origins:
                self._buckets.popitem(last=False)
                self.evicted += 1
        else:
            tokens = min(self.burst, bucket[0] + (now - bucket[1]) * self.rate_per_s)
        allowed = tokens >= 1.0
        self._buckets[origin] = (tokens - 1.0 if allowed else tokens, now)
        return allowed
