"""Settings of the libp2p network adapter; defaults chosen against py-libp2p 0.8.1's silent-loss traps."""

from __future__ import annotations

import attrs

from protocol.limits import MAX_PUSHED_ENVELOPE_BYTES

DEFAULT_LISTEN = ("/ip4/127.0.0.1/tcp/0",)


def _positive(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class NetworkSettings:
    """How one libp2p host listens, dials, gossips and serves direct requests.

    Defaults are picked so that nothing is dropped silently on a small swarm:
    py-libp2p's gossipsub limits each peer to 10 messages/s per topic (own publishes included),
    queues 32 RPCs per peer and 32 messages per subscription, and heartbeats every 120 s.
    """

    listen: tuple[str, ...] = DEFAULT_LISTEN
    bootstrap: tuple[str, ...] = ()

    # gossipsub
    heartbeat_s: float = attrs.field(default=1.0, validator=_positive)
    mesh_degree: int = 6
    mesh_degree_low: int = 4
    mesh_degree_high: int = 12
    # Own messages to every subscribed peer (one hop), forwarded ones along the mesh.
    flood_publish: bool = True
    # A relay skips the mesh peers that told us (in peer exchange) they are connected to the
    # message's author: the author flood-published it to them already (net/neighbours.py). At
    # 20 processes x 10 KB this took ~5 of every 6 deliveries off the wire. What a peer told us
    # is trusted for `neighbour_ttl_s`; mesh peers are asked again 5 s after their first answer,
    # then at doubling intervals while their answers change, and at half of it once they repeat.
    skip_relay_to_origin_neighbours: bool = True
    # With the skip: still send ONE copy of each message to each skipped peer, from the relay a
    # hash of (message, relay) picks among that peer's neighbours (neighbours.backup_relay). A
    # second path for a peer whose copy from the author lost a packet: at 5 processes, 100 ms
    # RTT and 1% loss, relaying to everyone took the p99 from +4.8 to +1.2 RTT over loopback,
    # but at 20 processes on 2 cores the duplicates' CPU cost more than that (docs/benchmarks.md,
    # "What the relay skip costs on a lossy path"). Off until measured at 20 processes on more
    # cores; a node turns it on with `[node] relay_backup_copy = true`.
    relay_backup_copy: bool = False
    neighbour_ttl_s: float = attrs.field(default=120.0, validator=_positive)
    # A node tells its mesh peers whom it is connected to (one peer exchange each) once its
    # connections have stopped changing for an upkeep tick, and at least this often while they
    # keep changing (a swarm that is joining), never twice within 2 s; upkeep.py `tell_due`.
    tell_neighbours_max_wait_s: float = attrs.field(default=5.0, validator=_positive)
    # Raised from 10/s: a round's announcements from 20 peers arrive in one burst.
    max_messages_per_topic_per_second: float = attrs.field(default=1000.0, validator=_positive)
    # Per origin key, checked before signatures are verified (net/origin_limit.py): a burst,
    # then a steady rate. An honest key sends about one announcement a round and a hello every
    # few seconds.
    origin_rate_per_s: float = attrs.field(default=10.0, validator=_positive)
    origin_burst: float = attrs.field(default=50.0, validator=_positive)
    # Per connected peer that forwards gossip to us, checked first (before the seen-cache): past
    # it, that peer's stream is not read for a while (net/gossip.py `_forwarder_allowed`). Keys are
    # free, so the per-origin limit alone let one host with 500 throwaway keys keep a node busy
    # (tests/net/test_net_attacks.py). An honest neighbour relays every peer's announcements and
    # hellos: tens a second in a 100-peer swarm.
    forwarder_rate_per_s: float = attrs.field(default=200.0, validator=_positive)
    forwarder_burst: float = attrs.field(default=200.0, validator=_positive)
    # Messages of unknown origins (neither connected nor vouched for) this node relays, over all
    # its neighbours: past it they are still delivered here, not forwarded (counted
    # `gossip_relay_unknown_limited`). Half the forwarder allowance, so our relaying never gets
    # us paused by a neighbour; far above an honest swarm's joiners. Under a flood from throwaway
    # keys, relaying it all put hundreds of frames ahead of our own announcement on the link to
    # each honest neighbour, and both honest peers lost a round (tests/net/test_net_gossip_relay.py).
    relay_unknown_rate_per_s: float = attrs.field(default=100.0, validator=_positive)
    relay_unknown_burst: float = attrs.field(default=200.0, validator=_positive)
    outbound_queue_size: int = attrs.field(default=4096, validator=_positive)
    subscription_queue_size: int = attrs.field(default=4096, validator=_positive)
    # Gossip carries announcements and hellos only; py-libp2p drops RPCs over 1 MiB without a word,
    # so publish refuses anything near that limit loudly instead.
    max_gossip_bytes: int = attrs.field(default=512 * 1024, validator=_positive)
    # Batches up to this size are pushed inside their announcement (swarmp2p/pushed.py) instead of
    # fetched by every peer over a stream of its own: at 20 processes x 10 KB that took the
    # round's p99 from 7.0 to 2.8 s (docs/benchmarks.md). Each mesh relay carries the whole
    # batch, so big ones are still fetched: the default keeps a round's pushes to about D x
    # peers x 64 KiB per node. 0 turns pushing off.
    push_max_bytes: int = attrs.field(default=64 * 1024, validator=attrs.validators.ge(0))
    # py-libp2p queues every publish for each connected peer that has not (yet) subscribed to the
    # topic, for 30 s by default, and hands the queue over when that peer subscribes: meant for
    # the identify/subscription race (well under a second), it gave every joiner the last 30 s
    # of stale announcements. A few seconds covers the race and nothing older.
    pending_gossip_ttl_s: float = attrs.field(default=3.0, validator=_positive)
    # Message ids py-libp2p remembers (for its 120 s seen TTL) to drop duplicates: capped, so a
    # flood of distinct messages cannot grow it without bound (oldest evicted, counted).
    max_seen_messages: int = attrs.field(default=65536, validator=_positive)

    # direct request/response (/swarmp2p/fetch/1.0.0)
    max_request_bytes: int = attrs.field(default=64 * 1024, validator=_positive)
    max_response_bytes: int = attrs.field(default=8 * 1024 * 1024, validator=_positive)
    handler_timeout_s: float = attrs.field(default=20.0, validator=_positive)
    dial_timeout_s: float = attrs.field(default=5.0, validator=_positive)
    # Each TCP connection's retransmission-timeout floor and delayed-ACK ceiling (Linux 6.15+;
    # kernel defaults 200 / 200 ms elsewhere): a packet lost at a round's tail is resent after
    # srtt + 50 ms instead of srtt + 200 (net/tcp_recovery.py). 0 keeps the kernel's.
    tcp_rto_min_ms: float = attrs.field(default=50.0, validator=attrs.validators.ge(0))
    tcp_delack_max_ms: float = attrs.field(default=20.0, validator=attrs.validators.ge(0))

    # DHT
    dht_namespace: str = "swarmp2p"
    max_dht_value_bytes: int = attrs.field(default=1024 * 1024 - 4096, validator=_positive)
    dht_timeout_s: float = attrs.field(default=10.0, validator=_positive)
    # An inbound DHT stream with no request for this long is reset: py-libp2p serves only 12 at
    # a time, and streams left open held those slots for ever (net/dht.py).
    dht_stream_idle_s: float = attrs.field(default=10.0, validator=_positive)
    # Background replications of our own puts in flight at once (each is a lookup + stores).
    max_dht_replications: int = attrs.field(default=8, validator=_positive)
    # The local record store is bounded (py-libp2p's kept any signed record 24 h, 50,000 of them):
    # records expire after `dht_record_ttl_s` (a record is one round's batch: worth a few rounds
    # to a late joiner, nothing after), each owner (the key's last segment = the signer) keeps
    # its newest `max_dht_records_per_owner` records within `max_dht_bytes_per_owner`, and the
    # whole store at most `max_dht_records` / `max_dht_bytes`; oldest evicted first, counted.
    dht_record_ttl_s: float = attrs.field(default=600.0, validator=_positive)
    max_dht_records: int = attrs.field(default=4096, validator=_positive)
    max_dht_bytes: int = attrs.field(default=64 * 1024 * 1024, validator=_positive)
    max_dht_records_per_owner: int = attrs.field(default=8, validator=_positive)
    max_dht_bytes_per_owner: int = attrs.field(default=4 * 1024 * 1024, validator=_positive)
    # How often upkeep drops expired records (TTL, or their round: LibP2PNetwork.set_record_rounds).
    dht_sweep_interval_s: float = attrs.field(default=5.0, validator=_positive)

    # connection upkeep
    # Above the swarm sizes we run (<= 20 on one machine): every fetch finds a live connection.
    target_peers: int = attrs.field(default=32, validator=_positive)
    # Upkeep ticks every `upkeep_interval_s` while connections change, and backs off (doubling)
    # to `upkeep_settled_s` while they do not: a lost peer is noticed within that.
    upkeep_interval_s: float = attrs.field(default=0.5, validator=_positive)
    upkeep_settled_s: float = attrs.field(default=4.0, validator=_positive)
    # Peer exchange runs every `peer_exchange_fast_s` while it teaches us new peers, and backs
    # off (doubling) to `peer_exchange_interval_s` once it does not.
    peer_exchange_fast_s: float = attrs.field(default=0.5, validator=_positive)
    peer_exchange_interval_s: float = attrs.field(default=15.0, validator=_positive)
    redial_backoff_initial_s: float = attrs.field(default=0.5, validator=_positive)
    redial_backoff_max_s: float = attrs.field(default=30.0, validator=_positive)
    max_known_peers: int = attrs.field(default=1024, validator=_positive)
    # A peer unreachable this long (and for at least 3 dials) is forgotten until something names
    # it again; bootstrap peers never are. Well above a restart, so a restarting peer is kept.
    forget_unreachable_after_s: float = attrs.field(default=600.0, validator=_positive)
    # A peer we have NEVER reached (its address came from a hello or a peer exchange) is
    # forgotten sooner: after 2 failed dials over this long. Sybil hellos with dead addresses
    # otherwise sat in the book and were dialed for 10 minutes each.
    forget_never_reached_after_s: float = attrs.field(default=60.0, validator=_positive)
    # py-libp2p's peerstore is pruned to the peer book, our connections and the DHT's routing
    # table at each upkeep tick (net/peer_tables.py); an entry is kept this long
    # after its addresses were last added, so that a DHT lookup can still dial the closer peers
    # it has just been told about.
    peerstore_grace_s: float = attrs.field(default=60.0, validator=_positive)
    # Dials started by upkeep, all peers together: a token bucket of `dial_burst` refilled at
    # `max_dials_per_s`. A joiner learning a whole swarm dials `dial_burst` peers at once.
    max_dials_per_s: float = attrs.field(default=8.0, validator=_positive)
    dial_burst: int = attrs.field(default=32, validator=_positive)

    # py-libp2p's own connection manager (ConnectionConfig). Our upkeep above dials and re-dials;
    # libp2p's AutoConnector would do the same work again with go-libp2p's watermarks
    # (min 50 / low 100 / high 300): on a 5-peer swarm it logged "initiating 196 new dials"
    # every 10 s (below min_connections it polls at 10 s) for peers that do not exist. Now
    # min_connections is 0 (it ticks every 30 s) and the watermarks are sized from
    # `target_peers`: a node dials `target_peers` and is dialed by about as many, so pruning
    # starts well above that. `libp2p_auto_connect=False` turns its dialing off entirely (no
    # log line), but measured at 20 idle processes that cost MORE CPU (0.27-0.32 s vs 0.05 s
    # per 15 s, cause not found; docs/node.md), so it stays on by default.
    libp2p_auto_connect: bool = True
    conn_low_watermark: int = attrs.field(
        default=attrs.Factory(lambda self: 2 * self.target_peers, takes_self=True), validator=_positive
    )
    conn_high_watermark: int = attrs.field(
        default=attrs.Factory(lambda self: 4 * self.target_peers, takes_self=True), validator=_positive
    )
    max_connections: int = attrs.field(
        default=attrs.Factory(lambda self: 5 * self.target_peers, takes_self=True), validator=_positive
    )
    # Pass no ConnectionConfig and leave the AutoConnector on: py-libp2p 0.8.1's defaults, kept
    # only so bench/bench_network.py can measure old against new in one run.
    libp2p_default_connection_manager: bool = False

    def __attrs_post_init__(self) -> None:
        if not (0 < self.mesh_degree_low <= self.mesh_degree <= self.mesh_degree_high):
            raise ValueError(
                "gossip mesh degrees must satisfy 0 < low <= degree <= high, got "
                f"{self.mesh_degree_low} / {self.mesh_degree} / {self.mesh_degree_high}"
            )
        if not self.listen:
            raise ValueError("at least one listen multiaddr is required")
        if not (self.conn_low_watermark <= self.conn_high_watermark <= self.max_connections):
            raise ValueError(
                "connection limits must satisfy conn_low_watermark <= conn_high_watermark <= "
                f"max_connections, got {self.conn_low_watermark} / {self.conn_high_watermark} / "
                f"{self.max_connections}"
            )
        if self.target_peers > self.conn_low_watermark:
            raise ValueError(
                f"target_peers ({self.target_peers}) above conn_low_watermark "
                f"({self.conn_low_watermark}): libp2p would prune the connections upkeep dials"
            )
        if self.tcp_rto_min_ms and self.tcp_delack_max_ms >= self.tcp_rto_min_ms:
            raise ValueError(
                f"tcp_delack_max_ms ({self.tcp_delack_max_ms}) must stay below tcp_rto_min_ms "
                f"({self.tcp_rto_min_ms}): a peer's delayed ACK would make us retransmit for nothing"
            )
        if self.push_max_bytes > MAX_PUSHED_ENVELOPE_BYTES:
            raise ValueError(
                f"push_max_bytes ({self.push_max_bytes}) exceeds the protocol's "
                f"{MAX_PUSHED_ENVELOPE_BYTES} for a pushed batch"
            )
        if self.push_max_bytes > self.max_gossip_bytes - 4096:
            raise ValueError(
                f"push_max_bytes ({self.push_max_bytes}) must leave room for the announcement "
                f"under max_gossip_bytes ({self.max_gossip_bytes})"
            )
        if self.max_gossip_bytes > 1024 * 1024 - 16 * 1024:
            raise ValueError("max_gossip_bytes must leave headroom under py-libp2p's 1 MiB RPC limit")
