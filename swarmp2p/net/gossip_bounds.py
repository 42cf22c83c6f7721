"""The tables py-libp2p's Pubsub keeps per peer and per message, bounded and counted: the outbound
RPC queues (larger, our own messages first), the seen-cache (capped) and the validation cache
(refusals only). gossip.py's CountingPubsub installs them."""

from __future__ import annotations

import time

from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import ValidationCache, ValidationResult
from libp2p.pubsub.rpc_queue import RpcQueue
from libp2p.tools.timed_cache.last_seen_cache import LastSeenCache

from swarmp2p.net.counters import DropCounters


class SizedOutboundQueues(dict[ID, RpcQueue]):
    """Pubsub's peer -> outbound queue map. Pubsub creates each queue with a hard-coded 32-slot
    limit; this map enlarges every queue as it is stored and counts rejected pushes.

    Our own messages go out ahead of what we relay: an RPC that carries one is queued in the
    priority lane (py-libp2p's, where gossipsub puts control messages), and into a full queue
    it goes in place of the newest relayed RPC (that one is dropped, counted). Measured in the
    flood test on one busy core: the queue to the other honest peer held 50-560 RPCs of an
    attacker's relayed announcements, our own announcement waited 4-5 s behind them, past the
    other peer's collect deadline, and both lost the round (tests/net/test_net_gossip_relay.py).
    Only our own: anyone can sign relayed messages, so nothing else may jump the queue."""

    def __init__(self, max_size: int, counters: DropCounters, my_id: ID) -> None:
        super().__init__()
        self._max_size = max_size
        self._counters = counters
        self._my_id_bytes = my_id.to_bytes()

    def __setitem__(self, peer_id: ID, queue: RpcQueue) -> None:
        queue._queue.max_size = self._max_size
        original_push = queue.push
        counters = self._counters
        mine = self._my_id_bytes

        def counting_push(rpc: rpc_pb2.RPC, priority: bool = False) -> bool:
            if not priority and any(message.from_id == mine for message in rpc.publish):
                priority = True
                lanes = queue._queue
                if len(lanes) >= lanes.max_size and lanes._non_priority and not queue.closed:
                    lanes._non_priority.pop()  # the newest relayed RPC makes room
                    counters.add("gossip_outbound_queue_full")
            accepted = original_push(rpc, priority)
            if not accepted and not queue.closed:
                counters.add("gossip_outbound_queue_full")
            return accepted

        queue.push = counting_push  # type: ignore[method-assign]
        super().__setitem__(peer_id, queue)


class CappedSeenCache(LastSeenCache):
    """py-libp2p's seen-cache (message id -> expiry, swept every minute) with a size cap.

    Bounded only by time, a flood grew it by one entry per message for the whole TTL (at the
    ~7,600 messages/s measured in an attack, near a million entries). Over the cap the oldest
    entry goes, counted: a replay of an evicted id is no longer deduplicated here, so it meets
    the topic validators and the node's own duplicate checks again."""

    def __init__(self, ttl: int, sweep_interval: int, max_entries: int, counters: DropCounters) -> None:
        super().__init__(ttl, sweep_interval)
        self.max_entries = max_entries
        self._counters = counters

    def add(self, key: bytes) -> bool:
        with self.lock:
            is_new = key not in self.cache
            if is_new and len(self.cache) >= self.max_entries:
                del self.cache[next(iter(self.cache))]
                self._counters.add("gossip_seen_cache_evicted")
            self.cache[key] = int(time.time()) + self.ttl
            return is_new


class RefusalsOnlyValidationCache(ValidationCache):
    """py-libp2p's per-message-id cache of validator verdicts, keeping only refusals.

    A cached "valid" let a replay skip our topic validators: an old hello whose id the
    seen-cache had forgotten (its cap evicted it, or its TTL passed) within the validation
    cache's TTL was delivered and relayed again without its freshness check
    (tests/net/test_net_attacks.py). Our validators depend on the time (a hello's round window,
    the newest hello per peer), so a verdict of "valid" does not keep; a refusal does, and
    repeats of a refused message are refused from the cache as before."""

    def put(self, msg_id: bytes, result: ValidationResult) -> None:
        if not result.is_valid:
            super().put(msg_id, result)
