"""Which peers we know, where they listen, and when to dial them next (sans-IO: time is an argument).

Connection upkeep keeps the swarm from collapsing into a star around the bootstrap peer: every
peer learned through peer exchange, hellos or identify goes in the book, and the upkeep loop
dials those that are due, backing off exponentially on each failure so a dead peer costs little.

A peer that stays unreachable for `forget_after_s` (and at least `forget_after_failures` dials)
is forgotten: it left the swarm, and re-dialing it every `backoff_max_s` forever only burns
dials (a 17-minute run counted 334 failed dials to peers long gone). It comes back only when
something names it again (a peer exchange lists only peers the sender is connected to, so a
gone peer is not taught back). Bootstrap peers are pinned and never forgotten. Dials are also
rate-limited as a whole (a token bucket), however many peers fall due at once.

A peer we never reached (learned from a hello or peer exchange, never connected) is held to a
much shorter leash when `forget_never_reached_after_s` is set (the adapter sets it): forgotten
after `forget_never_reached_failures` failed dials spread over that long (sybil hellos
advertising dead addresses were dialed 5,036 times in one attack). When the book is full, a
never-reached peer is evicted first (then the one with most failures); pinned and connected
peers never are. Both are counted.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import attrs


@attrs.define
class _Entry:
    addrs: tuple[str, ...]
    pinned: bool  # bootstrap peers: never forgotten, always re-dialed
    connected: bool = False
    reached: bool = False  # ever connected
    failures: int = 0
    next_dial_s: float = 0.0
    down_since_s: float | None = None  # unreachable since (lost, or first failed dial); None: fine


class PeerBook:
    def __init__(
        self,
        local_peer_id: str,
        *,
        backoff_initial_s: float,
        backoff_max_s: float,
        max_known: int,
        max_addrs_per_peer: int = 8,
        forget_after_s: float = 600.0,
        forget_after_failures: int = 3,
        forget_never_reached_after_s: float | None = None,
        forget_never_reached_failures: int = 2,
        max_dials_per_s: float = 8.0,
        dial_burst: int = 32,
    ) -> None:
        if backoff_initial_s <= 0 or backoff_max_s < backoff_initial_s:
            raise ValueError("need 0 < backoff_initial_s <= backoff_max_s")
        if forget_after_s <= 0 or max_dials_per_s <= 0 or dial_burst < 1:
            raise ValueError("need forget_after_s > 0, max_dials_per_s > 0 and dial_burst >= 1")
        self.local_peer_id = local_peer_id
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.max_known = max_known
        self.max_addrs_per_peer = max_addrs_per_peer
        self.forget_after_s = forget_after_s
        self.forget_after_failures = forget_after_failures
        self.forget_never_reached_after_s = forget_never_reached_after_s
        self.forget_never_reached_failures = forget_never_reached_failures
        self.max_dials_per_s = max_dials_per_s
        self.dial_burst = dial_burst
        self.forgotten = 0  # peers dropped for being unreachable too long
        self.evicted = 0  # peers dropped to make room for a new one
        self._entries: dict[str, _Entry] = {}
        self._dial_tokens = float(dial_burst)
        self._tokens_at_s: float | None = None

    def __contains__(self, peer_id: str) -> bool:
        return peer_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def learn(self, peer_id: str, addrs: tuple[str, ...], *, pinned: bool = False) -> bool:
        """Record (or refresh) where `peer_id` listens. Returns True when the peer is new."""
        if peer_id == self.local_peer_id:
            return False
        addrs = tuple(dict.fromkeys(addrs))[: self.max_addrs_per_peer]
        entry = self._entries.get(peer_id)
        if entry is not None:
            if addrs:
                entry.addrs = addrs
            entry.pinned = entry.pinned or pinned
            return False
        if not addrs:
            return False
        if len(self._entries) >= self.max_known and not self._evict_one():
            return False
        self._entries[peer_id] = _Entry(addrs=addrs, pinned=pinned)
        return True

    def _evict_one(self) -> bool:
        worst: tuple[bool, int] | None = None
        victim = None
        for pid, e in self._entries.items():
            if e.pinned or e.connected:
                continue
            rank = (not e.reached, e.failures)
            if worst is None or rank > worst:
                worst, victim = rank, pid
                if e.failures > 0 and not e.reached:
                    break  # a never-reached peer that failed a dial: no better victim needed
        if victim is None:
            return False
        del self._entries[victim]
        self.evicted += 1
        return True

    def addrs(self, peer_id: str) -> tuple[str, ...]:
        entry = self._entries.get(peer_id)
        return entry.addrs if entry else ()

    def mark_connected(self, peer_id: str) -> None:
        entry = self._entries.get(peer_id)
        if entry is not None:
            entry.connected = True
            entry.reached = True
            entry.failures = 0
            entry.down_since_s = None

    def mark_disconnected(self, peer_id: str, now_s: float) -> None:
        """A live connection went away: try again soon, not immediately (it may be restarting)."""
        entry = self._entries.get(peer_id)
        if entry is not None and entry.connected:
            entry.connected = False
            entry.next_dial_s = now_s + self.backoff_initial_s
            entry.down_since_s = now_s

    def dial_failed(self, peer_id: str, now_s: float) -> float:
        """Record a failed dial; returns the delay before the next attempt (`math.inf` when
        the peer has now been unreachable long enough to be forgotten)."""
        entry = self._entries.get(peer_id)
        if entry is None:
            return 0.0
        entry.connected = False
        entry.failures += 1
        if entry.down_since_s is None:
            entry.down_since_s = now_s
        down_for = now_s - entry.down_since_s
        if not entry.pinned and (
            (entry.failures >= self.forget_after_failures and down_for >= self.forget_after_s)
            or (
                not entry.reached
                and self.forget_never_reached_after_s is not None
                and entry.failures >= self.forget_never_reached_failures
                and down_for >= self.forget_never_reached_after_s
            )
        ):
            del self._entries[peer_id]
            self.forgotten += 1
            return math.inf
        delay = min(self.backoff_max_s, self.backoff_initial_s * 2 ** min(entry.failures - 1, 30))
        entry.next_dial_s = now_s + delay
        return delay

    def due_for_dial(self, now_s: float, limit: int, *, skip: Collection[str] = ()) -> list[str]:
        """Disconnected peers whose backoff has expired, bootstrap peers first, then fewest
        failures; at most `limit`, and no more than the dial budget allows (each peer returned
        is taken to be dialed). `skip`: peers not to return (a dial already in flight)."""
        self._refill_tokens(now_s)
        due = [
            (not e.pinned, e.failures, pid)
            for pid, e in self._entries.items()
            if not e.connected and e.next_dial_s <= now_s and pid not in skip
        ]
        due.sort()
        take = max(0, min(limit, int(self._dial_tokens)))
        chosen = [pid for _, _, pid in due[:take]]
        self._dial_tokens -= len(chosen)
        return chosen

    def _refill_tokens(self, now_s: float) -> None:
        if self._tokens_at_s is not None and now_s > self._tokens_at_s:
            elapsed = now_s - self._tokens_at_s
            self._dial_tokens = min(
                float(self.dial_burst), self._dial_tokens + elapsed * self.max_dials_per_s
            )
        if self._tokens_at_s is None or now_s > self._tokens_at_s:
            self._tokens_at_s = now_s

    def known(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(pid, e.addrs) for pid, e in self._entries.items()]

    def connected(self) -> list[str]:
        return [pid for pid, e in self._entries.items() if e.connected]
