"""A cache of envelope-opening and batch-verification outcomes, keyed by the envelope's sha256.

Why: every batch is checked by every other peer. Opening an envelope costs an Ed25519 verify
(~50-100 µs) and verifying a batch re-scores every completion. Both outcomes are a pure function
of the envelope bytes (given the swarm's settings: seed, tasks, questions per round, limits), so a
node that sees the same bytes twice (gossip duplicates, DHT fallback after a direct fetch,
replays) can skip the work. In the simulator ONE cache is shared by all virtual peers of a swarm
(same settings), which turns N verifications of a batch into one: that is what makes
100 peers x 100 rounds feasible on 2 cores.

Failures are cached too (a replayed garbage message costs one sha256 and a dict lookup).
Bounded: least recently used entries are evicted beyond `max_entries`.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from protocol.envelope import Opened, open_envelope
from protocol.errors import ProtocolError


class VerifyCache:
    def __init__(self, max_entries: int = 50_000) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self._opened: OrderedDict[bytes, Opened | ProtocolError] = OrderedDict()
        self._verdicts: OrderedDict[bytes, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def open(self, data: bytes, *, max_size: int | None = None) -> Opened:
        """`protocol.envelope.open_envelope(data)`, memoized by sha256(data). Raises ProtocolError."""
        key = hashlib.sha256(data).digest()
        outcome = self._opened.get(key)
        if outcome is None:
            self.misses += 1
            try:
                outcome = open_envelope(data, max_size=max_size)
            except ProtocolError as error:
                outcome = error
            self._remember(self._opened, key, outcome)
        else:
            self.hits += 1
            self._opened.move_to_end(key)
        if isinstance(outcome, ProtocolError):
            raise ProtocolError(outcome.reason, outcome.message)
        return outcome

    def verdict(self, digest: bytes, compute: Callable[[], Any]) -> Any:
        """The verification verdict for the batch envelope with sha256 `digest`; computed once."""
        if digest in self._verdicts:
            self.hits += 1
            self._verdicts.move_to_end(digest)
            return self._verdicts[digest]
        self.misses += 1
        verdict = compute()
        self._remember(self._verdicts, digest, verdict)
        return verdict

    def _remember(self, table: OrderedDict[bytes, Any], key: bytes, value: Any) -> None:
        table[key] = value
        if len(table) > self.max_entries:
            table.popitem(last=False)
