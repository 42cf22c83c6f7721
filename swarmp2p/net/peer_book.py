"""Which peers we know, where they listen, and when to dial them next (sans-IO: time is an argument).

Connection upkeep keeps the swarm from collapsing into a star around the bootstrap peer: every
peer learned through peer exchange, hellos or identify goes in the book, and the upkeep loop
dials those that are due, backing off exponentially on each failure so a dead peer costs little.
"""

from __future__ import annotations

import attrs


@attrs.define
class _Entry:
    addrs: tuple[str, ...]
    pinned: bool  # bootstrap peers: never forgotten, always re-dialed
    connected: bool = False
    failures: int = 0
    next_dial_s: float = 0.0


class PeerBook:
    def __init__(
        self,
        local_peer_id: str,
        *,
        backoff_initial_s: float,
        backoff_max_s: float,
        max_known: int,
        max_addrs_per_peer: int = 8,
    ) -> None:
        if backoff_initial_s <= 0 or backoff_max_s < backoff_initial_s:
            raise ValueError("need 0 < backoff_initial_s <= backoff_max_s")
        self.local_peer_id = local_peer_id
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.max_known = max_known
        self.max_addrs_per_peer = max_addrs_per_peer
        self._entries: dict[str, _Entry] = {}

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
        candidates = [
            (e.failures, pid) for pid, e in self._entries.items() if not e.pinned and not e.connected
        ]
        if not candidates:
            return False
        _, worst = max(candidates)
        del self._entries[worst]
        return True

    def addrs(self, peer_id: str) -> tuple[str, ...]:
        entry = self._entries.get(peer_id)
        return entry.addrs if entry else ()

    def mark_connected(self, peer_id: str) -> None:
        entry = self._entries.get(peer_id)
        if entry is not None:
            entry.connected = True
            entry.failures = 0

    def mark_disconnected(self, peer_id: str, now_s: float) -> None:
        """A live connection went away: try again soon, not immediately (it may be restarting)."""
        entry = self._entries.get(peer_id)
        if entry is not None and entry.connected:
            entry.connected = False
            entry.next_dial_s = now_s + self.backoff_initial_s

    def dial_failed(self, peer_id: str, now_s: float) -> float:
        """Record a failed dial; returns the delay before the next attempt."""
        entry = self._entries.get(peer_id)
        if entry is None:
            return 0.0
        entry.connected = False
        entry.failures += 1
        delay = min(self.backoff_max_s, self.backoff_initial_s * 2 ** min(entry.failures - 1, 30))
        entry.next_dial_s = now_s + delay
        return delay

    def due_for_dial(self, now_s: float, limit: int) -> list[str]:
        """Disconnected peers whose backoff has expired: bootstrap peers first, then fewest failures."""
        due = [
            (not e.pinned, e.failures, pid)
            for pid, e in self._entries.items()
            if not e.connected and e.next_dial_s <= now_s
        ]
        due.sort()
        return [pid for _, _, pid in due[: max(0, limit)]]

    def known(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(pid, e.addrs) for pid, e in self._entries.items()]

    def connected(self) -> list[str]:
        return [pid for pid, e in self._entries.items() if e.connected]
