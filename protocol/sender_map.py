"""Per-sender maps for many receivers in one process, a list slot per sender instead of a dict.

In the simulator each of N virtual peers keeps, per sender, the last round it heard of it
(`Inbox.known`) and the digest it announced this round (`RoundInbox.announced`): N x N
entries. As dicts that is ~30 bytes an entry, ~6 GB at 10,000 peers, most of an 8 GiB bound. Here every
map of the process numbers senders through one shared `PeerNumbers`, and a map is a list
indexed by that number: 8 bytes an entry, and no rehashing as a round's map fills up. `known`
holds round numbers, so it is a `SenderRounds`: 4-byte ints in an array, half that again.

A node keeps plain dicts (its `Inbox` gets no `PeerNumbers`): the numbering never forgets a
peer, which suits a simulation that ends, not a node that runs for months among strangers.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from itertools import compress, repeat
from operator import is_not, ne
from typing import Any, TypeVar

import numpy as np

V = TypeVar("V")


class PeerNumbers:
    """Peer id -> a small int, in order of first use; shared by every SenderMap of a run. The
    admission inbox's `SenderMaps`: its maps are made here."""

    __slots__ = ("ids", "number")

    def __init__(self, peers: Iterable[str] = ()) -> None:
        self.number: dict[str, int] = {}
        self.ids: list[str] = []
        for peer in peers:
            self.of(peer)

    def of(self, peer: str) -> int:
        number = self.number.get(peer)
        if number is None:
            number = self.number[peer] = len(self.ids)
            self.ids.append(peer)
        return number

    def __len__(self) -> int:
        return len(self.ids)

    def rounds(self) -> SenderRounds:
        return SenderRounds(self)

    def digests(self) -> SenderMap[bytes]:
        return SenderMap(self)

    def drop_below(self, rounds: MutableMapping[str, int], floor: int) -> None:
        if not isinstance(rounds, SenderMap):
            raise TypeError("PeerNumbers.drop_below takes the map its rounds() made")
        rounds.drop_below(floor)


class SenderMap(MutableMapping[str, V]):
    """A dict from peer id to a value that is never None, stored as `slots[number]` (None: no
    entry). Iterates in numbering order, not insertion order: no reader depends on the order
    (the sweep and the round record sort). The simulator's fast path
    (simulator/fastpath/) reads and writes `slots` directly for senders already
    numbered, within `len(slots)`.

    A subclass may store its slots otherwise: it names its empty marker (`EMPTY`), how a slot
    is told from it (`FILLED`, in C: `is_not` for None), how slots are made (`_new_slots`) and
    which values it takes (`_check`), and overrides `get` with its own inline compare."""

    __slots__ = ("numbers", "slots")

    EMPTY: Any = None
    FILLED: Callable[[Any, Any], bool] = is_not

    def __init__(self, numbers: PeerNumbers) -> None:
        self.numbers = numbers
        # Sized to every peer numbered so far, so the hot path rarely meets a short list.
        self.slots: Any = self._new_slots(len(numbers.ids))

    def _new_slots(self, count: int) -> Any:
        return [None] * count

    def _check(self, value: V) -> None:
        if value is None:
            raise ValueError("a SenderMap cannot hold None (it marks an empty slot)")

    def get(self, peer: str, default: object = None) -> V | None:  # type: ignore[override]
        number = self.numbers.number.get(peer)
        if number is not None and number < len(self.slots):
            value = self.slots[number]
            if value is not None:
                return value  # type: ignore[no-any-return]
        return default  # type: ignore[return-value]

    def __getitem__(self, peer: str) -> V:
        value = self.get(peer)
        if value is None:
            raise KeyError(peer)
        return value

    def __contains__(self, peer: object) -> bool:
        return self.get(peer) is not None  # type: ignore[arg-type]

    def __setitem__(self, peer: str, value: V) -> None:
        self._check(value)
        number = self.numbers.of(peer)
        slots = self.slots
        if number >= len(slots):
            slots.extend(repeat(self.EMPTY, len(self.numbers.ids) - len(slots)))
        slots[number] = value

    def __delitem__(self, peer: str) -> None:
        number = self.numbers.number.get(peer)
        if number is None or number >= len(self.slots) or not self.FILLED(self.slots[number], self.EMPTY):
            raise KeyError(peer)
        self.slots[number] = self.EMPTY

    def __iter__(self) -> Iterator[str]:
        # In C: the ids whose slot holds a value (a generator in Python would be ~5x slower,
        # and the sweep turns `known` into a set for every peer every round).
        return compress(self.numbers.ids, map(self.FILLED, self.slots, repeat(self.EMPTY)))

    def __len__(self) -> int:
        return len(self.slots) - self.slots.count(self.EMPTY)

    def clear(self) -> None:
        # MutableMapping's clear pops one item at a time, each a scan from the start.
        self.slots[:] = self._new_slots(len(self.slots))

    def drop_below(self, floor: int) -> None:
        """Remove every entry whose value is `< floor` (values must be ints): the sweep's
        forgetting of peers not heard of for a while."""
        slots = self.slots
        for number, value in enumerate(slots):
            if value is not None and value < floor:
                slots[number] = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"


class SenderRounds(SenderMap[int]):
    """A SenderMap of round numbers (ints in [0, 2**31)), stored as 4-byte ints in an
    `array("i")` with -1 for no entry: `Inbox.known`, N x N entries in the simulator, 400 MB
    less than a list's pointers at 10,000 peers. The simulator's fast path writes `slots` directly."""

    __slots__ = ()

    EMPTY = -1
    FILLED = ne

    def _new_slots(self, count: int) -> Any:
        return array("i", repeat(-1, count))

    def _check(self, value: int) -> None:
        if type(value) is not int or not 0 <= value < 2**31:
            raise ValueError(f"a SenderRounds holds round numbers in [0, 2**31), not {value!r}")

    def get(self, peer: str, default: object = None) -> int | None:  # type: ignore[override]
        number = self.numbers.number.get(peer)
        if number is not None and number < len(self.slots):
            value = self.slots[number]
            if value != -1:
                return value  # type: ignore[no-any-return]
        return default  # type: ignore[return-value]

    def drop_below(self, floor: int) -> None:
        # In numpy, on a view of the array (released before anything can resize it).
        view = np.frombuffer(self.slots, dtype=np.int32)
        view[(view != -1) & (view < floor)] = -1
        del view
