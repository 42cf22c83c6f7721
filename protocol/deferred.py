"""A round's sampled-out announcements, kept for top-ups: only the ones a top-up can reach.

With `fetch_sample` set, most announcements of a round are sampled out (`Defer`); a fetch that
fails is replaced by the deferred announcement of lowest (priority, sender) (`Inbox.top_up`).
A round takes at most `limit` entries from here (`AdmissionRules.max_top_ups_per_round`), so
only the `limit` lowest entries can ever be taken, and only those are kept (fewer than
`2 x limit` between two trims): per peer O(limit) instead of O(peers) (at 10,000 simulated
peers, a round's deferred entries were ~100M tuples).

Why keeping the lowest `limit` loses nothing: an entry is dropped only when `limit` kept
entries are lower; each take removes one, so while fewer than `limit` takes were made, one of
those lower entries is still kept, and the lowest of all entries is always a kept one
(tests/protocol/test_admission_deferred.py checks this against the unbounded store).
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter

from protocol.decisions import Defer


class DeferredStore:
    """The lowest `limit` (priority, sender) `Defer`s offered; `take` gives the lowest, at most
    `limit` times in all.

    Offers below `cutoff` are appended unsorted and trimmed in bulk (sorted, cut to the lowest
    `limit`) once `2 x limit` are waiting, and before any read: at 1000 simulated peers each
    receiver keeps ~240 offers a round, and keeping them sorted one insertion at a time (a
    tuple key, a bisect, a dict entry each) was ~4% of the simulation. What is kept after a
    trim, and so every take and read, is what one-at-a-time keeping gives (tests compare it
    with an unbounded store)."""

    __slots__ = ("_entries", "_trim_at", "cutoff", "limit", "taken")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.taken = 0
        self._entries: list[Defer] = []  # sorted by (priority, sender) right after a trim
        self._trim_at = max(1, 2 * limit)
        # No entry of higher priority than this can ever be taken, so none is kept: the highest
        # kept priority when `limit` were last kept at once after a trim (-1 for limit 0; above
        # any priority before). It never rises: when `limit` entries at most `cutoff` were kept,
        # later takes (fewer than `limit` are left) each find one at most `cutoff`. Callers may
        # skip `offer` above it (most sampled-out deliveries at scale) with one float compare.
        self.cutoff = 2.0 if limit else -1.0

    def offer(self, entry: Defer) -> None:
        """Keep `entry` if a take could still reach it (each sender is offered once a round)."""
        if entry[0] > self.cutoff:
            return  # most offers at scale: decided with one compare
        entries = self._entries
        entries.append(entry)
        if len(entries) >= self._trim_at:
            self._trim()

    def fast_offer_parts(self) -> tuple[list[Defer], int]:
        """(the entries list, the length that calls for a trim): for the simulator's compiled
        fast path (simulator/fastpath/), which does `offer` itself (append below `cutoff`,
        `_trim` at that length) for most sampled-out deliveries of a simulated round."""
        return self._entries, self._trim_at

    def _trim(self) -> None:
        """Sort the entries by (priority, sender) and keep the lowest `limit`."""
        entries = self._entries
        # By priority alone (a C key); only equal priorities (~never: 53 bits of a sha256) need
        # the sender's order too.
        entries.sort(key=_priority_of)
        if len(set(map(_priority_of, entries))) < len(entries):
            entries.sort(key=_order_key)
        del entries[self.limit :]
        if entries and len(entries) >= self.limit:
            self.cutoff = entries[-1][0]

    def take(self) -> Defer | None:
        """The lowest entry, removed; None when none is left or `limit` were taken already."""
        if self.taken >= self.limit or not self._entries:
            return None
        self._trim()
        self.taken += 1
        return self._entries.pop(0)

    # ---- read access (tests, status) ------------------------------------------------------

    def _kept(self) -> list[Defer]:
        self._trim()
        return self._entries

    def __len__(self) -> int:
        return len(self._kept())

    def __bool__(self) -> bool:
        return bool(self._entries)  # a trim never empties a store that holds entries

    def __contains__(self, sender: object) -> bool:
        return any(entry[1].peer_id == sender for entry in self._kept())

    def __getitem__(self, sender: str) -> Defer:
        for entry in self._kept():
            if entry[1].peer_id == sender:
                return entry
        raise KeyError(sender)

    def __iter__(self) -> Iterator[str]:
        return iter([entry[1].peer_id for entry in self._kept()])

    def items(self) -> Iterator[tuple[str, Defer]]:
        return iter([(entry[1].peer_id, entry) for entry in self._kept()])


_priority_of = itemgetter(0)


def _order_key(entry: Defer) -> tuple[float, str]:
    return entry[0], entry[1].peer_id
