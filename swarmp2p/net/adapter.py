"""The libp2p NetworkPort adapter: one py-libp2p host with gossipsub, a Kademlia DHT, direct
request/response protocols and connection upkeep.

Its rooms: host_build.py builds the host; request_response.py serves and sends the fetch and
hello protocols; peer_exchange.py runs peer exchange (who is connected to whom); upkeep.py holds
the rules of upkeep, dialing and exchange as plain functions; peer_tables.py prunes
py-libp2p's per-peer tables; peer_addrs.py parses peer ids and addresses. Here: the NetworkPort
surface (gossip, DHT, requests), dialing and the upkeep tick that carries out upkeep.py's
decisions, and running it all (`open_libp2p_network`).

All payloads are opaque bytes here: decoding and validating messages is the node's job
(`protocol.codec`), the adapter only guarantees sizes, timeouts and that garbage never crashes it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import multiaddr
import trio
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.kad_dht import KadDHT
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.tools.anyio_service import background_trio_service

from swarmp2p.net import upkeep
from swarmp2p.net.counters import DropCounters
from swarmp2p.net.dht import BoundedValueStore, RecordRounds, SwarmRecordValidator, namespaced_key
from swarmp2p.net.gossip import CountingPubsub
from swarmp2p.net.host_build import build_host, quiet_auto_connector
from swarmp2p.net.peer_addrs import base58_of, dialable_addrs, parse_peer_id, parse_peer_multiaddr, valid_addr
from swarmp2p.net.peer_book import PeerBook
from swarmp2p.net.peer_exchange import PeerExchange
from swarmp2p.net.peer_tables import prune_peer_tables
from swarmp2p.net.priority_inbox import PriorityInbox
from swarmp2p.net.request_response import RequestResponse
from swarmp2p.net.settings import NetworkSettings
from swarmp2p.net.topics import GossipCheck, Topics
from swarmp2p.ports import InboundMessage, NetworkError, RequestHandler

logger = logging.getLogger(__name__)


class LibP2PNetwork:
    """NetworkPort over one running py-libp2p host. Build it with `open_libp2p_network`."""

    bounds_waits = False
    """NetworkPort.bounds_waits: a libp2p stream or DHT query can hang past its timeout, so the
    caller keeps its own deadline around them."""

    def __init__(
        self,
        host: IHost,
        pubsub: CountingPubsub,
        dht: KadDHT,
        record_validator: SwarmRecordValidator,
        settings: NetworkSettings,
        counters: DropCounters,
        nursery: trio.Nursery,
    ) -> None:
        self.host = host
        self.pubsub = pubsub
        self.dht = dht
        self.record_validator = record_validator
        self._settings = settings
        self.counters = counters
        self._nursery = nursery
        self._peer_id = host.get_id().to_base58()
        self.topics = Topics(host, pubsub, settings, counters, nursery)
        # Gossip our topic validators rejected (never forwarded), by reason.
        self.gossip_rejections = self.topics.rejections
        self._dialing: set[str] = set()
        self._dht_peers: set[str] = set()
        self._replications = 0  # DHT puts replicating in the background
        self._next_store_sweep = 0.0
        self._upkeep_seen: set[str] = set()  # the connected peers at the last upkeep tick
        self.book = PeerBook(
            self._peer_id,
            backoff_initial_s=settings.redial_backoff_initial_s,
            backoff_max_s=settings.redial_backoff_max_s,
            max_known=settings.max_known_peers,
            forget_after_s=settings.forget_unreachable_after_s,
            forget_never_reached_after_s=settings.forget_never_reached_after_s,
            max_dials_per_s=settings.max_dials_per_s,
            dial_burst=settings.dial_burst,
        )
        self.requests = RequestResponse(
            host,
            settings,
            counters,
            ensure_connected=self._ensure_connected,
            drop_stale=self._drop_stale_connections,
        )
        self.exchange = PeerExchange(self, self.requests, pubsub.router, settings, counters, nursery)
        # Whom each peer said it is connected to (peer exchange learns it, gossip relays use it).
        self.neighbours = self.exchange.neighbours
        if settings.skip_relay_to_origin_neighbours:
            pubsub.router.origin_neighbours = self.neighbours  # type: ignore[attr-defined]
            pubsub.router.relay_backup_copy = settings.relay_backup_copy  # type: ignore[attr-defined]
            pubsub.router.on_mesh_join = self.exchange.on_mesh_join  # type: ignore[attr-defined]

    @property
    def settings(self) -> NetworkSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: NetworkSettings) -> None:
        """New settings for the adapter and every part of it at once (they share one value)."""
        self._settings = settings
        self.requests.settings = self.exchange.settings = self.topics.settings = settings

    # ---- identity and addresses -------------------------------------------------------------

    @property
    def push_max_bytes(self) -> int:
        """NetworkPort.push_max_bytes: `NetworkSettings.push_max_bytes`."""
        return self.settings.push_max_bytes

    @property
    def local_peer_id(self) -> str:
        return self._peer_id

    def listen_addrs(self) -> list[str]:
        """Full dialable multiaddrs of this host, each ending in /p2p/<peer id>."""
        suffix = f"/p2p/{self._peer_id}"
        return [addr + suffix for addr in self.transport_addrs()]

    def transport_addrs(self) -> list[str]:
        """Where others can dial this host: a wildcard listen address (`/ip4/0.0.0.0`, `/ip6/::`,
        what a node reachable from other hosts listens on) is replaced by this host's interface
        addresses, since it is what hellos, peer exchange and the printed join command hand out."""
        return dialable_addrs(self.host.get_transport_addrs())

    # ---- gossip (topics.py) -------------------------------------------------------------------

    async def publish(self, topic: str, data: bytes) -> None:
        await self.topics.publish(topic, data)

    async def subscribe(self, topic: str) -> PriorityInbox[InboundMessage]:
        """A receiver of `topic`'s gossip: a PriorityInbox (read like a trio receive channel),
        in which established peers' messages keep their place when it is full."""
        return await self.topics.subscribe(topic)

    def set_gossip_priority(self, established: Callable[[str], bool]) -> None:
        """Which origins' gossip keeps its place in a full inbox besides connected peers: the
        node vouches for senders with a history (protocol.admission's `Inbox.established`)."""
        self.topics.set_priority(established)

    def subscribe_inline(self, topic: str, handler: Callable[[InboundMessage], None]) -> bool:
        """NetworkPort.subscribe_inline: not offered (messages arrive in pubsub's own tasks and
        are read through `subscribe`)."""
        return False

    def set_gossip_validator(self, topic: str, check: GossipCheck, *, deliver_rejected: bool = False) -> None:
        """`Topics.set_validator`: `check(origin peer id, data)` accepts (None) or rejects (a
        reason, counted in `gossip_rejections`) every gossip message of `topic` before it is
        delivered or forwarded; a rejected one is never forwarded."""
        self.topics.set_validator(topic, check, deliver_rejected=deliver_rejected)

    # ---- direct request/response (request_response.py) and peer exchange (peer_exchange.py) --

    def set_request_handler(self, handler: RequestHandler) -> None:
        self.requests.set_request_handler(handler)

    def set_hello(self, data: bytes) -> None:
        """The bytes served on /swarmp2p/hello/1.0.0 (the node's current signed Hello)."""
        self.requests.set_hello(data)

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        return await self.requests.request(peer_id, data, timeout_s)

    async def request_hello(self, peer_id: str, timeout_s: float = 5.0) -> bytes:
        """The Hello bytes `peer_id` currently serves (b"" when it has none yet)."""
        return await self.requests.request_hello(peer_id, timeout_s)

    async def exchange_peers(self, peer_id: str) -> int:
        """Tell `peer_id` whom we are connected to and ask whom it is connected to; returns
        how many new peers we learned."""
        return await self.exchange.exchange_peers(peer_id)

    def relay_view(self) -> dict[str, int]:
        """`PeerExchange.relay_view`: how far our relays skip peers that hold a message already."""
        return self.exchange.relay_view()

    def relays_settled(self, min_mesh_peers: int) -> bool:
        """`relay_view` says our relays skip what they should: at least `min_mesh_peers` in the
        mesh, every one's list known, no joiner's exchange in flight, and ours told."""
        return upkeep.relays_settled(self.relay_view(), min_mesh_peers)

    # ---- DHT ------------------------------------------------------------------------------------

    def set_record_check(self, check: Any) -> None:
        """Application check run on every DHT record put, stored or fetched (raise to reject)."""
        self.record_validator.check = check

    def set_record_rounds(
        self,
        round_of: Callable[[str], int | None],
        current_round: Callable[[], int | None],
        *,
        keep_rounds: int = 2,
        ahead_rounds: int = 1,
    ) -> None:
        """Make DHT records expire with their round (see net/dht.py RecordRounds): records
        more than `keep_rounds` rounds old are refused and dropped from the store, records
        for rounds beyond `ahead_rounds` after ours refused."""
        rounds = RecordRounds(round_of, current_round, keep_rounds, ahead_rounds)
        self.record_validator.rounds = rounds
        store = self.dht.value_store
        if isinstance(store, BoundedValueStore):
            store.rounds = rounds

    async def dht_put(self, key: str, value: bytes) -> None:
        """Store the record locally at once and replicate it to the closest peers in the
        background.

        Replication is a Kademlia lookup plus one store per close peer; a peer that just died
        (still in routing tables) makes it wait out dial timeouts. Measured in the 5-process
        swarm test: a put that blocked for its full 10 s timeout right after a SIGKILL delayed
        every survivor's round past its end. The record is served from our own store as soon
        as this returns, so callers never wait for the swarm."""
        full_key = namespaced_key(self.settings.dht_namespace, key)
        try:
            self.dht.validator.validate(full_key, value)  # type: ignore[union-attr]
        except Exception as error:
            raise NetworkError(f"DHT record refused: {error}") from error
        self.dht.value_store.put(full_key.encode("utf-8"), value)
        if self._replications >= self.settings.max_dht_replications:
            # Still stored and served locally; only the copy on other peers is skipped.
            self.counters.add("dht_replication_skipped")
            return
        self._replications += 1
        self._nursery.start_soon(self._replicate, full_key, value)

    async def _replicate(self, full_key: str, value: bytes) -> None:
        try:
            with trio.move_on_after(self.settings.dht_timeout_s) as scope:
                await self.dht.put_value(full_key, value)
            if scope.cancelled_caught:
                self.counters.add("dht_replication_timeout")
        except Exception as error:
            self.counters.add("dht_replication_failed")
            logger.debug("DHT replication of %s failed: %r", full_key, error)
        finally:
            self._replications -= 1

    async def dht_get(self, key: str) -> bytes | None:
        full_key = namespaced_key(self.settings.dht_namespace, key)
        with trio.move_on_after(self.settings.dht_timeout_s):
            try:
                value = await self.dht.get_value(full_key)
            except Exception as error:
                logger.debug("DHT get %s failed: %r", full_key, error)
                return None
            if value is None:
                return None
            try:
                self.dht.validator.validate(full_key, value)  # type: ignore[union-attr]
            except Exception:
                return None
            return value
        return None

    # ---- peers and dialing ------------------------------------------------------------------

    def connected_peers(self) -> Sequence[str]:
        """Peers with at least one OPEN connection. py-libp2p 0.8.1 keeps closed connections in
        its table for a while (`get_connected_peers` still lists them), so counting those would
        stop upkeep from re-dialing a peer that is in fact gone."""
        connections = self.host.get_network().connections
        return [pid.to_base58() for pid, conns in list(connections.items()) if _any_open(conns)]

    def _drop_stale_connections(self, pid: ID) -> int:
        """Forget closed connections py-libp2p still lists for `pid`; returns how many.

        While one is listed, `host.connect` returns at once ("already connected") and
        `new_stream` fails with "No valid connections available": the peer is unreachable
        until something removes it. Measured in bench/bench_network.py: the cause of most
        failed fetches, retried three times in a row, and of lost 1 MB batches."""
        network = self.host.get_network()
        stale = [conn for conn in list(network.connections.get(pid, [])) if _is_closed(conn)]
        for conn in stale:
            try:
                network.remove_conn(conn)  # type: ignore[attr-defined]
            except Exception as error:
                logger.debug("removing a stale connection to %s failed: %r", pid, error)
        if stale:
            self.counters.add("stale_connections_dropped", len(stale))
        return len(stale)

    def add_known_peer(self, peer_id: str, addrs: Sequence[str], *, pinned: bool = False) -> bool:
        """Learn where a peer listens (from a Hello, peer exchange or the command line)."""
        if parse_peer_id(peer_id) is None:
            return False
        good = []
        for addr in addrs:
            if not valid_addr(addr):
                continue
            base = addr.split("/p2p/")[0]
            if base:
                good.append(base)
        evicted = self.book.evicted
        learned = self.book.learn(peer_id, tuple(good), pinned=pinned)
        if self.book.evicted > evicted:
            self.counters.add("peer_book_evicted", self.book.evicted - evicted)
        elif not learned and peer_id not in self.book and good and peer_id != self.book.local_peer_id:
            self.counters.add("peer_book_full")  # full of pinned and connected peers (never: ourselves)
        return learned

    def add_bootstrap(self, peer_multiaddr: str) -> str:
        """Pin a bootstrap peer (re-dialed forever with backoff). Returns its peer id."""
        peer_id, addr = parse_peer_multiaddr(peer_multiaddr)
        self.book.learn(peer_id, (addr,), pinned=True)
        return peer_id

    async def connect(self, peer_multiaddr: str) -> str:
        """Dial a peer now (bootstrap or test helper). Returns its peer id; raises NetworkError."""
        try:
            peer_id, addr = parse_peer_multiaddr(peer_multiaddr)
        except ValueError as error:
            raise NetworkError(str(error)) from error
        self.book.learn(peer_id, (addr,))
        if not await self._dial(peer_id):
            raise NetworkError(f"could not connect to {peer_multiaddr}")
        return peer_id

    async def _ensure_connected(self, pid: ID) -> None:
        if _any_open(self.host.get_network().connections.get(pid, [])):
            return
        self._drop_stale_connections(pid)
        if not await self._dial(pid.to_base58()):
            raise NetworkError(f"peer {pid.to_base58()} is not reachable")

    async def _dial(self, peer_id: str) -> bool:
        pid = ID.from_base58(peer_id)
        self._drop_stale_connections(pid)  # else host.connect returns "already connected"
        addrs = [multiaddr.Multiaddr(a) for a in self.book.addrs(peer_id)]
        if not addrs:
            try:
                addrs = list(self.host.get_peerstore().addrs(pid))
            except Exception:
                addrs = []
        if not addrs:
            return False
        self._dialing.add(peer_id)
        try:
            with trio.move_on_after(self.settings.dial_timeout_s) as scope:
                await self.host.connect(PeerInfo(pid, addrs))
                # connect can return with no open connection (the remote accepted TCP but its
                # host is gone, so the upgrade failed): that is a failed dial, not a success
                # that resets the peer's backoff and has upkeep re-dial it every tick.
                if _any_open(self.host.get_network().connections.get(pid, [])):
                    self.book.mark_connected(peer_id)
                    await self._add_dht_peer(pid)
                    return True
                logger.debug("dial %s %s left no open connection", peer_id, [str(a) for a in addrs])
            if scope.cancelled_caught:
                logger.debug("dial %s %s timed out", peer_id, [str(a) for a in addrs])
        except Exception as error:
            logger.debug("dial %s %s failed: %r", peer_id, [str(a) for a in addrs], error)
        finally:
            self._dialing.discard(peer_id)
        self.counters.add("dial_failed")
        if peer_id in self.book and self.book.dial_failed(peer_id, trio.current_time()) == math.inf:
            self._forget_peer(peer_id, pid)
        return False

    def _forget_peer(self, peer_id: str, pid: ID) -> None:
        """The peer book gave up on a peer that stayed unreachable: forget it everywhere, so
        neither we nor py-libp2p's auto-connector (which dials peerstore addresses) keep trying."""
        self.counters.add("peer_forgotten")
        self.exchange.forget(peer_id)
        self._forget_dht_peer(peer_id)
        try:
            self.host.get_peerstore().clear_addrs(pid)
        except Exception as error:
            logger.debug("clearing addresses of %s failed: %r", peer_id, error)

    async def _add_dht_peer(self, pid: ID) -> None:
        key = pid.to_base58()
        if key in self._dht_peers:
            return
        try:
            if await self.dht.add_peer(pid, skip_server_mode_check=True):
                self._dht_peers.add(key)
        except Exception as error:
            logger.debug("DHT add_peer %s failed: %r", key, error)

    def _forget_dht_peer(self, peer_id: str) -> None:
        """A lost peer leaves the routing table until it is connected again: py-libp2p keeps
        dead peers there, and every DHT lookup then waits out dials to them."""
        self._dht_peers.discard(peer_id)
        pid = parse_peer_id(peer_id)
        if pid is None:
            return
        try:
            self.dht.routing_table.remove_peer(pid)
        except Exception as error:
            logger.debug("DHT remove_peer %s failed: %r", peer_id, error)

    def _learn_from_peerstore(self, peer_id: str) -> None:
        # Identify fills the peerstore with the peer's listen addrs: enough to re-dial it later.
        try:
            addrs = [str(a) for a in self.host.get_peerstore().addrs(ID.from_base58(peer_id))]
        except Exception:
            addrs = []
        self.add_known_peer(peer_id, addrs)

    # ---- upkeep ---------------------------------------------------------------------------------

    async def _upkeep_loop(self) -> None:
        """Keep `target_peers` connections: learn from whoever connected to us, re-dial lost
        peers. Every `upkeep_interval_s` while connections come, go or are dialed; doubling up
        to `upkeep_settled_s` while nothing changes: a tick walks every connection, and at 0.5 s
        it was ~20% of a settled node's CPU (15 nodes in one process, 14 connections each)."""
        pause = self.settings.upkeep_interval_s
        while True:
            changed = await self._upkeep_tick()
            pause = upkeep.next_upkeep_pause(
                pause,
                changed=changed,
                fast_s=self.settings.upkeep_interval_s,
                settled_s=self.settings.upkeep_settled_s,
            )
            await trio.sleep(pause)

    async def _upkeep_tick(self) -> bool:
        """One pass of upkeep (`upkeep.plan_upkeep` decides, this carries it out); whether the
        connected peers changed since the last, or a dial was started."""
        now = trio.current_time()
        connected = set(self.connected_peers())
        plan = upkeep.plan_upkeep(
            connected=connected,
            book_connected=self.book.connected(),
            in_book=self.book,
            routed=self._dht_peers,
            last_seen=self._upkeep_seen,
            target_peers=self.settings.target_peers,
            now=now,
            next_sweep=self._next_store_sweep,
        )
        for peer_id in plan.lost:
            self.book.mark_disconnected(peer_id, now)
            self._forget_dht_peer(peer_id)
            pid = parse_peer_id(peer_id)
            if pid is not None:
                self._drop_stale_connections(pid)
        self.neighbours.keep_only({pid.to_bytes() for pid in map(parse_peer_id, connected) if pid})
        for peer_id in plan.unknown:
            self._learn_from_peerstore(peer_id)
        for peer_id in connected:
            self.book.mark_connected(peer_id)
        for peer_id in plan.unrouted:
            await self._add_dht_peer(ID.from_base58(peer_id))
        self._prune_peer_tables(connected)
        store = self.dht.value_store
        if plan.sweep_store and isinstance(store, BoundedValueStore):
            self._next_store_sweep = now + self.settings.dht_sweep_interval_s
            store.sweep()
        changed = plan.changed
        self._upkeep_seen = connected
        self.exchange.maybe_tell_mesh_peers(connected, still_changing=changed, now=now)
        if plan.missing:
            for peer_id in self.book.due_for_dial(now, plan.missing, skip=self._dialing | connected):
                changed = True
                self._dialing.add(peer_id)
                self._nursery.start_soon(self._dial, peer_id)
        return changed

    def _prune_peer_tables(self, connected: set[str]) -> int:
        """Forget every peer that is not ourselves, in the peer book, or connected (or being
        dialed): from the DHT's routing table and our peer exchange pauses here, from
        py-libp2p's peerstore and its other per-peer tables in peer_tables.py; returns how many
        peerstore entries went (`peerstore_pruned`). A peer the DHT added by itself (one that
        sent us a DHT request) leaves its routing table when it is no longer connected, as the
        peers we add do."""
        try:
            routed = self.dht.routing_table.get_peer_ids()
        except Exception as error:
            logger.debug("listing the DHT routing table failed: %r", error)
            routed = []
        for pid in routed:
            peer_id = base58_of(pid.to_bytes())
            if peer_id not in connected:
                self._forget_dht_peer(peer_id)
        self.exchange.prune_pauses(connected, self.book)
        pruned = prune_peer_tables(
            self.host,
            known=(peer_id for peer_id, _ in self.book.known()),
            dialing=self._dialing,
            book_size=len(self.book),
            grace_s=self.settings.peerstore_grace_s,
        )
        if pruned:
            self.counters.add("peerstore_pruned", pruned)
        return pruned

    # ---- status ---------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {
            "peer_id": self._peer_id,
            "listen_addrs": self.listen_addrs(),
            "connected_peers": len(self.connected_peers()),
            "relays": self.relay_view(),
            "known_peers": len(self.book),
            "dht_routing_table": self.dht.get_routing_table_size(),
            "drops": self.counters.snapshot(),
            "gossip_rejections": dict(sorted(self.gossip_rejections.items())),
            "tables": self.table_sizes(),
        }

    def table_sizes(self) -> dict[str, int]:
        """Entries in every table that grows with the peers or records we meet (each is bounded)."""
        store = self.dht.value_store
        sizes = {
            "peer_book": len(self.book),
            "dht_records": len(store.store),
            "dht_record_bytes": int(getattr(store, "total_bytes", 0)),
            "dht_record_owners": int(store.owner_count()) if hasattr(store, "owner_count") else 0,
            "exchange_quiet": len(self.exchange.quiet_until),
            "gossip_seen_cache": _seen_cache_size(self.pubsub),
        }
        try:
            sizes["peerstore"] = len(self.host.get_peerstore().peer_ids())
        except Exception:
            pass
        return sizes


def _seen_cache_size(pubsub: Any) -> int:
    try:
        return len(pubsub.seen_messages.cache)
    except Exception:
        return 0


def _is_closed(conn: Any) -> bool:
    try:
        return bool(conn.is_closed)
    except Exception:
        return True


def _any_open(conns: Sequence[Any]) -> bool:
    return any(not _is_closed(conn) for conn in conns)


@asynccontextmanager
async def open_libp2p_network(
    key_pair: KeyPair, settings: NetworkSettings | None = None
) -> AsyncIterator[LibP2PNetwork]:
    """Start a host listening on `settings.listen`, with gossip, DHT and upkeep; stop it on exit."""
    settings = settings or NetworkSettings()
    built = build_host(key_pair, settings)
    host, pubsub, dht = built.host, built.pubsub, built.dht
    async with host.run(listen_addrs=built.listen):
        # The router's own service is what runs the gossipsub heartbeat (message-cache shifts, mesh
        # upkeep, IHAVE gossip, fanout expiry, score decay); Pubsub's service does not start it.
        async with (
            background_trio_service(pubsub),
            background_trio_service(pubsub.router),
            background_trio_service(dht),
        ):
            await pubsub.wait_until_ready()
            async with trio.open_nursery() as nursery:
                network = LibP2PNetwork(
                    host, pubsub, dht, built.record_validator, settings, built.counters, nursery
                )
                for text in settings.bootstrap:
                    network.add_bootstrap(text)
                nursery.start_soon(network._upkeep_loop)
                nursery.start_soon(network.exchange.run)
                try:
                    yield network
                finally:
                    nursery.cancel_scope.cancel()
                    quiet_auto_connector(host)
