"""Gossip checks run inside gossipsub's validator, before a message is delivered or forwarded
(`LibP2PNetwork.set_gossip_validator`): what fails them is never relayed to other peers.

- `announcement_check`: the envelope opens (size, schema, signature), holds a
  RolloutAnnouncement signed by the gossip origin, for our swarm and a round near ours. A
  batch pushed along (swarmp2p/pushed.py) must be the one the announcement names (its
  sha256 is the signed digest): a relay cannot swap it.
  The node's Peer repeats these checks on delivery (it counts and blames by reason), so the
  announce topic is registered with `deliver_rejected=True`: the validator only stops relaying.
- `HelloGuard`: a hello must open (signed by the origin, our protocol version) and be fresh.
  A Hello carries `current_round` (signed): the round its author was in. That is a coarse
  timestamp on the wire already, so freshness needs no new field (the codec is strict: an
  added field would make every older peer reject every newer hello as `extra_key`): a hello
  more than `window_rounds` rounds older than ours is stale, and one older than the newest
  hello we accepted from the same peer is a replay. The per-peer table is capped and expires.
"""

from __future__ import annotations

import time
from collections.abc import Callable, MutableMapping
from typing import Any

RoundClock = Callable[[], int | None]
"""The round this node is in now (None or negative: not known / before genesis)."""


def announcement_check(
    swarm_id: str, current_round: RoundClock, max_bytes: int, *, window_rounds: int = 1
) -> Callable[[str, bytes], str | None]:
    """A gossip check for the announce topic (see the module doc). Reasons are the Peer's."""
    import hashlib

    from protocol.envelope import open_envelope
    from protocol.errors import ProtocolError
    from protocol.messages import RolloutAnnouncement
    from swarmp2p.pushed import unwrap

    def check(origin: str, payload: bytes) -> str | None:
        try:
            data, pushed = unwrap(payload)
        except ProtocolError as error:
            return error.reason
        if len(data) > max_bytes:
            return "oversized"
        try:
            opened = open_envelope(data, max_size=max_bytes)
        except ProtocolError as error:
            return error.reason
        announcement = opened.message
        if not isinstance(announcement, RolloutAnnouncement):
            return "wrong_kind"
        if opened.signer != origin:
            return "sender_mismatch"
        if announcement.swarm_id != swarm_id:
            return "wrong_swarm"
        if pushed is not None and hashlib.sha256(pushed).digest() != announcement.batch_digest:
            return "digest_mismatch"
        now = current_round()
        if now is not None and now >= 0:
            if announcement.round < now - window_rounds:
                return "stale_round"
            if announcement.round > now + window_rounds:
                return "future_round"
        return None

    return check


class HelloGuard:
    """The hello topic's gossip check: opens the hello and holds it to freshness.

    `open_hello(data, origin)` returns the Hello or raises ValueError (swarmp2p.hello's).
    Outcomes are counted into `stats` (the node's hello counters, shown in /api/status):
    `hellos_rejected` for every rejection, plus `hellos_invalid`, `hellos_stale` or
    `hellos_replayed` for why."""

    def __init__(
        self,
        open_hello: Callable[[bytes, str], Any],
        current_round: RoundClock,
        stats: MutableMapping[str, int],
        *,
        window_rounds: int = 2,
        max_peers: int = 4096,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_rounds < 0 or max_peers < 1 or ttl_s <= 0:
            raise ValueError("need window_rounds >= 0, max_peers >= 1 and ttl_s > 0")
        self._open = open_hello
        self._current_round = current_round
        self.stats = stats
        self.window_rounds = window_rounds
        self.max_peers = max_peers
        self.ttl_s = ttl_s
        self._clock = clock
        # peer id -> (newest current_round accepted, when): insertion order = least recent first.
        self._newest: dict[str, tuple[int, float]] = {}
        for key in ("hellos_invalid", "hellos_stale", "hellos_replayed", "hello_peers_evicted"):
            stats.setdefault(key, 0)

    def __len__(self) -> int:
        return len(self._newest)

    def _reject(self, why: str) -> str:
        self.stats["hellos_rejected"] = self.stats.get("hellos_rejected", 0) + 1
        self.stats[f"hellos_{why}"] = self.stats.get(f"hellos_{why}", 0) + 1
        return why

    def check(self, origin: str, data: bytes) -> str | None:
        try:
            hello = self._open(data, origin)
        except ValueError:
            return self._reject("invalid")
        return self.check_round(origin, int(hello.current_round))

    def check_round(self, origin: str, hello_round: int) -> str | None:
        now = self._current_round()
        if now is not None and now >= 0 and hello_round < now - self.window_rounds:
            return self._reject("stale")
        seen_at = self._clock()
        newest = self._newest.pop(origin, None)
        if newest is not None and seen_at - newest[1] <= self.ttl_s and hello_round < newest[0]:
            self._newest[origin] = newest  # kept, and now the most recent
            return self._reject("replayed")
        self._newest[origin] = (max(hello_round, newest[0]) if newest else hello_round, seen_at)
        self._prune(seen_at)
        return None

    def _prune(self, now: float) -> None:
        while self._newest:
            oldest, (_, seen_at) = next(iter(self._newest.items()))
            over = len(self._newest) > self.max_peers
            if not over and now - seen_at <= self.ttl_s:
                return
            del self._newest[oldest]
            if over:
                self.stats["hello_peers_evicted"] = self.stats.get("hello_peers_evicted", 0) + 1


def batch_record_round(key: str) -> int | None:
    """The round of a batch record key "/<namespace>/<swarm>/<round>/<stage>/<peer>"
    (swarmp2p.peer.batch_dht_key); None for any other key."""
    segments = key.split("/")
    if len(segments) != 6 or not segments[3].isdigit() or len(segments[3]) > 18:
        return None
    return int(segments[3])


def install_gossip_checks(
    network: Any,
    *,
    swarm_id: str,
    hello_topic: str,
    announce_topic: str,
    current_round: RoundClock,
    open_hello: Callable[[bytes, str], Any],
    hello_stats: MutableMapping[str, int],
    max_announce_bytes: int,
) -> HelloGuard | None:
    """Register the node's gossip checks on a network that supports them (the libp2p adapter;
    the simulator's network has no relaying to stop), and make its DHT records expire with
    their round. Returns the hello guard, if installed."""
    set_rounds = getattr(network, "set_record_rounds", None)
    if set_rounds is not None:
        set_rounds(batch_record_round, current_round)
    set_validator = getattr(network, "set_gossip_validator", None)
    if set_validator is None:
        return None
    guard = HelloGuard(open_hello, current_round, hello_stats)
    set_validator(hello_topic, guard.check)
    set_validator(
        announce_topic,
        announcement_check(swarm_id, current_round, max_announce_bytes),
        deliver_rejected=True,
    )
    return guard
