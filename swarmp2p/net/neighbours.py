"""Whom our peers are connected to, as they told us in peer exchange: so that a relay can skip
the peers that already have a message from its author.

With flood publishing (gossipsub v1.1's `floodPublish`, our default and go-libp2p's) the author
of a message sends it straight to every subscribed peer it is connected to. A relay that then
forwards it along its mesh sends every mesh peer that is also connected to the author a copy it
already holds: at 20 processes on 2 cores each peer received every 10 KB message ~7 times, and
each copy went through Python noise, yamux and protobuf only to be dropped by the seen-cache
(docs/benchmarks.md). Switching relays of others' messages off altogether cut the CPU per
process ~2.3x in that bench (an upper bound); skipping only those peers, with the IHAVEs that
keep it safe (net/gossip_router.py), ~1.7x (0.72-0.81 -> 0.40-0.50 CPU-s per process).

What we know is what each peer listed in its last peer-exchange answer (its connected peers,
`PeerExchange._encode_peer_exchange`), so it can be stale. The errors are one-sided on purpose:
- a connection made since the answer is missing from it, so we forward (a duplicate, as before);
- a connection closed since the answer would make us skip a forward the peer needed. Entries
  therefore expire after `ttl_s`, are dropped when our own connection to the peer closes, and
  the adapter asks its mesh peers again before that (`due_in`). A message skipped this way is
  still announced to the peer by IHAVE (net/gossip_router.py), so it arrives a few heartbeats late.

A peer is asked again soon while its answers change (after `first_refresh_s`, then doubling)
and at half the TTL once an answer repeats the previous one: a peer that has just joined lists
the few connections it has so far, and until it is asked again every relay to it is sent (the
duplicates this left were ~15% of the deliveries in a 60 s bench run with only the TTL
refresh), while a settled peer's answer is the same each time and each ask opens a stream.
"""

from __future__ import annotations

import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable


def backup_relay(message_id: bytes, candidates: Iterable[bytes]) -> bytes | None:
    """The one peer among `candidates` (a receiver's neighbours, less the author and itself) that
    sends the receiver a backup copy of the message (`NetworkSettings.relay_backup_copy`): the
    lowest CRC-32 of (message id, peer id). Every relay computes it from the same receiver's
    list, so they agree on who it is without a word between them, and a different message
    picks a different peer (the load spreads). None when there is no candidate."""
    best: bytes | None = None
    best_key = -1
    for peer in candidates:
        key = zlib.crc32(peer, zlib.crc32(message_id))
        if best is None or key < best_key or (key == best_key and peer < best):
            best, best_key = peer, key
    return best


class NeighbourMap:
    """peer id bytes -> (the peer ids it said it is connected to, when it said so); bounded."""

    def __init__(
        self,
        ttl_s: float,
        max_peers: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        first_refresh_s: float = 5.0,
    ) -> None:
        if ttl_s <= 0 or max_peers <= 0 or first_refresh_s <= 0:
            raise ValueError("ttl_s, max_peers and first_refresh_s must be > 0")
        self.ttl_s = ttl_s
        self.max_peers = max_peers
        self.first_refresh_s = first_refresh_s
        self._clock = clock
        # peer -> (its neighbours, when it told us, seconds until it is to be asked again)
        self._entries: OrderedDict[bytes, tuple[frozenset[bytes], float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def learn(self, peer: bytes, neighbours: Iterable[bytes]) -> None:
        """`peer` just told us it is connected to `neighbours` (replaces what it said before)."""
        previous = self._entries.pop(peer, None)
        told = frozenset(neighbours)
        settled_s = self.ttl_s / 2
        if previous is None:
            refresh_s = min(self.first_refresh_s, settled_s)
        elif previous[0] == told:
            refresh_s = settled_s
        else:
            refresh_s = min(previous[2] * 2, settled_s)
        self._entries[peer] = (told, self._clock(), refresh_s)
        while len(self._entries) > self.max_peers:
            self._entries.popitem(last=False)  # the least recently told

    def forget(self, peer: bytes) -> None:
        """Our connection to `peer` closed: whatever it told us may no longer hold."""
        self._entries.pop(peer, None)

    def keep_only(self, peers: set[bytes]) -> None:
        """Forget every peer outside `peers` (those we are connected to now). Upkeep calls this
        on each tick, so an entry goes with its connection even when the connection came and
        went between two ticks (a peer tells us its neighbours as soon as it connects)."""
        for peer in [p for p in self._entries if p not in peers]:
            del self._entries[peer]

    def connected(self, peer: bytes, other: bytes) -> bool:
        """Whether `peer` told us, less than `ttl_s` ago, that it is connected to `other`."""
        entry = self._entries.get(peer)
        if entry is None:
            return False
        neighbours, told_at, _ = entry
        if self._clock() - told_at >= self.ttl_s:
            del self._entries[peer]
            return False
        return other in neighbours

    def linked(self, peer: bytes, other: bytes) -> bool:
        """Whether either of the two told us (within `ttl_s`) that it is connected to the other.
        A connection has two ends, and each answer covers one: the author of a message is asked
        too, and its answer lists the peers it flood-published to. In a swarm that has just
        formed, a peer's answer predates its newest connections, and the other end's answer
        often does not. That round carries most of a run's duplicate relays and was the slowest
        at 20 processes (0.5-0.9 s against ~0.3 s); counting both ends, 0.45-0.57 s
        (docs/benchmarks.md, "Idle wake-ups")."""
        return self.connected(peer, other) or self.connected(other, peer)

    def linked_to(self, other: bytes, peers: Iterable[bytes]) -> list[bytes]:
        """The peers in `peers` that are `linked` with `other`, in their order: what a relay asks
        about its targets and a message's author, with one clock read and one look at the
        author's answer instead of up to two of each per target."""
        now = self._clock()
        entries = self._entries
        entry = entries.get(other)
        told_by_other: frozenset[bytes] = frozenset()
        if entry is not None:
            if now - entry[1] >= self.ttl_s:
                del entries[other]
            else:
                told_by_other = entry[0]
        linked = []
        for peer in peers:
            if peer in told_by_other:
                linked.append(peer)
                continue
            entry = entries.get(peer)
            if entry is None:
                continue
            if now - entry[1] >= self.ttl_s:
                del entries[peer]
            elif other in entry[0]:
                linked.append(peer)
        return linked

    def neighbours_of(self, peer: bytes) -> frozenset[bytes] | None:
        """What `peer` told us, less than `ttl_s` ago, it is connected to (None: nothing live)."""
        entry = self._entries.get(peer)
        if entry is None or self._clock() - entry[1] >= self.ttl_s:
            return None
        return entry[0]

    def age(self, peer: bytes) -> float | None:
        """Seconds since `peer` last told us its neighbours (None: never, or forgotten)."""
        entry = self._entries.get(peer)
        return None if entry is None else self._clock() - entry[1]

    def due_in(self, peer: bytes) -> float:
        """Seconds until `peer` should be asked again (<= 0: now; never told or forgotten: 0):
        `first_refresh_s` after its first answer, doubling while its answers change, half the
        TTL once one repeats the last (so a live entry is renewed before it expires)."""
        entry = self._entries.get(peer)
        if entry is None:
            return 0.0
        _, told_at, refresh_s = entry
        return told_at + refresh_s - self._clock()
