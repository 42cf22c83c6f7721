"""Gossipsub for py-libp2p 0.8.1, configured and instrumented so that nothing is dropped silently.

py-libp2p drops in several places without raising: the per-peer publish rate limit, the per-peer
outbound RPC queue (32), the per-subscription delivery queue (32), adaptive heartbeat
stretching (up to 60 s), and inbound messages that are unsigned, wrongly signed, refused by a
topic validator or gated by the peer scorer (debug log only). The subclasses raise those
limits from settings and count every drop that still happens, so the node can report it.

Here: the Pubsub (what is accepted, delivered and relayed; the read loop of gossip streams) and
building it. The router (mesh, relays, flood publish) is gossip_router.py's; the bounded
per-peer and per-message tables gossip_bounds.py's.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import trio
from libp2p.abc import IHost
from libp2p.exceptions import ParseError, ValidationError
from libp2p.io.exceptions import IncompleteReadError
from libp2p.network.stream.exceptions import StreamError
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.validators import signature_validator

from swarmp2p.net.counters import DropCounters
from swarmp2p.net.gossip_bounds import CappedSeenCache, RefusalsOnlyValidationCache, SizedOutboundQueues
from swarmp2p.net.gossip_router import CountingGossipSub
from swarmp2p.net.origin_limit import OriginRateLimiter
from swarmp2p.net.priority_inbox import DROPPED, EVICTED, PriorityInbox
from swarmp2p.net.settings import NetworkSettings

logger = logging.getLogger(__name__)

# /meshsub/1.1.0 first: measured to interoperate with go-libp2p and js-libp2p; offering only
# 1.2.0 fails against go. 1.0.0 stays as the floor every implementation speaks.
GOSSIP_PROTOCOLS = (PROTOCOL_ID_V11, PROTOCOL_ID)

READ_AHEAD_BYTES = 64 * 1024
"""What one read of a gossip stream asks for (`_WatchedStream.read`). py-libp2p's read loop takes
each RPC's varint length a byte at a time, then its body: three reads through the stream's and
yamux's locks for one message. Read ahead, the bytes that have arrived serve them all: 0.93x CPU
per message for one node streaming to another, no gain seen in a 20-node round, where a stream
carries one message a round (bench/bench_gossip_round.py, docs/node.md). The bound is what a
stream holds beyond yamux's own window."""


class CountingPubsub(Pubsub):
    """Pubsub with bigger, counted per-peer and per-subscription queues."""

    def __init__(
        self,
        host: IHost,
        router: GossipSub,
        *,
        counters: DropCounters,
        outbound_queue_size: int,
        subscription_queue_size: int,
        max_seen_messages: int = 65536,
        origin_limiter: OriginRateLimiter | None = None,
        forwarder_limiter: OriginRateLimiter | None = None,
        relay_limiter: OriginRateLimiter | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(host, router, **kwargs)
        self.origin_limiter = origin_limiter
        self.forwarder_limiter = forwarder_limiter
        self.relay_limiter = relay_limiter  # one bucket (key b""): unknown origins we relay
        self._paused_until: dict[ID, float] = {}  # forwarders whose stream we do not read now
        self._reading: dict[ID, int] = {}  # peers with gossip streams being read: how many
        # Whose messages keep their place when a subscription's inbox is full (the adapter sets
        # it: connected peers and those the node vouches for).
        self.established_origin: Callable[[bytes], bool] = self._connected_origin
        self._my_id_bytes = self.my_id.to_bytes()
        stale_verdicts = self.validation_cache
        self.validation_cache = RefusalsOnlyValidationCache(stale_verdicts.ttl, stale_verdicts.max_size)
        stock = self.seen_messages
        self.seen_messages = CappedSeenCache(stock.ttl, stock.sweep_interval, max_seen_messages, counters)
        stock.stop()  # its sweeper thread
        self._drop_counters = counters
        self._subscription_queue_size = subscription_queue_size
        self.peer_queues = SizedOutboundQueues(outbound_queue_size, counters, self.my_id)
        # Topics whose messages a validator rejected are still delivered locally (never
        # forwarded): see LibP2PNetwork.set_gossip_validator.
        self.deliver_rejected_topics: set[str] = set()

    async def _handle_new_peer(self, peer_id: ID) -> None:
        """py-libp2p 0.8.1's, then the subscriptions that changed while it ran, to that peer.

        It builds the new peer's hello (our topics), awaits writing it, and only then registers
        the peer: a `subscribe` in between went to every registered peer but this one and was
        not in the hello either, so that peer never learned it (it then sent us nothing on the
        topic by flood publish; tests/net/test_net_adapter.py's star test lost one in ~25 runs
        under load). Resending a subscription the hello did carry is harmless."""
        topics_before = frozenset(self.topic_ids)
        await super()._handle_new_peer(peer_id)
        queue = self.peer_queues.get(peer_id)
        if queue is None or peer_id not in self.peers:
            return
        topics_now = frozenset(self.topic_ids)
        changes = [(topic, True) for topic in topics_now - topics_before]
        changes += [(topic, False) for topic in topics_before - topics_now]
        if changes:
            packet = rpc_pb2.RPC()
            for topic, subscribe in sorted(changes):
                packet.subscriptions.append(rpc_pb2.RPC.SubOpts(subscribe=subscribe, topicid=topic))
            queue.push(packet)

    async def subscribe(self, topic_id: str) -> Any:
        """py-libp2p 0.8.1's `Pubsub.subscribe`, step for step, with a PriorityInbox in place of
        its memory channel (see `notify_subscriptions`)."""
        if topic_id in self.topic_ids:
            return self.subscribed_topics_receive[topic_id]
        inbox: PriorityInbox[rpc_pb2.Message] = PriorityInbox(
            self._subscription_queue_size, unsubscribe=functools.partial(self.unsubscribe, topic_id)
        )
        self.subscribed_topics_send[topic_id] = inbox  # type: ignore[assignment]
        self.subscribed_topics_receive[topic_id] = inbox  # type: ignore[assignment]
        packet, subopt = self._build_announce_rpc(topic_id, subscribe=True)
        await self.message_all_peers(packet.SerializeToString(), announce=subopt)
        await self.router.join(topic_id)
        return inbox

    async def continuously_read_stream(self, stream: Any) -> None:
        """py-libp2p's read loop for one peer's gossip stream, with its two silent or fatal
        exits counted. An RPC frame over the 1 MiB limit ends the loop with only a warning (it
        resets the stream: that reset is how we see it). A frame that is not a protobuf RPC
        raised DecodeError out of the stream handler and the host's nursery: one frame from any
        connected peer stopped the whole node. Both now drop the stream and the peer, counted."""
        watched = _WatchedStream(stream, self)
        peer_id = getattr(getattr(stream, "muxed_conn", None), "peer_id", None)
        if peer_id is not None:
            self._reading[peer_id] = self._reading.get(peer_id, 0) + 1
        try:
            try:
                await super().continuously_read_stream(watched)
            except ParseError:
                self._drop_counters.add("gossip_rpc_garbage")  # a length prefix that is no varint
                raise  # Pubsub.stream_handler drops the stream and the peer, as before
            except (StreamError, IncompleteReadError):
                raise  # the stream broke or ended: Pubsub.stream_handler drops it, as before
            except Exception as error:
                self._drop_counters.add("gossip_rpc_garbage")
                logger.debug("unreadable gossip RPC from %s: %r", _stream_peer(stream), error)
                try:
                    await stream.reset()
                except Exception:
                    pass
                peer_id = getattr(getattr(stream, "muxed_conn", None), "peer_id", None)
                if peer_id is not None:
                    self._handle_dead_peer(peer_id)
                return
            if watched.was_reset:
                self._drop_counters.add("gossip_rpc_oversized")
        finally:
            # What had arrived but was never read is gone with the stream: py-libp2p clears a
            # closed connection's yamux buffers, and a peer that left while we paused reading it
            # took thousands of messages with it, counted nowhere.
            unread = watched.unread_messages()
            if unread:
                self._drop_counters.add("gossip_unread_when_peer_left", unread)
            # A pause guards the reads of a peer's streams: kept after the last one ended, it
            # would outlive the peer (an entry per forwarder ever paused). A peer that comes
            # back and still forwards past its allowance is paused again by its bucket, which
            # the forwarder limiter keeps.
            if peer_id is not None:
                left = self._reading.pop(peer_id, 1) - 1
                if left > 0:
                    self._reading[peer_id] = left
                else:
                    self._paused_until.pop(peer_id, None)

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        """py-libp2p 0.8.1's `Pubsub.push_msg`, step for step, with a counter on every drop.

        The original drops messages with a bad or missing signature, messages a topic validator
        refuses, messages its peer scorer gates and messages that claim to come from us, each
        with only a debug log. It also lets an exception from the signature check (a garbage
        public key in the message) escape into the pubsub service. Duplicates (already seen)
        are not drops; they are counted apart (`gossip_seen_duplicate`) so a replay flood shows.
        Ahead of all of it, the forwarder's own allowance (`_forwarder_allowed`)."""
        if not self._forwarder_allowed(msg_forwarder, msg):
            return
        if self.is_peer_blacklisted(msg_forwarder) or self.is_peer_blacklisted(ID(msg.from_id)):
            self._drop_counters.add("gossip_blacklisted")
            return
        if self._is_msg_seen(msg):
            self._drop_counters.add("gossip_seen_duplicate")
            return
        limiter = self.origin_limiter
        if limiter is not None and msg.from_id != self._my_id_bytes and not limiter.allow(msg.from_id):
            # Before the signature check and the node's decode: a flooding key costs a lookup.
            self._drop_counters.add("gossip_origin_rate_limited")
            return
        scorer = getattr(self.router, "scorer", None)
        try:
            gated = scorer is not None and not scorer.allow_publish(msg_forwarder, list(msg.topicIDs))
        except Exception:
            gated = False  # as upstream: a router without scoring gates nothing
        if gated:
            self._drop_counters.add("gossip_score_gated")
            return
        if self.strict_signing and not _signature_ok(msg):
            self._drop_counters.add("gossip_bad_signature")
            return
        try:
            await self.validate_msg(msg_forwarder, msg)
        except ValidationError:
            self._drop_counters.add("gossip_validator_rejected")
            if scorer is not None:
                for topic in msg.topicIDs:
                    scorer.on_invalid_message(msg_forwarder, topic)
            if self.deliver_rejected_topics.intersection(msg.topicIDs) and ID(msg.from_id) != self.my_id:
                # Never forwarded, but handed to the node, whose own checks count the reason
                # and blame (and ban) the sender as they always have. Marked seen, so the
                # sender's repeats are deduplicated as they were before the validator.
                self._mark_msg_seen(msg)
                self.notify_subscriptions(msg)
            return
        self._mark_msg_seen(msg)
        if scorer is not None:
            for topic in msg.topicIDs:
                scorer.on_first_delivery(msg_forwarder, topic)
        if ID(msg.from_id) == self.my_id and msg_forwarder != self.my_id:
            # Our own message replayed to us after the seen-cache forgot it.
            self._drop_counters.add("gossip_replayed_own")
            return
        established = self.notify_subscriptions(msg)
        if not self._relay_allowed(msg, established):
            self._drop_counters.add("gossip_relay_unknown_limited")
            return
        await self.router.publish(msg_forwarder, msg)

    def _relay_allowed(self, msg: rpc_pb2.Message, established: bool | None) -> bool:
        """Whether to forward `msg` (already delivered here): always for our own and established
        origins, for unknown origins within the relay budget (settings.relay_unknown_rate_per_s).
        `established`: the verdict `notify_subscriptions` already reached (None: it had none)."""
        limiter = self.relay_limiter
        if limiter is None or msg.from_id == self._my_id_bytes:
            return True
        if established is None:
            established = self.established_origin(msg.from_id)
        return established or limiter.allow(b"")

    def _forwarder_allowed(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """A connected peer past its allowance: this message is dropped (counted
        `gossip_forwarder_rate_limited`) and the peer's stream is not read again until its
        bucket has refilled for a while (`_WatchedStream.read`), so its further frames stay in
        its yamux window and socket and its writes block. py-libp2p runs every inbound message
        in a task of its own, so the read loop is the only place that can push back. Dropping
        without pausing was not enough: at ~14,000 messages a second from one host, the
        decryption, framing and parsing alone kept the process at 100% CPU and both honest
        peers lost 3 rounds of each other's rollouts (tests/net/test_net_attacks.py)."""
        limiter = self.forwarder_limiter
        if limiter is None or forwarder == self.my_id:
            return True
        # An established origin's messages (the forwarder's own, or a connected or vouched-for
        # peer's) never count against the forwarder: an honest neighbour that relays a flood
        # must not have its own announcement dropped with it (one round lost in the flood test).
        # The origins' own buckets and the seen-cache still apply to them.
        if self.established_origin(msg.from_id) or limiter.allow(forwarder.to_bytes()):
            return True
        self._drop_counters.add("gossip_forwarder_rate_limited")
        if forwarder not in self._reading:
            return False  # its stream has ended (this message was read before): nothing to pause
        if self._paused_until.get(forwarder, 0.0) <= time.monotonic():
            self._drop_counters.add("gossip_forwarder_paused")
            self._paused_until[forwarder] = time.monotonic() + min(limiter.burst, 100.0) / limiter.rate_per_s
        return False

    def read_paused_until(self, forwarder: ID) -> float:
        """time.monotonic() before which `forwarder`'s gossip stream is not read (0: not paused)."""
        until = self._paused_until.get(forwarder, 0.0)
        if until and until <= time.monotonic():
            del self._paused_until[forwarder]
            return 0.0
        return until

    def _is_subscribed_to_msg(self, msg: rpc_pb2.Message) -> bool:
        """py-libp2p's test in its read loop, which skips a message on topics we do not subscribe
        to without a word; counted here."""
        subscribed = super()._is_subscribed_to_msg(msg)
        if not subscribed:
            self._drop_counters.add("gossip_unsubscribed_topic")
        return subscribed

    def notify_subscriptions(self, publish_message: rpc_pb2.Message) -> bool | None:
        """Into the topic's PriorityInbox: when it is full, an established origin's message
        (`established_origin`) takes the place of an unknown origin's (counted
        `gossip_subscription_evicted_unknown`), else the arriving message is dropped
        (`gossip_subscription_queue_full`). Before, a flood of throwaway keys filled the queue
        and honest announcements arriving after it were dropped with the junk. Returns whether
        the origin is established (None: no subscribed topic, not asked), so that `push_msg`'s
        relay decision does not ask again (for an unknown origin, a peer-id encoding per ask)."""
        established: bool | None = None
        for topic in publish_message.topicIDs:
            if topic in self.topic_ids:
                if established is None:
                    established = self.established_origin(publish_message.from_id)
                inbox = self.subscribed_topics_send[topic]
                outcome = inbox.put(publish_message, established)  # type: ignore[attr-defined]
                if outcome == DROPPED:
                    self._drop_counters.add("gossip_subscription_queue_full")
                elif outcome == EVICTED:
                    self._drop_counters.add("gossip_subscription_evicted_unknown")
        return established

    def _connected_origin(self, from_id: bytes) -> bool:
        """The default `established_origin`: a peer we hold a connection to."""
        try:
            return ID(from_id) in self.host.get_network().connections
        except Exception:
            return False


class _WatchedStream:
    """A gossip stream as py-libp2p's read loop sees it: noting whether the loop reset it (it
    does only when an inbound RPC exceeds its size limit), not read while its peer is paused
    for forwarding past its allowance (`CountingPubsub._forwarder_allowed`), and read ahead
    (`READ_AHEAD_BYTES`): a read returns the same bytes in the same order as the stream's own,
    never more than asked, short only where nothing more has arrived."""

    def __init__(self, stream: Any, pubsub: CountingPubsub) -> None:
        self._stream = stream
        self._pubsub = pubsub
        self._peer_id = getattr(getattr(stream, "muxed_conn", None), "peer_id", None)
        self.was_reset = False
        self._ahead = b""  # read from the stream, not yet returned: self._ahead[self._at:]
        self._at = 0
        # Where the reader is in the stream's frames (a varint length, then that many bytes), so
        # that what is left unread can be split into frames when the stream ends: the chunks
        # returned of the frame being read, its length's value and shift while the length is
        # being read, and its body's bytes still to come (None: reading the length).
        self._frame: list[bytes] = []
        self._length = 0
        self._shift = 0
        self._body_left: int | None = None
        self._lost_track = False  # a length no varint decoder takes: the reader gives up too
        self._muxer_buffer = _yamux_receive_buffer(stream)

    async def read(self, n: int | None = None) -> bytes:
        if self._peer_id is not None:
            # Checked before buffered bytes are served too: a paused peer's RPCs wait.
            until = self._pubsub.read_paused_until(self._peer_id)
            if until:
                await trio.sleep(max(0.0, until - time.monotonic()))
        if n == 0:
            return b""
        data = await self._read(n)
        if data and not self._lost_track:
            self._track(data)
        return data

    async def _read(self, n: int | None) -> bytes:
        ahead = self._ahead
        if ahead:
            at = self._at
            end = len(ahead) if n is None or n < 0 else min(len(ahead), at + n)
            if end == len(ahead):
                self._ahead, self._at = b"", 0
            else:
                self._at = end
            return ahead[at:end]
        if n is None or n < 0:
            return await self._stream.read(n)  # type: ignore[no-any-return]
        data: bytes = await self._stream.read(max(n, READ_AHEAD_BYTES))
        if len(data) <= n:
            return data
        self._ahead, self._at = data, n
        return data[:n]

    def _track(self, data: bytes) -> None:
        """Follow the frame boundaries through `data`, the next bytes handed to the reader. The
        reader takes a length a byte at a time and a body in one or a few reads, so this is a
        step or two per read."""
        start = 0  # where the frame being read begins in `data`
        pos = 0
        size = len(data)
        while pos < size:
            body_left = self._body_left
            if body_left is None:
                byte = data[pos]
                pos += 1
                self._length |= (byte & 0x7F) << self._shift
                self._shift += 7
                if byte & 0x80:
                    if self._shift >= 64:
                        self._lost_track = True
                        self._frame.clear()
                        return
                    continue
                body_left = self._body_left = self._length
            else:
                take = min(body_left, size - pos)
                pos += take
                body_left = self._body_left = body_left - take
            if body_left == 0:  # a whole frame handed over
                self._frame.clear()
                self._length = self._shift = 0
                self._body_left = None
                start = pos
        if start < size:
            self._frame.append(data if start == 0 else data[start:])

    def unread_messages(self) -> int:
        """Messages in the whole gossip RPC frames that had arrived and were not read: the frame
        being read (from its start), what was read ahead, and what the muxer still buffered.
        A frame cut short (its sender stopped in the middle) had not arrived, and is not counted."""
        if self._lost_track:
            return 0
        buffered = self._muxer_buffer
        if not self._frame and self._at >= len(self._ahead) and not buffered:
            return 0
        unread = b"".join(self._frame) + self._ahead[self._at :] + (bytes(buffered) if buffered else b"")
        return _messages_in_frames(unread)

    async def reset(self) -> None:
        self.was_reset = True
        await self._stream.reset()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _yamux_receive_buffer(stream: Any) -> bytearray | None:
    """The bytes yamux holds for `stream` that nobody has read yet (None: not a yamux stream).
    Yamux keeps one bytearray per stream and, when the connection closes, drops it from its
    table without emptying it: holding it here keeps what was left in it readable."""
    try:
        muxed = stream.muxed_stream
        buffer = muxed.conn.stream_buffers.get(muxed.stream_id)
    except Exception:
        return None
    return buffer if isinstance(buffer, bytearray) else None


def _messages_in_frames(data: bytes) -> int:
    """How many published messages the whole length-prefixed RPC frames at the start of `data`
    carry; stops at a frame that is cut short or is not an RPC."""
    count = 0
    pos = 0
    size = len(data)
    while pos < size:
        length = shift = used = 0
        for byte in data[pos : pos + 10]:
            length |= (byte & 0x7F) << shift
            shift += 7
            used += 1
            if not byte & 0x80:
                break
        else:
            break  # the length itself is cut short (or longer than 10 bytes)
        end = pos + used + length
        if end > size:
            break
        rpc = rpc_pb2.RPC()
        try:
            rpc.ParseFromString(data[pos + used : end])
        except Exception:
            break
        count += len(rpc.publish)
        pos = end
    return count


def _stream_peer(stream: Any) -> str:
    try:
        return str(stream.muxed_conn.peer_id)
    except Exception:
        return "?"


def _signature_ok(msg: rpc_pb2.Message) -> bool:
    try:
        return bool(signature_validator(msg))
    except Exception:  # an undecodable public key in msg.key
        return False


def build_gossip(host: IHost, settings: NetworkSettings, counters: DropCounters) -> CountingPubsub:
    router = CountingGossipSub(
        counters=counters,
        flood_publish=settings.flood_publish,
        protocols=list(GOSSIP_PROTOCOLS),
        degree=settings.mesh_degree,
        degree_low=settings.mesh_degree_low,
        degree_high=settings.mesh_degree_high,
        heartbeat_initial_delay=0.1,
        heartbeat_interval=settings.heartbeat_s,  # type: ignore[arg-type]  # trio.sleep takes floats
        # Adaptive gossip stretches the heartbeat to 30-60 s when it judges the network unhealthy,
        # which is exactly when a short heartbeat matters.
        adaptive_gossip_enabled=False,
        max_messages_per_topic_per_second=settings.max_messages_per_topic_per_second,
        # IP-diversity grafting assumes peers on distinct hosts; on loopback every peer shares
        # 127.0.0.1 and it would churn the mesh for nothing.
        eclipse_protection_enabled=False,
        prune_back_off=10,
        pending_messages_ttl=settings.pending_gossip_ttl_s,
    )
    return CountingPubsub(
        host,
        router,
        counters=counters,
        outbound_queue_size=settings.outbound_queue_size,
        subscription_queue_size=settings.subscription_queue_size,
        origin_limiter=OriginRateLimiter(settings.origin_rate_per_s, settings.origin_burst),
        forwarder_limiter=OriginRateLimiter(
            settings.forwarder_rate_per_s, settings.forwarder_burst, max_origins=4096
        ),
        relay_limiter=OriginRateLimiter(settings.relay_unknown_rate_per_s, settings.relay_unknown_burst),
        max_seen_messages=settings.max_seen_messages,
        # Both sides must sign strictly: a signing-policy mismatch drops every message.
        strict_signing=True,
        # Peers that rejoin publish from seqno = their start time; the seen-cache just dedupes.
        seen_ttl=_SEEN_TTL_S,
        # py-libp2p caches each message id's validation result for 300 s by default: a replay
        # arriving after the seen-cache forgot it (120 s) but within those 300 s skipped our
        # topic validators (the cached "valid" stood) and was delivered and forwarded again.
        validation_cache_ttl=_SEEN_TTL_S,
    )


_SEEN_TTL_S = 120
