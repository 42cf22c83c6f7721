"""An immutable set of peers shared by many holders: `base` without one peer (`me`).

In the simulator every virtual peer asks for its connected peers at every round start: all
online peers but itself. Each Inbox kept its own frozenset of them, O(peers) per peer: at
10,000 peers that is 10,000 frozensets of 10,000 ids (~5 GB). `PeersExcept` shares one
frozenset of the online peers and leaves out `me` on lookup: the same membership, length and
elements as `frozenset(base - {me})`, at the cost of one object per peer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Set
from typing import Any


class PeersExcept(Set[str], Sequence[str]):  # type: ignore[misc]
    """frozenset(base) - {me}, without the copy. A Sequence too (NetworkPort.connected_peers)."""

    __slots__ = ("_base", "_me")

    def __init__(self, base: frozenset[str], me: str) -> None:
        self._base = base
        self._me = me

    def __contains__(self, peer: object) -> bool:
        return peer != self._me and peer in self._base

    def __len__(self) -> int:
        return len(self._base) - (self._me in self._base)

    def __iter__(self) -> Iterator[str]:
        me = self._me
        return (peer for peer in self._base if peer != me)

    def union_into(self, target: set[str]) -> None:
        """`target |= self`, as set operations in C (iterating `self` is a Python generator)."""
        had_me = self._me in target
        target |= self._base
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
