"""An immutable set of peers shared by many holders: `base`, plus a prefix of the peers that
joined after it, without one peer (`me`).

In the simulator every virtual peer asks for its connected peers at every round start: all
online peers but itself. Each Inbox kept its own frozenset of them, O(peers) per peer: at
10,000 peers that is 10,000 frozensets of 10,000 ids (~5 GB). `PeersExcept` shares one
frozenset of the online peers and leaves out `me` on lookup.

While a swarm starts, though, every peer asks right after it comes online, so each asks a
different set: the peers online so far. One frozenset per ask was N sets of N/2 ids on
average, ~2.5 GB at 10,000 peers until round 1 let them go. So a view is `base`
(the online peers when the world last rebuilt it) plus the first `count` peers of `joined`,
the peers that came online since, in order: every view of one base shares its frozenset, its
list and its index, and holds only its own count. The membership, length and elements are
those of `frozenset(base | joined[:count]) - {me}`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Set
from itertools import chain, islice
from typing import Any

from protocol.admission import SharedPeers

_EMPTY: tuple[str, ...] = ()
_NO_INDEX: Mapping[str, int] = {}


class PeersExcept(SharedPeers, Sequence[str]):  # type: ignore[misc]
    """frozenset(base | joined[:count]) - {me}, without the copy. A Sequence too
    (NetworkPort.connected_peers). `joined` and `join_index` (peer -> its position in `joined`)
    are shared and only ever appended to; `joined` holds no peer of `base`."""

    __slots__ = ("_base", "_count", "_index", "_joined", "_me")

    def __init__(
        self,
        base: frozenset[str],
        me: str,
        joined: Sequence[str] = _EMPTY,
        join_index: Mapping[str, int] = _NO_INDEX,
        count: int = 0,
    ) -> None:
        self._base = base
        self._me = me
        self._joined = joined
        self._index = join_index
        self._count = count

    def __contains__(self, peer: object) -> bool:
        if peer == self._me:
            return False
        if peer in self._base:
            return True
        return self._count > 0 and self._index.get(peer, self._count) < self._count  # type: ignore[call-overload]

    def membership_parts(self) -> tuple[frozenset[str], Mapping[str, int], int]:
        """(base, join index, count): for a caller that tests many peers other than `me`, as
        `peer in base or index.get(peer, count) < count` inline (heard_run: a method call
        per test was ~5% of a 1000-peer simulation)."""
        return self._base, self._index, self._count

    def __len__(self) -> int:
        me = self._me
        me_inside = me in self._base or self._index.get(me, self._count) < self._count
        return len(self._base) + self._count - me_inside

    def __iter__(self) -> Iterator[str]:
        me = self._me
        return (peer for peer in chain(self._base, islice(self._joined, self._count)) if peer != me)

    def union_into(self, target: set[str]) -> None:
        """`target |= self`, as set operations in C (iterating `self` is a Python generator)."""
        had_me = self._me in target
        target |= self._base
        if self._count:
            target.update(islice(self._joined, self._count))
        if not had_me:
            target.discard(self._me)

    def __getitem__(self, index: Any) -> Any:
        return sorted(self)[index]  # not on any hot path: only to honour Sequence

    def __hash__(self) -> int:
        return self._hash()

    def __eq__(self, other: object) -> bool:
        return Set.__eq__(self, other)

    def __repr__(self) -> str:
        return f"PeersExcept({len(self)} peers, without {self._me!r})"
