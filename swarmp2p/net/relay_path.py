"""py-libp2p 0.8.1's `GossipSub.publish`, decision for decision, at a fraction of its cost.

`publish` runs for every message a node sees first: its own, and every message it relays. In a
swarm where everyone is connected to everyone, a relay usually sends nothing (its targets hold
the author's flood publish: net/neighbours.py), yet upstream's version still cost ~260 us of CPU
a message (bench/bench_gossip_round.py at 20 nodes: ~17% of a round). Most of that was work
whose answer is "nobody":
- the queue for peers whose subscription has not arrived yet: two loops over every connected
  peer, building a peer `ID` per peer per message (~0.6 million `ID.__hash__` calls in six
  20-node rounds). Here: set differences, and only the peers they leave are looked at;
- the RPC that wraps the message (a copy of it) and its signed peer record, built before
  anyone needs them. Here: built on first use;
- IDONTWANT to mesh peers that speak gossipsub v1.2, looked for message by message. Here: only
  when a connected peer speaks v1.2 or later at all;
- a timestamp per delivered message that only adaptive gossip reads and only adaptive gossip
  prunes. Off (net/gossip.py turns adaptive gossip off), nothing ever pruned it: one float per
  message for the node's lifetime. Here: kept only when adaptive gossip is on.

The decisions (who is sent the message, who has it queued, what the message cache holds, the
spam and equivocation checks) are upstream's; tests/net/test_net_relay_path.py compares them with
upstream's own `publish` over generated router states.
"""

from __future__ import annotations

import time
from typing import Any

from libp2p.peer.id import ID
from libp2p.pubsub import gossipsub as upstream
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub

_IDONTWANT_SPEAKERS = frozenset(
    (upstream.PROTOCOL_ID_V12, upstream.PROTOCOL_ID_V13, upstream.PROTOCOL_ID_V14, upstream.PROTOCOL_ID_V20)
)


class LeanPublishGossipSub(upstream.GossipSub):
    """GossipSub whose `publish` makes upstream's decisions without upstream's per-peer work."""

    async def publish(self, msg_forwarder: ID, pubsub_msg: rpc_pb2.Message) -> None:
        """Forward a new, validated message: upstream's steps in upstream's order."""
        pubsub = self.pubsub
        if pubsub is None:  # not attached: upstream's own path (and its error)
            await super().publish(msg_forwarder, pubsub_msg)
            return
        if not self._check_spam_protection(msg_forwarder, pubsub_msg):
            return
        if not self._check_equivocation(pubsub_msg):
            return
        self.mcache.put(pubsub_msg)
        msg_id = pubsub.get_message_id(pubsub_msg)
        origin = ID(pubsub_msg.from_id)
        topics = pubsub_msg.topicIDs
        targets = self._get_peers_to_send(topics, msg_forwarder=msg_forwarder, origin=origin, msg_id=msg_id)
        wrapped: list[rpc_pb2.RPC] = []

        def rpc() -> rpc_pb2.RPC:
            if not wrapped:
                rpc_msg = rpc_pb2.RPC(publish=[pubsub_msg])
                if isinstance(pubsub, Pubsub):
                    # Looked up on the module at call time: net/signed_records.py memoizes it there.
                    rpc_msg.senderRecord = upstream.env_to_send_in_RPC(pubsub.host)[0]
                wrapped.append(rpc_msg)
            return wrapped[0]

        if not _IDONTWANT_SPEAKERS.isdisjoint(self.peer_protocol.values()):
            await self._emit_idontwant_for_message(msg_id, topics)
        await self._notify_observers(topics, msg_id)

        connected = pubsub.peers
        scorer = self.scorer
        for peer_id in targets:
            if peer_id not in connected:
                continue
            if scorer is not None and not scorer.allow_publish(peer_id, list(topics)):
                continue
            self.send_rpc(peer_id, rpc())

        # Upstream queues the message for peers not ready for it yet, to be flushed when they
        # are: (1) peers in the topic whose gossipsub protocol is not known yet, (2) connected
        # peers whose subscription to the topic has not arrived. Never the forwarder or the
        # author, never a direct peer, each peer once.
        left_out = (msg_forwarder, origin)
        queued: set[ID] = set()

        def queue(candidates: Any) -> None:
            for peer_id in candidates:
                if peer_id in left_out or peer_id in self.direct_peers or peer_id in queued:
                    continue
                self._prune_pending_messages(peer_id)
                self._pending_messages[peer_id].append((time.time(), rpc()))
                queued.add(peer_id)

        for topic in topics:
            in_topic = pubsub.peer_topics.get(topic)
            if in_topic is not None:
                queue(in_topic.difference(self.peer_protocol))
                queue(connected.keys() - in_topic)
            else:
                queue(list(connected))

        now = time.time()
        for topic in topics:
            self.time_since_last_publish[topic] = int(now)
            if self.adaptive_gossip_enabled:  # its only reader, and the only place it is pruned
                self.recent_message_deliveries[topic].append(now)
