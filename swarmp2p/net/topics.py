"""Gossip topics as the node sees them: publishing with the size rule, subscribing into
PriorityInboxes (established senders keep their place in a full one), and topic validators
whose rejections are counted by reason and never forwarded. The gossipsub router itself is
gossip.py's."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID

from swarmp2p.net.counters import DropCounters
from swarmp2p.net.gossip import CountingPubsub
from swarmp2p.net.peer_addrs import base58_of
from swarmp2p.net.priority_inbox import DROPPED, EVICTED, PriorityInbox
from swarmp2p.net.settings import NetworkSettings
from swarmp2p.ports import InboundMessage, NetworkError

logger = logging.getLogger(__name__)

GossipCheck = Callable[[str, bytes], str | None]
"""(origin peer id, message data) -> None to accept, or the reason to reject."""


class Topics:
    """The gossip topics of one host."""

    def __init__(
        self,
        host: IHost,
        pubsub: CountingPubsub,
        settings: NetworkSettings,
        counters: DropCounters,
        nursery: trio.Nursery,
    ) -> None:
        self.host = host
        self.pubsub = pubsub
        self.settings = settings
        self.counters = counters
        self._nursery = nursery
        self._peer_id = host.get_id().to_base58()
        self._receivers: dict[str, list[PriorityInbox[InboundMessage]]] = {}
        self._vouched: Callable[[str], bool] | None = None  # see set_priority
        pubsub.established_origin = self.is_established
        # Gossip our topic validators rejected (never forwarded), by reason.
        self.rejections: Counter[str] = Counter()

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
        receivers = self._receivers.get(topic)
        if receivers is None:
            receivers = self._receivers[topic] = []
            subscription = await self.pubsub.subscribe(topic)
            self._nursery.start_soon(self._pump, topic, subscription)
        receivers.append(inbox)
        return inbox

    def set_priority(self, established: Callable[[str], bool]) -> None:
        """Which origins' gossip keeps its place in a full inbox besides connected peers: the
        node vouches for senders with a history (protocol.admission's `Inbox.established`)."""
        self._vouched = established

    def is_established(self, origin: bytes) -> bool:
        """A connected peer, or one the node vouches for. Never raises (a garbled id: no)."""
        try:
            if ID(origin) in self.host.get_network().connections:
                return True
            vouched = self._vouched
            return vouched is not None and bool(vouched(base58_of(origin)))
        except Exception:
            return False

    async def _pump(self, topic: str, subscription: Any) -> None:
        """Move messages from libp2p's subscription inbox to every receiver's, counting what a
        full one drops or evicts."""
        async for message in subscription:
            try:
                sender = base58_of(message.from_id)
            except Exception:
                continue  # strict signing already rejected unsigned/garbled senders; belt and braces
            if sender == self._peer_id:
                continue  # gossip does not echo our own publishes back to us
            inbound = InboundMessage(topic=topic, transport_sender=sender, data=bytes(message.data))
            established = self.is_established(message.from_id)
            for inbox in self._receivers.get(topic, []):
                outcome = inbox.put(inbound, established)
                if outcome == DROPPED:
                    self.counters.add("inbound_channel_full")
                elif outcome == EVICTED:
                    self.counters.add("inbound_channel_evicted_unknown")

    def set_validator(self, topic: str, check: GossipCheck, *, deliver_rejected: bool = False) -> None:
        """Run `check(origin peer id, data)` on every gossip message of `topic` before it is
        delivered or forwarded: None accepts it, a string rejects it for that reason (an
        exception: reason "validator_error"). A rejected message is NEVER forwarded to other
        peers (py-libp2p 0.8.1's validators return a bool; False raises its ValidationError,
        which stops the relay and scores the forwarder down), and is counted in `rejections`
        by reason. `deliver_rejected=True` still hands it to our own subscribers, for a node
        whose own checks count and blame what it receives. Our own publishes are not checked."""
        my_id = self.host.get_id().to_bytes()
        rejections = self.rejections

        def validator(forwarder: ID, msg: Any) -> bool:
            try:
                origin = msg.from_id
                if origin == my_id:
                    return True
                reason = check(base58_of(origin), bytes(msg.data))
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
