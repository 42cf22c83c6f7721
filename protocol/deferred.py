"""A round's sampled-out announcements, kept for top-ups: only the ones a top-up can reach.

With `fetch_sample` set, most announcements of a round are sampled out (`Defer`); a fetch that
fails is replaced by the deferred announcement of lowest (priority, sender) (`Inbox.top_up`).
A round takes at most `limit` entries from here (`AdmissionRules.max_top_ups_per_round`), so
only the `limit` lowest entries can ever be taken, and only those are kept: per peer O(limit)
instead of O(peers) (at 10,000 simulated peers, a round's deferred entries were ~100M tuples).

Why keeping the lowest `limit` loses nothing: an entry is dropped only when `limit` kept
entries are lower; each take removes one, so while fewer than `limit` takes were made, one of
those lower entries is still kept, and the lowest of all entries is always a kept one
(tests/test_admission_deferred.py checks this against the unbounded store).
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterator

from protocol.decisions import Defer


class DeferredStore:
    """sender -> `Defer` for the lowest `limit` (priority, sender) offered; `take` gives the
    lowest, at most `limit` times in all."""

    __slots__ = ("_by_sender", "_order", "cutoff", "limit", "taken")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0
        self._by_sender: dict[str, Defer] = {}
        self._order: list[tuple[float, str]] = []  # ascending, the keys of `_by_sender`
        # No entry of higher priority than this can ever be taken, so none is kept: the highest
        # kept priority when `limit` were last kept at once (-1 for limit 0; above any priority
        # before). It never rises: when `limit` entries at most `cutoff` were kept, later takes
        # (fewer than `limit` are left) each find one at most `cutoff`. Callers may skip `offer`
        # above it (most sampled-out deliveries at scale) with one float compare.
        self.cutoff = 2.0 if limit else -1.0

    def offer(self, entry: Defer) -> None:
        """Keep `entry` if a take could still reach it (each sender is offered once a round)."""
        priority = entry[0]
        if priority > self.cutoff:
            return  # most offers at scale: decided with one compare
        order = self._order
        key = (priority, entry[1].peer_id)
        if len(order) >= self.limit:
            if not order or key > order[-1]:
                return
            insort(order, key)
            del self._by_sender[order.pop()[1]]
        else:
            insort(order, key)
        self._by_sender[key[1]] = entry
        if len(order) >= self.limit:
            self.cutoff = order[-1][0]

    def take(self) -> Defer | None:
        """The lowest entry, removed; None when none is left or `limit` were taken already."""
        if self.taken >= self.limit or not self._order:
            return None
        self.taken += 1
        return self._by_sender.pop(self._order.pop(0)[1])

    # ---- read access (tests, status) ------------------------------------------------------

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, sender: object) -> bool:
        return sender in self._by_sender

    def __getitem__(self, sender: str) -> Defer:
        return self._by_sender[sender]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_sender)

    def items(self) -> Iterator[tuple[str, Defer]]:
        return iter(self._by_sender.items())
