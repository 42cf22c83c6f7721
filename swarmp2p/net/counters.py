"""Counts of everything the network adapter drops or rejects, so that no loss is silent."""

from __future__ import annotations

import threading
from collections import Counter


class DropCounters:
    """A named counter set. Thread-safe increments because libp2p callbacks may run anywhere."""

    # The kinds the adapter reports; listed so dashboards show zeros rather than missing keys.
    KINDS = (
        "gossip_outbound_queue_full",
        "gossip_subscription_queue_full",
        # A full inbox made room for an established peer's message by dropping the newest
        # message of an unknown origin (net/priority_inbox.py).
        "gossip_subscription_evicted_unknown",
        "gossip_rate_limited",
        "gossip_origin_rate_limited",  # one origin key over its allowance (net/origin_limit.py)
        # A connected peer forwarding over its allowance: the messages already read are dropped,
        # and its stream is not read for a while (each such pause counted once).
        "gossip_forwarder_rate_limited",
        "gossip_forwarder_paused",
        # An unknown origin's message delivered here but not relayed: past the relay budget.
        "gossip_relay_unknown_limited",
        "gossip_oversized_publish",
        # Inbound gossip py-libp2p refuses (it only logs them at debug level).
        "gossip_bad_signature",
        "gossip_validator_rejected",
        "gossip_score_gated",
        "gossip_blacklisted",
        "gossip_replayed_own",
        # Deduplicated by py-libp2p's seen-cache: mesh redundancy (each message arrives from
        # several peers) and replays within the cache's TTL. Not a loss; counted so a replay
        # flood shows.
        "gossip_seen_duplicate",
        # A relay not sent: the mesh peer told us it is connected to the message's author, who
        # flood-published it to that peer already (net/neighbours.py). Not a loss.
        "gossip_relay_skipped_origin_neighbour",
        # A relay sent to such a peer after all, as its one backup copy (relay_backup_copy).
        "gossip_relay_backup_copy",
        "gossip_seen_cache_evicted",  # the seen-cache was full: its oldest message id forgotten
        "gossip_rpc_garbage",  # an inbound frame that is not a protobuf RPC: stream and peer dropped
        "gossip_rpc_oversized",  # an inbound RPC over py-libp2p's 1 MiB limit: stream and peer dropped
        # An inbound RPC whose attached signed peer record does not verify or names another peer:
        # py-libp2p ignores the whole RPC and only logs it (net/signed_records.py counts it).
        "gossip_bad_peer_record",
        # Our own messages py-libp2p queued for a peer whose pubsub stream was not open yet, then
        # dropped: older than its TTL (30 s) or over its cap (100 per peer) when the queue is pruned.
        "gossip_pending_dropped",
        # A published message none of whose topics we subscribe to: py-libp2p skips it unread.
        "gossip_unsubscribed_topic",
        # Messages in gossip RPC frames that had arrived whole but were never read when the
        # stream ended (its peer left while we paused reading it): py-libp2p discards a closed
        # connection's buffers (net/gossip.py `_WatchedStream.unread_messages`).
        "gossip_unread_when_peer_left",
        "inbound_channel_full",
        "inbound_channel_evicted_unknown",
        "request_garbage",
        "request_oversized",
        "request_timeout",
        "request_handler_error",
        "response_oversized",
        "response_garbage",
        "peer_exchange_garbage",
        # A connection whose TCP socket refused the shorter loss recovery (net/tcp_recovery.py):
        # a kernel older than 6.15. Not a loss; it recovers at the kernel's pace.
        "tcp_recovery_unsupported",
        "dht_rejected",  # every refused record; the kinds below say why
        "dht_foreign_namespace",  # a key outside /<our namespace>/ (py-libp2p refused it silently)
        "dht_malformed_key",
        "dht_oversized",
        "dht_malformed_record",  # the node's record check failed (not an envelope, wrong signer)
        "dht_stale_round",  # a record for a round long past (see LibP2PNetwork.set_record_rounds)
        "dht_future_round",  # a record for a round far ahead of ours
        # Refused inside py-libp2p's DHT handler before our validator: a PUT_VALUE without a
        # record, empty or non-UTF-8 key, record key unlike the message key, empty or oversized
        # record, a lookup with an empty or overlong key, unparsable message.
        "dht_refused_by_libp2p",
        # A FIND_NODE whose key is not a peer id, refused by py-libp2p's handler: what py-libp2p's
        # own put_value sends to find a record key's closest peers (net/dht.py). A lookup hop
        # lost, not a record: not in `dht_rejected`.
        "dht_lookup_refused",
        # A record whose libp2p record signature (author + signature fields) does not verify:
        # py-libp2p refuses it after our validator accepted its key and value, or drops it from
        # the store before serving it.
        "dht_bad_record_signature",
        # The bounded record store (net/dht.py BoundedValueStore) making room or expiring.
        "dht_stream_idle_reset",  # an inbound DHT stream idle past dht_stream_idle_s: reset
        "dht_evicted_owner_cap",
        "dht_evicted_full",
        "dht_expired",
        "dht_replication_failed",
        "dht_replication_timeout",
        "dht_replication_skipped",
        # Connection health, not lost data: failed dials, closed connections py-libp2p still
        # listed (dropped so the peer can be re-dialed), stream opens retried after that.
        "dial_failed",
        "stale_connections_dropped",
        "stream_retried",
        "peer_forgotten",  # unreachable for forget_unreachable_after_s: no longer dialed
        "peer_book_evicted",  # the peer book was full: a never-reached / failing peer made room
        "peer_book_full",  # the peer book was full of pinned and connected peers: not learned
        # py-libp2p's peerstore entries (and its auto-connector's cooldowns) of peers that are
        # neither in the peer book, nor connected, nor in the DHT's routing table.
        "peerstore_pruned",
    )
    NOT_DATA_LOSS = frozenset(
        {
            "dial_failed",
            "stale_connections_dropped",
            "stream_retried",
            "peer_forgotten",
            "peer_book_evicted",
            "peerstore_pruned",
            "gossip_seen_duplicate",
            "gossip_relay_skipped_origin_neighbour",
            "gossip_relay_backup_copy",
            "gossip_forwarder_paused",
            "dht_stream_idle_reset",
            "dht_lookup_refused",
            "dht_expired",
        }
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter({kind: 0 for kind in self.KINDS})

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] += n

    def __getitem__(self, kind: str) -> int:
        with self._lock:
            return self._counts[kind]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)
