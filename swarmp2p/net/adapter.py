"""The libp2p NetworkPort adapter: one py-libp2p host with gossipsub, a Kademlia DHT, direct
request/response protocols and connection upkeep.

Protocols served besides gossipsub and Kademlia:
- /swarmp2p/fetch/1.0.0   one request frame -> one response frame (status byte + body); the node's
                          request handler answers (rollout batch fetches).
- /swarmp2p/hello/1.0.0   empty request -> the node's current signed Hello bytes; how a joining
                          peer learns the swarm schedule from its bootstrap peer before round 1.
- /swarmp2p/peers/1.1.0   msgpack list of the asker's connected peer ids -> msgpack list of
                          (peer id, listen addrs) this peer is connected to; peer exchange, so
                          that nobody is left in a star around the bootstrap peer, and so that
                          each side learns whom the other is connected to (net/neighbours.py).
- /swarmp2p/peers/1.0.0   the same with an empty request (the first version; still served, and
                          asked of a peer that refuses 1.1.0).

All payloads are opaque bytes here: decoding and validating messages is the node's job
(`protocol.codec`), the adapter only guarantees sizes, timeouts and that garbage never crashes it.

Over 400 lines (~910): host lifecycle, the three request/response protocols, upkeep
(dials, peer exchange, expiry) and the NetworkPort surface, all on one py-libp2p host whose private
state they share; gossip validation (gossip.py), the DHT store (dht.py), the peer book
(peer_book.py), counters and framing are already out. The next split is the request/response
protocols into a module of their own; not done yet.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import msgpack
import multiaddr
import trio
from libp2p import new_host
from libp2p.abc import IHost
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.kad_dht import KadDHT
from libp2p.network.auto_connector import AutoConnector
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.protocol_muxer.exceptions import MultiselectClientError, ProtocolNotSupportedError
from libp2p.tools.anyio_service import background_trio_service
from libp2p.utils.address_validation import expand_wildcard_address

from swarmp2p.net import inbound_slots, task_parents, yamux_credit, yamux_knobs
from swarmp2p.net.counters import DropCounters
from swarmp2p.net.dht import (
    BoundedValueStore,
    RecordRounds,
    SwarmRecordValidator,
    build_dht,
    namespaced_key,
)
from swarmp2p.net.frames import FrameError, FrameTooLarge, encode_frame
from swarmp2p.net.gossip import CountingPubsub, build_gossip
from swarmp2p.net.lazy_select import open_lazily
from swarmp2p.net.neighbours import NeighbourMap
from swarmp2p.net.peer_book import PeerBook
from swarmp2p.net.priority_inbox import DROPPED, EVICTED, PriorityInbox
from swarmp2p.net.settings import NetworkSettings
from swarmp2p.net.signed_records import install as memoize_signed_records
from swarmp2p.net.streams import read_frame, write_frame
from swarmp2p.net.tcp_recovery import LossRecoveryTuner
from swarmp2p.net.tcp_stall import is_stalled
from swarmp2p.ports import InboundMessage, NetworkError, ProtocolRefused, RequestHandler

logger = logging.getLogger(__name__)

GossipCheck = Callable[[str, bytes], str | None]
"""(origin peer id, message data) -> None to accept, or the reason to reject."""

FETCH_PROTOCOL = TProtocol("/swarmp2p/fetch/1.0.0")
HELLO_PROTOCOL = TProtocol("/swarmp2p/hello/1.0.0")
PEERS_PROTOCOL = TProtocol("/swarmp2p/peers/1.1.0")
PEERS_ASK_PROTOCOL = TProtocol("/swarmp2p/peers/1.0.0")

_STATUS_OK = 0
_STATUS_ERROR = 1
_MAX_EXCHANGE_PEERS = 64
_MAX_EXCHANGE_BYTES = 64 * 1024
# A peer exchange request lists at most _MAX_EXCHANGE_PEERS ids of ~52 base58 characters.
_MAX_EXCHANGE_REQUEST_BYTES = 8 * 1024
_MAX_HELLO_BYTES = 64 * 1024
# Ahead of an answer on a request's stream: multistream-select's two echoes and the frame's
# length prefix (~60 bytes for our protocol ids); the receive window granted covers them too.
_NEGOTIATION_SLACK_BYTES = 1024


def parse_peer_multiaddr(text: str) -> tuple[str, str]:
    """'/ip4/1.2.3.4/tcp/5/p2p/Qm..' -> (peer id, address without /p2p). Raises ValueError."""
    try:
        info = info_from_p2p_addr(multiaddr.Multiaddr(text))
    except Exception as error:
        raise ValueError(f"not a peer multiaddr (need .../p2p/<peer id>): {text!r}: {error}") from error
    return info.peer_id.to_base58(), str(info.addrs[0]) if info.addrs else ""


def _valid_addr(text: Any) -> bool:
    if not isinstance(text, str) or len(text) > 256:
        return False
    return _parses_as_multiaddr(text)


@functools.lru_cache(maxsize=4096)
def _parses_as_multiaddr(text: str) -> bool:
    # Cached: every peer exchange answer lists the same addresses again, and parsing one
    # (multiaddr + netaddr, pure Python) was ~8% of an idle node's busy samples (20 processes).
    try:
        multiaddr.Multiaddr(text)
    except Exception:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _base58_of(raw: bytes) -> str:
    """A peer id's base58 name from its bytes. Cached: every gossip message names its origin
    as bytes, the validator and the pump each need the name, and base58 is pure Python (~14 us,
    ~1.4% of a delivery each time); a swarm has few origins."""
    return ID(raw).to_base58()


def _parse_peer_id(text: Any) -> ID | None:
    if not isinstance(text, str) or len(text) > 128:
        return None
    return _parse_base58_peer_id(text)


@functools.lru_cache(maxsize=4096)
def _parse_base58_peer_id(text: str) -> ID | None:
    # Cached: every peer exchange answer lists the same few dozen ids again, and the base58
    # package decodes in pure Python (~8% of an idle node's busy samples, 20 processes).
    try:
        return ID.from_base58(text)
    except Exception:
        return None


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
        self.settings = settings
        self.counters = counters
        self._nursery = nursery
        self._peer_id = host.get_id().to_base58()
        self._request_handler: RequestHandler | None = None
        self._hello: bytes = b""
        self._topic_receivers: dict[str, list[PriorityInbox[InboundMessage]]] = {}
        self._vouched: Callable[[str], bool] | None = None  # see set_gossip_priority
        pubsub.established_origin = self._is_established
        # Gossip our topic validators rejected (never forwarded), by reason.
        self.gossip_rejections: Counter[str] = Counter()
        self._dialing: set[str] = set()
        self._dht_peers: set[str] = set()
        self._replications = 0  # DHT puts replicating in the background
        self._next_store_sweep = 0.0
        # Peer exchange slows down while it teaches us nothing new (see _peer_exchange_loop).
        self._exchange_interval_s = settings.peer_exchange_fast_s
        self._upkeep_seen: set[str] = set()  # the connected peers at the last upkeep tick
        # What we last told our mesh peers we are connected to (`_maybe_tell_mesh_peers`).
        self._told_connected: frozenset[str] = frozenset()
        self._told_at = -math.inf
        self._telling = False
        self._exchange_cursor = 0
        # Peers that failed a peer exchange (e.g. a foreign libp2p node without our protocol):
        # peer id -> trio time before which we do not ask them again.
        self._exchange_quiet_until: dict[str, float] = {}
        # Whom each peer said (in peer exchange) it is connected to: the gossip router skips
        # relaying to those that hold the author's flood publish already (net/neighbours.py).
        self.neighbours = NeighbourMap(settings.neighbour_ttl_s, max_peers=settings.max_known_peers)
        # Mesh peers that joined and are being asked whom they are connected to (`_on_mesh_join`).
        self._asking_joiners: set[str] = set()
        if settings.skip_relay_to_origin_neighbours:
            pubsub.router.origin_neighbours = self.neighbours  # type: ignore[attr-defined]
            pubsub.router.relay_backup_copy = settings.relay_backup_copy  # type: ignore[attr-defined]
            pubsub.router.on_mesh_join = self._on_mesh_join  # type: ignore[attr-defined]
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
        host.set_stream_handler(FETCH_PROTOCOL, self._serve_fetch)
        host.set_stream_handler(HELLO_PROTOCOL, self._serve_hello)
        host.set_stream_handler(PEERS_PROTOCOL, self._serve_peer_exchange)
        host.set_stream_handler(PEERS_ASK_PROTOCOL, self._serve_peers)

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

    # ---- gossip -------------------------------------------------------------------------------

    async def publish(self, topic: str, data: bytes) -> None:
        if len(data) > self.settings.max_gossip_bytes:
            self.counters.add("gossip_oversized_publish")
            raise NetworkError(
                f"gossip message of {len(data)} bytes exceeds {self.settings.max_gossip_bytes}; "
                "announce on gossip and serve the payload over fetch"
            )
        await self.pubsub.publish(topic, data)

    async def subscribe(self, topic: str) -> PriorityInbox[InboundMessage]:
        """A receiver of `topic`'s gossip: a PriorityInbox (read like a trio receive channel),
        in which established peers' messages keep their place when it is full."""
        inbox: PriorityInbox[InboundMessage] = PriorityInbox(self.settings.subscription_queue_size)
        receivers = self._topic_receivers.get(topic)
        if receivers is None:
            receivers = self._topic_receivers[topic] = []
            subscription = await self.pubsub.subscribe(topic)
            self._nursery.start_soon(self._pump_topic, topic, subscription)
        receivers.append(inbox)
        return inbox

    def set_gossip_priority(self, established: Callable[[str], bool]) -> None:
        """Which origins' gossip keeps its place in a full inbox besides connected peers: the
        node vouches for senders with a history (protocol.admission's `Inbox.established`)."""
        self._vouched = established

    def _is_established(self, origin: bytes) -> bool:
        """A connected peer, or one the node vouches for. Never raises (a garbled id: no)."""
        try:
            if ID(origin) in self.host.get_network().connections:
                return True
            vouched = self._vouched
            return vouched is not None and bool(vouched(_base58_of(origin)))
        except Exception:
            return False

    def subscribe_inline(self, topic: str, handler: Callable[[InboundMessage], None]) -> bool:
        """NetworkPort.subscribe_inline: not offered (messages arrive in pubsub's own tasks and
        are read through `subscribe`)."""
        return False

    async def _pump_topic(self, topic: str, subscription: Any) -> None:
        """Move messages from libp2p's subscription inbox to every receiver's, counting what a
        full one drops or evicts."""
        async for message in subscription:
            try:
                sender = _base58_of(message.from_id)
            except Exception:
                continue  # strict signing already rejected unsigned/garbled senders; belt and braces
            if sender == self._peer_id:
                continue  # gossip does not echo our own publishes back to us
            inbound = InboundMessage(topic=topic, transport_sender=sender, data=bytes(message.data))
            established = self._is_established(message.from_id)
            for inbox in self._topic_receivers.get(topic, []):
                outcome = inbox.put(inbound, established)
                if outcome == DROPPED:
                    self.counters.add("inbound_channel_full")
                elif outcome == EVICTED:
                    self.counters.add("inbound_channel_evicted_unknown")

    def set_gossip_validator(self, topic: str, check: GossipCheck, *, deliver_rejected: bool = False) -> None:
        """Run `check(origin peer id, data)` on every gossip message of `topic` before it is
        delivered or forwarded: None accepts it, a string rejects it for that reason (an
        exception: reason "validator_error"). A rejected message is NEVER forwarded to other
        peers (py-libp2p 0.8.1's validators return a bool; False raises its ValidationError,
        which stops the relay and scores the forwarder down), and is counted in
        `gossip_rejections` by reason. `deliver_rejected=True` still hands it to our own
        subscribers, for a node whose own checks count and blame what it receives.
        Our own publishes are not checked."""
        my_id = self.host.get_id().to_bytes()
        rejections = self.gossip_rejections

        def validator(forwarder: ID, msg: Any) -> bool:
            try:
                origin = msg.from_id
                if origin == my_id:
                    return True
                reason = check(_base58_of(origin), bytes(msg.data))
            except Exception as error:
                logger.debug("gossip validator for %s failed: %r", topic, error)
                reason = "validator_error"
            if reason is None:
                return True
            rejections[str(reason)[:64]] += 1
            return False

        self.pubsub.set_topic_validator(topic, validator, False)
        if deliver_rejected:
            self.pubsub.deliver_rejected_topics.add(topic)
        else:
            self.pubsub.deliver_rejected_topics.discard(topic)

    # ---- direct request/response ------------------------------------------------------------

    def set_request_handler(self, handler: RequestHandler) -> None:
        self._request_handler = handler

    def set_hello(self, data: bytes) -> None:
        """The bytes served on /swarmp2p/hello/1.0.0 (the node's current signed Hello)."""
        if len(data) > _MAX_HELLO_BYTES:
            raise ValueError(f"hello of {len(data)} bytes exceeds {_MAX_HELLO_BYTES}")
        self._hello = data

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        if len(data) > self.settings.max_request_bytes:
            raise NetworkError(f"request of {len(data)} bytes exceeds {self.settings.max_request_bytes}")
        body = await self._roundtrip(
            peer_id, FETCH_PROTOCOL, data, self.settings.max_response_bytes + 1, timeout_s
        )
        if not body:
            self.counters.add("response_garbage")
            raise NetworkError(f"empty response from {peer_id}")
        status, payload = body[0], body[1:]
        if status == _STATUS_OK:
            return payload
        if status == _STATUS_ERROR:
            raise NetworkError(f"{peer_id} refused the request: {payload[:200].decode('utf-8', 'replace')}")
        self.counters.add("response_garbage")
        raise NetworkError(f"bad response status {status} from {peer_id}")

    async def request_hello(self, peer_id: str, timeout_s: float = 5.0) -> bytes:
        """The Hello bytes `peer_id` currently serves (b"" when it has none yet)."""
        return await self._roundtrip(peer_id, HELLO_PROTOCOL, b"", _MAX_HELLO_BYTES, timeout_s)

    async def _roundtrip(
        self, peer_id: str, protocol: TProtocol, data: bytes, max_response: int, timeout_s: float
    ) -> bytes:
        pid = _parse_peer_id(peer_id)
        if pid is None:
            raise NetworkError(f"not a peer id: {peer_id!r}")
        with trio.move_on_after(timeout_s) as scope:
            stream = None
            try:
                await self._ensure_connected(pid)
                # The request goes out with the protocol negotiation, not after it (lazy_select.py).
                request = encode_frame(data)
                network = self.host.get_network()
                # Credit for the whole answer up front (yamux_credit.grant_receive_window): the
                # multistream echoes and the length prefix come before it.
                window = max_response + _NEGOTIATION_SLACK_BYTES
                try:
                    stream = await open_lazily(network, pid, protocol, request, receive_window=window)
                except ProtocolNotSupportedError:
                    raise
                except Exception:
                    # The connection closed under us: drop it, re-dial once, try again.
                    if not self._drop_stale_connections(pid):
                        raise
                    self.counters.add("stream_retried")
                    await self._ensure_connected(pid)
                    stream = await open_lazily(network, pid, protocol, request, receive_window=window)
                return await read_frame(stream, max_response)
            except FrameTooLarge as error:
                self.counters.add("response_oversized")
                raise NetworkError(f"response from {peer_id} too large: {error}") from error
            except NetworkError:
                raise
            except (FrameError, Exception) as error:
                if _protocol_not_supported(error):
                    raise ProtocolRefused(f"{peer_id} does not serve {protocol}") from error
                raise NetworkError(
                    f"{protocol} to {peer_id} failed: {type(error).__name__}: {error}"
                ) from error
            finally:
                if stream is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                        await _quiet_close(stream)
        assert scope.cancelled_caught
        await self._close_stalled_connections(pid)
        raise NetworkError(f"{protocol} to {peer_id} timed out after {timeout_s:.1f}s")

    async def _close_stalled_connections(self, pid: ID) -> None:
        """After a request to `pid` timed out: close its connections stalled in TCP
        retransmission backoff (tcp_stall.py), so that the next request dials a fresh one."""
        for conn in [c for c in self.host.get_network().connections.get(pid, []) if is_stalled(c)]:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await conn.close()
            self.counters.add("stale_connections_dropped")

    async def _serve_fetch(self, stream: Any) -> None:
        remote = _remote_peer(stream)
        try:
            with trio.fail_after(self.settings.handler_timeout_s):
                request = await read_frame(stream, self.settings.max_request_bytes)
                handler = self._request_handler
                if handler is None:
                    await write_frame(stream, bytes([_STATUS_ERROR]) + b"no request handler")
                    return
                try:
                    response = await handler(remote, request)
                except Exception as error:
                    # The node validates requests; anything it raises is that peer's bad request.
                    self.counters.add("request_handler_error")
                    logger.debug("request handler failed for %s: %r", remote, error)
                    await write_frame(stream, bytes([_STATUS_ERROR]) + b"bad request")
                    return
                if len(response) > self.settings.max_response_bytes:
                    self.counters.add("response_oversized")
                    await write_frame(stream, bytes([_STATUS_ERROR]) + b"response too large")
                    return
                await write_frame(stream, bytes([_STATUS_OK]) + response)
        except FrameTooLarge:
            self.counters.add("request_oversized")
            await _quiet_reset(stream)
        except FrameError:
            self.counters.add("request_garbage")
            await _quiet_reset(stream)
        except trio.TooSlowError:
            self.counters.add("request_timeout")
            await _quiet_reset(stream)
        except Exception as error:  # transport errors while writing: the requester went away
            logger.debug("fetch stream from %s failed: %r", remote, error)
            await _quiet_reset(stream)
        else:
            await _quiet_close(stream)

    async def _serve_small(
        self, stream: Any, respond: Callable[[bytes], bytes | None], max_request: int = 0
    ) -> None:
        """One request frame of at most `max_request` bytes (0: it must be empty; anything
        else is garbage) -> `respond(request)`, or a reset where that is None (a request it
        refused and counted)."""
        try:
            with trio.fail_after(self.settings.handler_timeout_s):
                response = respond(await read_frame(stream, max_request))
                if response is None:
                    await _quiet_reset(stream)
                    return
                await write_frame(stream, response)
        except FrameTooLarge:
            self.counters.add("request_oversized" if max_request else "request_garbage")
            await _quiet_reset(stream)
        except FrameError:
            self.counters.add("request_garbage")
            await _quiet_reset(stream)
        except trio.TooSlowError:
            self.counters.add("request_timeout")
            await _quiet_reset(stream)
        except Exception:
            await _quiet_reset(stream)
        else:
            await _quiet_close(stream)

    async def _serve_hello(self, stream: Any) -> None:
        await self._serve_small(stream, lambda _request: self._hello)

    async def _serve_peers(self, stream: Any) -> None:
        await self._serve_small(stream, lambda _request: self._encode_peer_exchange())

    async def _serve_peer_exchange(self, stream: Any) -> None:
        asker = _parse_peer_id(_remote_peer(stream))

        def respond(request: bytes) -> bytes | None:
            told = self._decode_peer_ids(request)
            if told is None:
                return None
            if asker is not None:
                self.neighbours.learn(asker.to_bytes(), told)
            return self._encode_peer_exchange()

        await self._serve_small(stream, respond, _MAX_EXCHANGE_REQUEST_BYTES)

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

    # ---- peers and upkeep -------------------------------------------------------------------

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
        if _parse_peer_id(peer_id) is None:
            return False
        good = []
        for addr in addrs:
            if not _valid_addr(addr):
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
        self._exchange_quiet_until.pop(peer_id, None)
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
        pid = _parse_peer_id(peer_id)
        if pid is None:
            return
        try:
            self.dht.routing_table.remove_peer(pid)
        except Exception as error:
            logger.debug("DHT remove_peer %s failed: %r", peer_id, error)

    async def _upkeep_loop(self) -> None:
        """Keep `target_peers` connections: learn from whoever connected to us, re-dial lost
        peers. Every `upkeep_interval_s` while connections come, go or are dialed; doubling up
        to `upkeep_settled_s` while nothing changes: a tick walks every connection, and at 0.5 s
        it was ~20% of a settled node's CPU (15 nodes in one process, 14 connections each)."""
        pause = self.settings.upkeep_interval_s
        while True:
            changed = await self._upkeep_tick()
            pause = next_upkeep_pause(
                pause,
                changed=changed,
                fast_s=self.settings.upkeep_interval_s,
                settled_s=self.settings.upkeep_settled_s,
            )
            await trio.sleep(pause)

    async def _upkeep_tick(self) -> bool:
        """One pass of upkeep; whether the connected peers changed since the last, or a dial
        was started."""
        now = trio.current_time()
        connected = set(self.connected_peers())
        for peer_id in self.book.connected():
            if peer_id not in connected:
                self.book.mark_disconnected(peer_id, now)
                self._forget_dht_peer(peer_id)
                pid = _parse_peer_id(peer_id)
                if pid is not None:
                    self._drop_stale_connections(pid)
        self.neighbours.keep_only({pid.to_bytes() for pid in map(_parse_peer_id, connected) if pid})
        for peer_id in connected:
            if peer_id not in self.book:
                self._learn_from_peerstore(peer_id)
            self.book.mark_connected(peer_id)
            if peer_id not in self._dht_peers:
                await self._add_dht_peer(ID.from_base58(peer_id))
        self._prune_peer_tables(connected)
        store = self.dht.value_store
        if isinstance(store, BoundedValueStore) and now >= self._next_store_sweep:
            self._next_store_sweep = now + self.settings.dht_sweep_interval_s
            store.sweep()
        changed = connected != self._upkeep_seen
        self._upkeep_seen = connected
        self._maybe_tell_mesh_peers(connected, still_changing=changed, now=now)
        missing = self.settings.target_peers - len(connected)
        if missing > 0:
            for peer_id in self.book.due_for_dial(now, missing, skip=self._dialing | connected):
                changed = True
                self._dialing.add(peer_id)
                self._nursery.start_soon(self._dial, peer_id)
        return changed

    def _prune_peer_tables(self, connected: set[str]) -> int:
        """Forget, in py-libp2p's peerstore, its auto-connector's cooldown tables, its resource
        manager's connection rate buckets, the DHT's routing table and our peer exchange pauses,
        every peer that is not ourselves, in the
        peer book, or connected (or being dialed); returns how many peerstore entries went
        (`peerstore_pruned`). A peer the DHT added by itself (one that sent us a DHT request)
        leaves its routing table when it is no longer connected, as the peers we add do.

        py-libp2p adds a peer to its peerstore for every connection (identify), every signed
        peer record in a gossip RPC, every closer peer a DHT answer names, and removes none:
        forgetting a peer cleared its addresses only. Under churn the peerstore grew by one
        entry per peer ever met (210 while the book held 9 in a fuzz run), and the
        auto-connector's table of recent disconnects with it (its own pruning runs only when
        it dials, which upkeep does instead). An entry whose addresses were added less than
        `peerstore_grace_s` ago is kept: a DHT lookup dials the closer peers it was just told."""
        try:
            routed = self.dht.routing_table.get_peer_ids()
        except Exception as error:
            logger.debug("listing the DHT routing table failed: %r", error)
            routed = []
        for pid in routed:
            peer_id = _base58_of(pid.to_bytes())
            if peer_id not in connected:
                self._forget_dht_peer(peer_id)
        quiet = self._exchange_quiet_until
        if len(quiet) > len(connected):
            for peer_id in [p for p in quiet if p not in connected and p not in self.book]:
                del quiet[peer_id]
        peerstore = self.host.get_peerstore()
        entries: dict[ID, Any] | None = getattr(peerstore, "peer_data_map", None)
        if entries is None:
            return 0
        network = self.host.get_network()
        auto_connector = getattr(network, "auto_connector", None)
        cooldowns: list[dict[ID, Any]] = [
            table
            for name in ("_recent_disconnects", "_failure_counts", "_last_connect_attempt")
            if isinstance(table := getattr(auto_connector, name, None), dict)
        ]
        # The resource manager's per-peer connection rate buckets ("peer:<id>" -> bucket, and
        # when each was last used): py-libp2p forgets one only to make room past 1000.
        limiter = getattr(getattr(network, "_resource_manager", None), "connection_rate_limiter", None)
        buckets: list[dict[str, Any]] = [
            table
            for name in ("_token_buckets", "_last_request_times", "_window_counts")
            if isinstance(table := getattr(limiter, name, None), dict)
        ]
        # Cheap on a settled node: nothing can be pruned while no table holds more peers than
        # the book, our connections and ourselves together.
        most = len(self.book) + len(network.connections) + len(self._dialing) + 1
        if len(entries) <= most and all(len(table) <= most for table in (*cooldowns, *buckets)):
            return 0
        keep: set[ID] = {self.host.get_id()}
        keep.update(network.connections)
        for peer_id in (*(peer_id for peer_id, _ in self.book.known()), *self._dialing):
            pid = _parse_peer_id(peer_id)
            if pid is not None:
                keep.add(pid)
        cutoff = time.time() - self.settings.peerstore_grace_s
        pruned = 0
        for pid, data in list(entries.items()):
            if pid in keep or getattr(data, "last_identified", 0) > cutoff:
                continue
            try:
                peerstore.clear_peerdata(pid)
            except Exception as error:
                logger.debug("pruning %s from the peerstore failed: %r", pid, error)
                continue
            pruned += 1
        for table in cooldowns:
            for pid in [pid for pid in table if pid not in keep and pid not in entries]:
                del table[pid]
        if buckets:
            kept = {f"peer:{pid}" for pid in (*entries, *network.connections)}  # after the pruning
            for bucket_table in buckets:
                for key in [key for key in bucket_table if key.startswith("peer:") and key not in kept]:
                    del bucket_table[key]
        if pruned:
            self.counters.add("peerstore_pruned", pruned)
        return pruned

    def _maybe_tell_mesh_peers(self, connected: set[str], *, still_changing: bool, now: float) -> None:
        """Start a peer exchange with every gossip mesh peer when our connections differ from
        what we last told them: once they have stopped changing for one upkeep tick, or
        `tell_neighbours_max_wait_s` after the last time while they keep changing.

        Our mesh peers are the relays that forward to us, and each skips us for the messages
        whose author it believes we are connected to (net/neighbours.py). Until it hears of a
        new connection of ours it relays us a copy the author sent us already. A swarm that
        had just formed lost most of its first round to such copies: at 20 processes ~800
        duplicates in the first round and none after; with the answers up to date the first
        round took ~0.25 s, like the others, against ~0.45 s (docs/benchmarks.md). The asks
        alone (`_peer_exchange_loop`) come too late for that: they are paced by the asker."""
        if not self.settings.skip_relay_to_origin_neighbours or self._telling:
            return
        due = tell_due(
            differs=connected != self._told_connected,
            still_changing=still_changing,
            since_last_s=now - self._told_at,
            max_wait_s=self.settings.tell_neighbours_max_wait_s,
        )
        if not due:
            return
        self._told_connected = frozenset(connected)
        self._told_at = now
        self._telling = True
        self._nursery.start_soon(self._tell_mesh_peers)

    async def _tell_mesh_peers(self) -> None:
        try:
            now = trio.current_time()
            connected = set(self.connected_peers())
            mesh = {pid.to_base58() for pid in self._mesh_members()}
            async with trio.open_nursery() as nursery:
                for peer_id in sorted(mesh & connected):
                    if self._exchange_quiet_until.get(peer_id, 0.0) <= now:
                        nursery.start_soon(self.exchange_peers, peer_id)
        finally:
            self._telling = False

    def _on_mesh_join(self, pid: ID) -> None:
        """A peer joined our gossip mesh (the router calls this): from now on we relay to it.
        Unless it told us whom it is connected to within `TELL_MIN_GAP_S`, one peer exchange
        with it now, which tells it ours and asks its list. Until we know its list, every
        message we relay goes to it as well, also those it holds from their authors already.

        The mesh forms and re-forms at heartbeats while a swarm joins. The peer exchange loop
        gets to a new mesh peer only in turn, one exchange each `peer_exchange_fast_s`, and a
        peer's own tells go to the mesh it had when its connections last changed; so a first
        round still carried 50-430 duplicate relays at 20 processes in some runs
        (docs/benchmarks.md)."""
        peer_id = pid.to_base58()
        if peer_id in self._asking_joiners:
            return
        age = self.neighbours.age(pid.to_bytes())
        if age is not None and age < TELL_MIN_GAP_S:
            return
        if self._exchange_quiet_until.get(peer_id, 0.0) > trio.current_time():
            return  # it failed an exchange lately (a peer without our protocol)
        self._asking_joiners.add(peer_id)
        self._nursery.start_soon(self._ask_joiner, peer_id)

    async def _ask_joiner(self, peer_id: str) -> None:
        try:
            await self.exchange_peers(peer_id)
        finally:
            self._asking_joiners.discard(peer_id)

    def _learn_from_peerstore(self, peer_id: str) -> None:
        # Identify fills the peerstore with the peer's listen addrs: enough to re-dial it later.
        try:
            addrs = [str(a) for a in self.host.get_peerstore().addrs(ID.from_base58(peer_id))]
        except Exception:
            addrs = []
        self.add_known_peer(peer_id, addrs)

    async def _peer_exchange_loop(self) -> None:
        """Ask one connected peer at a time whom it knows. Fast while it teaches us something
        (joining converges in seconds), then doubling up to `peer_exchange_interval_s`: every
        exchange opens a stream (multistream negotiation + yamux frames), and a settled swarm
        asking every 0.5 s spent a measurable share of its CPU on nothing new."""
        while True:
            now = trio.current_time()
            for peer_id, until in list(self._exchange_quiet_until.items()):
                if until <= now:
                    del self._exchange_quiet_until[peer_id]
            connected = sorted(self.connected_peers())
            askable = [p for p in connected if self._exchange_quiet_until.get(p, 0.0) <= now]
            learned = 0
            mesh_peer, next_refresh_s = self._mesh_peer_to_refresh(askable)
            if mesh_peer is not None:
                learned = await self.exchange_peers(mesh_peer)
            elif askable:
                self._exchange_cursor = (self._exchange_cursor + 1) % len(askable)
                learned = await self.exchange_peers(askable[self._exchange_cursor])
            self._exchange_interval_s = next_exchange_interval(
                self._exchange_interval_s,
                learned=learned,
                connected=len(connected),
                fast_s=self.settings.peer_exchange_fast_s,
                slow_s=self.settings.peer_exchange_interval_s,
            )
            # The backoff paces discovery; a mesh peer due for a refresh is asked on time.
            pause = min(self._exchange_interval_s, max(self.settings.peer_exchange_fast_s, next_refresh_s))
            await trio.sleep(pause)

    def _mesh_members(self) -> set[ID]:
        """Every peer in our gossip mesh, over all topics."""
        members: set[ID] = set()
        for topic_mesh in getattr(self.pubsub.router, "mesh", {}).values():
            members.update(topic_mesh)
        return members

    def _mesh_peer_to_refresh(self, askable: Sequence[str]) -> tuple[str | None, float]:
        """The gossip mesh peer whose neighbour list (net/neighbours.py) is the most overdue for
        a refresh (`NeighbourMap.due_in`), if any; and the seconds until the next one falls due
        (inf: none).
        Only mesh peers matter: they are the ones a relay sends to. Peers outside the mesh are
        left to the slow round-robin discovery."""
        if not self.settings.skip_relay_to_origin_neighbours:
            return None, math.inf
        mesh_ids = self._mesh_members()
        if not mesh_ids:
            return None, math.inf
        askable_set = set(askable)
        due: tuple[float, str] | None = None
        next_due_s = math.inf
        for pid in mesh_ids:
            peer_id = pid.to_base58()
            if peer_id not in askable_set:
                continue
            due_in = self.neighbours.due_in(pid.to_bytes())
            if due_in <= 0:
                if due is None or due_in < due[0]:
                    due = (due_in, peer_id)
            else:
                next_due_s = min(next_due_s, due_in)
        if due is None:
            return None, next_due_s
        return due[1], 0.0

    async def exchange_peers(self, peer_id: str) -> int:
        """Tell `peer_id` whom we are connected to and ask whom it is connected to; returns
        how many new peers we learned."""
        try:
            try:
                request = self._encode_connected_ids()
                raw = await self._roundtrip(peer_id, PEERS_PROTOCOL, request, _MAX_EXCHANGE_BYTES, 5.0)
            except ProtocolRefused:  # a peer of the first version: ask only
                raw = await self._roundtrip(peer_id, PEERS_ASK_PROTOCOL, b"", _MAX_EXCHANGE_BYTES, 5.0)
        except NetworkError as error:
            logger.debug("peer exchange with %s failed: %s", peer_id, error)
            # A peer without our protocol (a foreign libp2p node) is asked rarely; others soon again.
            pause = 120.0 if isinstance(error, ProtocolRefused) else 5.0
            self._exchange_quiet_until[peer_id] = trio.current_time() + pause
            return 0
        entries = self._unpack_exchange_list(raw)
        if entries is None:
            entries = []  # below: it told us no neighbours (so every relay to it is sent)
        learned = 0
        # The answer lists the peers it is connected to (`_encode_peer_exchange`).
        its_neighbours: list[bytes] = []
        for entry in entries[:_MAX_EXCHANGE_PEERS]:
            pid = _parse_peer_id(entry[0]) if isinstance(entry, list) and entry else None
            if pid is None or len(entry) != 2 or not isinstance(entry[1], list):
                self.counters.add("peer_exchange_garbage")
                continue
            its_neighbours.append(pid.to_bytes())
            learned += self.add_known_peer(entry[0], entry[1][:8])
        asked = _parse_peer_id(peer_id)
        if asked is not None:
            self.neighbours.learn(asked.to_bytes(), its_neighbours)
        return learned

    def _unpack_exchange_list(self, raw: bytes) -> list[Any] | None:
        """A peer exchange request or answer: a msgpack list of at most _MAX_EXCHANGE_PEERS
        entries, or None (counted as `peer_exchange_garbage`) for anything else."""
        try:
            entries = msgpack.unpackb(
                raw, raw=False, strict_map_key=True, max_array_len=_MAX_EXCHANGE_PEERS, max_map_len=0
            )
        except Exception:
            entries = None
        if not isinstance(entries, list):
            self.counters.add("peer_exchange_garbage")
            return None
        return entries

    def _decode_peer_ids(self, raw: bytes) -> list[bytes] | None:
        """A peer exchange request (`_encode_connected_ids`) -> the ids it lists, as bytes; None
        when it is not a list at all. Every rejection is counted as `peer_exchange_garbage`;
        an entry that is not a peer id is skipped."""
        names = self._unpack_exchange_list(raw)
        if names is None:
            return None
        ids = []
        for name in names:
            pid = _parse_peer_id(name)
            if pid is None:
                self.counters.add("peer_exchange_garbage")
            else:
                ids.append(pid.to_bytes())
        return ids

    def _encode_connected_ids(self) -> bytes:
        return msgpack.packb(sorted(self.connected_peers())[:_MAX_EXCHANGE_PEERS])

    def _encode_peer_exchange(self) -> bytes:
        entries = [[self._peer_id, self.transport_addrs()]]
        connected = set(self.connected_peers())
        for peer_id, addrs in self.book.known():
            if peer_id in connected and addrs:
                entries.append([peer_id, list(addrs)])
            if len(entries) >= _MAX_EXCHANGE_PEERS:
                break
        return msgpack.packb(entries)

    def relay_view(self) -> dict[str, int]:
        """How far our relays can skip the peers that hold a message from its author already
        (net/neighbours.py): `mesh_peers` in our gossip mesh, how many of them have told us whom
        they are connected to (`mesh_lists_known`), exchanges with mesh joiners still in flight
        (`asking`), and whether our mesh peers have been told our current connections
        (`told_current`, 0 or 1).

        A swarm that has just formed relays every message to the mesh peers whose lists are
        missing: at 20 processes, ~2,300 duplicates in a first round that came 2 s after every
        process was connected (docs/benchmarks.md). All lists known and ours told is when
        relays stop sending such copies; bench_network.py waits for it before its rounds."""
        mesh = self._mesh_members()
        known = sum(1 for pid in mesh if self.neighbours.age(pid.to_bytes()) is not None)
        told = not self._telling and self._told_connected == frozenset(self.connected_peers())
        return {
            "mesh_peers": len(mesh),
            "mesh_lists_known": known,
            "asking": len(self._asking_joiners),
            "told_current": int(told),
        }

    def relays_settled(self, min_mesh_peers: int) -> bool:
        """`relay_view` says our relays skip what they should: at least `min_mesh_peers` in the
        mesh, every one's list known, no joiner's exchange in flight, and ours told."""
        view = self.relay_view()
        return (
            view["mesh_peers"] >= min_mesh_peers
            and view["mesh_lists_known"] == view["mesh_peers"]
            and not view["asking"]
            and bool(view["told_current"])
        )

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
            "exchange_quiet": len(self._exchange_quiet_until),
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


def _doubled_pause(current_s: float, *, reset: bool, fast_s: float, cap_s: float) -> float:
    """The backoff both background loops use: `fast_s` on `reset`, else double, capped at `cap_s`."""
    if reset:
        return fast_s
    return min(cap_s, max(fast_s, current_s * 2))


def next_upkeep_pause(current_s: float, *, changed: bool, fast_s: float, settled_s: float) -> float:
    """The pause before the next upkeep tick: `fast_s` after a tick that saw a change, else
    double, capped at `settled_s` (never below `fast_s`)."""
    return _doubled_pause(current_s, reset=changed, fast_s=fast_s, cap_s=max(fast_s, settled_s))


# Tells are at least this far apart: a peer that connects and disconnects over and over would
# otherwise have us open a stream to every mesh peer about once a second.
TELL_MIN_GAP_S = 2.0


def tell_due(*, differs: bool, still_changing: bool, since_last_s: float, max_wait_s: float) -> bool:
    """Whether a node tells its mesh peers whom it is connected to now (upkeep, each tick):
    only if that differs from what it last told them and the last tell is `TELL_MIN_GAP_S`
    old; then once the connections have stopped changing (this tick saw none), or while they
    keep changing once `max_wait_s` has passed since the last tell."""
    if not differs or since_last_s < TELL_MIN_GAP_S:
        return False
    return not still_changing or since_last_s >= max_wait_s


def next_exchange_interval(
    current_s: float, *, learned: int, connected: int, fast_s: float, slow_s: float
) -> float:
    """The pause before the next peer exchange: back to `fast_s` when the last one taught us a
    new peer or we have no connection, else double, capped at `slow_s`."""
    return _doubled_pause(current_s, reset=learned > 0 or connected == 0, fast_s=fast_s, cap_s=slow_s)


def _protocol_not_supported(error: BaseException) -> bool:
    """Whether multistream negotiation failed because the remote refused the protocol.
    py-libp2p 0.8.1 raises StreamFailure from a MultiselectClientError whose only mark of
    the cause is its text ("protocols not supported: ..."); it drops the typed
    ProtocolNotSupportedError it caught."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ProtocolNotSupportedError) or (
            isinstance(current, MultiselectClientError) and "protocols not supported" in str(current)
        ):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _remote_peer(stream: Any) -> str:
    try:
        return stream.muxed_conn.peer_id.to_base58()
    except Exception:
        return "?"


async def _quiet_close(stream: Any) -> None:
    try:
        await stream.close()
    except Exception:
        pass


async def _quiet_reset(stream: Any) -> None:
    try:
        await stream.reset()
    except Exception:
        pass


def dialable_addrs(addrs: Sequence[Any]) -> list[str]:
    """Transport multiaddrs with wildcard hosts expanded to concrete interface addresses
    (py-libp2p's own expansion), /p2p suffixes removed, order kept, duplicates dropped."""
    dialable: list[str] = []
    for addr in addrs:
        ma = multiaddr.Multiaddr(str(addr))
        if multiaddr.protocols.P_P2P in {protocol.code for protocol in ma.protocols()}:
            ma = ma.decapsulate_code(multiaddr.protocols.P_P2P)
        first = ma.protocols()[0]
        wildcard = first.code in _IP_CODES and ma.value_for_protocol(first.code) in ("0.0.0.0", "::")
        for concrete in expand_wildcard_address(ma) if wildcard else [ma]:
            text = str(concrete)
            if wildcard and text == str(ma):  # no interface found: only this host can dial it
                text = text.replace("/ip4/0.0.0.0/", "/ip4/127.0.0.1/").replace("/ip6/::/", "/ip6/::1/")
            if text not in dialable:
                dialable.append(text)
    return dialable


_IP_CODES = (multiaddr.protocols.P_IP4, multiaddr.protocols.P_IP6)


def connection_config(settings: NetworkSettings) -> ConnectionConfig:
    """py-libp2p's connection manager settings for a swarm node (see NetworkSettings).

    min_connections 0: below it the AutoConnector (when on) polls every 10 s instead of every
    `auto_connect_interval`, and the inbound limiter reserves that many slots for its dials."""
    return ConnectionConfig(
        max_connections=settings.max_connections,
        min_connections=0,
        low_watermark=settings.conn_low_watermark,
        high_watermark=settings.conn_high_watermark,
        dial_timeout=settings.dial_timeout_s,
    )


class UpkeepOwnsDialing(AutoConnector):
    """py-libp2p's AutoConnector with its dialing switched off: `LibP2PNetwork._upkeep_loop`
    owns dialing (peer book, pinned bootstrap peers, per-peer backoff, stale-connection cleanup).

    The stock one ran `maybe_connect` every 10 s and after every disconnect, scanned the
    peerstore and logged "initiating N new dials" at INFO each time, in every node process.
    Bookkeeping calls (`record_disconnect`, cooldowns) keep working, so py-libp2p code that
    calls them is unaffected."""

    async def run_background_task(self, nursery: trio.Nursery) -> None:
        return

    async def maybe_connect(self) -> None:
        return


def _configure_connection_manager(host: IHost, settings: NetworkSettings) -> None:
    """Swap in the dial-less AutoConnector before the host runs (the swarm starts whatever
    `auto_connector` holds when `host.run` begins)."""
    if settings.libp2p_default_connection_manager or settings.libp2p_auto_connect:
        return
    swarm = host.get_network()
    config = getattr(swarm, "connection_config", None)
    interval = getattr(config, "auto_connect_interval", 30.0)
    swarm.auto_connector = UpkeepOwnsDialing(swarm, auto_connect_interval=interval)  # type: ignore[attr-defined]


def _quiet_auto_connector(host: Any) -> None:
    """Keep py-libp2p's auto-connector from dialing while we shut down.

    In py-libp2p 0.8.1 the disconnects caused by our own teardown trigger the auto-connector,
    which then starts dials in a nursery that is already closing and fails the whole host with
    "Nursery is closed to new arrivals" (seen as a rare teardown error in CI). Its trigger is a
    no-op while it believes a connect round is in progress, so mark it so.
    """
    auto_connector = getattr(host.get_network(), "auto_connector", None)
    if auto_connector is not None:
        auto_connector._is_connecting = True


@asynccontextmanager
async def open_libp2p_network(
    key_pair: KeyPair, settings: NetworkSettings | None = None
) -> AsyncIterator[LibP2PNetwork]:
    """Start a host listening on `settings.listen`, with gossip, DHT and upkeep; stop it on exit."""
    settings = settings or NetworkSettings()
    try:
        listen = [multiaddr.Multiaddr(addr) for addr in settings.listen]
    except Exception as error:
        raise ValueError(f"bad listen multiaddr in {settings.listen!r}: {error}") from error
    bootstrap = []
    for text in settings.bootstrap:
        bootstrap.append(text)
        parse_peer_multiaddr(text)  # fail fast with a clear message
    counters = DropCounters()
    # Per-RPC costs of py-libp2p that redo known work: yamux credit, yamux's environment knobs,
    # the service manager's parent-task walk and signed peer records (each module says what and why).
    yamux_credit.install()
    yamux_knobs.install()
    task_parents.install()
    # Inbound connection slots held until the host stops, not until the connection closes.
    inbound_slots.install()
    if settings.libp2p_default_connection_manager:
        host = new_host(key_pair=key_pair, listen_addrs=listen)
    else:
        host = new_host(key_pair=key_pair, listen_addrs=listen, connection_config=connection_config(settings))
    _configure_connection_manager(host, settings)
    if settings.tcp_rto_min_ms:
        host.get_network().register_notifee(
            LossRecoveryTuner(counters, settings.tcp_rto_min_ms, settings.tcp_delack_max_ms)
        )
    memoize_signed_records().count_refusals(host, counters)
    pubsub = build_gossip(host, settings, counters)
    dht, record_validator = build_dht(
        host,
        settings.dht_namespace,
        settings.max_dht_value_bytes,
        counters,
        record_ttl_s=settings.dht_record_ttl_s,
        max_records=settings.max_dht_records,
        max_bytes=settings.max_dht_bytes,
        max_records_per_owner=settings.max_dht_records_per_owner,
        max_bytes_per_owner=settings.max_dht_bytes_per_owner,
        stream_idle_s=settings.dht_stream_idle_s,
    )
    async with host.run(listen_addrs=listen):
        # The router's own service is what runs the gossipsub heartbeat (message-cache shifts, mesh
        # upkeep, IHAVE gossip, fanout expiry, score decay); Pubsub's service does not start it.
        async with (
            background_trio_service(pubsub),
            background_trio_service(pubsub.router),
            background_trio_service(dht),
        ):
            await pubsub.wait_until_ready()
            async with trio.open_nursery() as nursery:
                network = LibP2PNetwork(host, pubsub, dht, record_validator, settings, counters, nursery)
                for text in bootstrap:
                    network.add_bootstrap(text)
                nursery.start_soon(network._upkeep_loop)
                nursery.start_soon(network._peer_exchange_loop)
                try:
                    yield network
                finally:
                    nursery.cancel_scope.cancel()
                    _quiet_auto_connector(host)
