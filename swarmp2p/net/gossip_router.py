"""The gossipsub router of a swarm node: py-libp2p 0.8.1's GossipSub with flood publishing, relays
that skip the peers already holding a message from its author (net/neighbours.py), a mesh that
settles, and its spam refusals counted. The pubsub around it (validation, queues, stream reads)
is gossip.py's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from libp2p.peer.id import ID
from libp2p.pubsub import floodsub
from libp2p.pubsub.pb import rpc_pb2

from swarmp2p.net.counters import DropCounters
from swarmp2p.net.neighbours import NeighbourMap, backup_relay
from swarmp2p.net.relay_path import LeanPublishGossipSub

SKIPPED_IHAVE_TICKS = 3
"""Heartbeats between the IHAVEs announcing skipped relays. Every heartbeat cost ~15% more CPU
per process than none at 20 processes x 10 KB, every third ~5% (bench/bench_network.py); three
stays inside the message cache's history (5 heartbeats), from which an IWANT is answered."""

MAX_SKIPPED_IHAVE_IDS = 5000
"""Message ids one IHAVE may carry (go-libp2p's MaxIHaveLength): past it, relays are sent."""

OPPORTUNISTIC_GRAFT_TICKS = 60
"""Heartbeats between opportunistic grafting rounds (go-libp2p's OpportunisticGraftTicks)."""


class CountingGossipSub(LeanPublishGossipSub):
    """GossipSub that counts the messages its spam protection rejects, and flood-publishes.

    Flood publishing (gossipsub v1.1's `floodPublish`, on by default in go-libp2p, absent from
    py-libp2p 0.8.1): a peer's OWN messages go straight to every subscribed peer instead of its
    D mesh peers only; forwarding stays on the mesh. An announcement then reaches everyone in
    one hop rather than two or three, and each hop through a busy process costs tens of ms
    (bench/bench_network.py at 20 processes). The cost is N small sends per round per peer."""

    def __init__(self, *, counters: DropCounters, flood_publish: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._drop_counters = counters
        self.flood_publish = flood_publish
        self._heartbeats = 0
        # Set by the adapter (settings.skip_relay_to_origin_neighbours): whom our peers said
        # they are connected to, so a relay skips those that hold the author's flood publish.
        self.origin_neighbours: NeighbourMap | None = None
        # Set by the adapter (settings.relay_backup_copy): send each skipped peer one copy when
        # we are the relay `backup_relay` picks for it.
        self.relay_backup_copy = False
        # The relays skipped since the last heartbeat, announced to their peers by IHAVE then:
        # peer -> topic -> message ids (bounded by MAX_SKIPPED_IHAVE_IDS per peer).
        self._skipped_ihave: dict[ID, dict[str, list[bytes]]] = {}
        # Set by the adapter: called with each peer that joins our mesh on any topic (by our
        # join or heartbeat, or its GRAFT). From then on we relay to it (`_get_peers_to_send`).
        self.on_mesh_join: Callable[[ID], None] | None = None

    def _get_peers_to_send(
        self,
        topic_ids: Any,
        msg_forwarder: ID,
        origin: ID,
        msg_id: bytes | None = None,
    ) -> Any:
        pubsub = self.pubsub
        if pubsub is not None and origin != pubsub.my_id and len(topic_ids) == 1:
            topic = topic_ids[0]
            if topic in self.mesh and topic in pubsub.peer_topics:
                return self._relay_targets(topic, msg_forwarder, origin, msg_id)
        peers = set(super()._get_peers_to_send(topic_ids, msg_forwarder, origin, msg_id))
        if pubsub is None:
            return peers
        if origin != pubsub.my_id:
            return self._skip_origin_neighbours(peers, topic_ids, origin, msg_id)
        if not self.flood_publish:
            return peers
        for topic in topic_ids:
            for peer_id in pubsub.peer_topics.get(topic, ()):
                # Only peers speaking gossipsub/floodsub with us; never back to ourselves.
                if peer_id in self.peer_protocol and peer_id != origin:
                    peers.add(peer_id)
        return peers

    def _relay_targets(self, topic: str, msg_forwarder: ID, origin: ID, msg_id: bytes | None) -> set[ID]:
        """Whom to relay another author's message on one subscribed topic to: upstream's choice
        (direct peers, floodsub peers, and the mesh peers the scorer lets gossip; never the
        forwarder or the author; not peers that sent IDONTWANT for it) less the peers connected
        to the author (`_skip_origin_neighbours`), with one change of order: the peers skipped
        are skipped before the scorer is asked about them, and the scorer is asked when their
        IHAVE goes out instead (`gossip_heartbeat`). Upstream scored every mesh peer for every
        message, two score computations each, and in a swarm where all are connected all of
        them were then skipped (~35% of a relay's CPU)."""
        pubsub = self.pubsub
        assert pubsub is not None
        mesh = self.mesh[topic]
        ungated: set[ID] = set(self.direct_peers)
        protocols = self.peer_protocol
        if floodsub.PROTOCOL_ID in protocols.values():
            ungated.update(p for p in pubsub.peer_topics[topic] if protocols.get(p) == floodsub.PROTOCOL_ID)
        pool = set(mesh)
        pool.update(ungated)
        pool.discard(msg_forwarder)
        pool.discard(origin)
        dont_send = self.dont_send_message_ids
        if msg_id is not None and dont_send:
            pool = {p for p in pool if p not in dont_send or msg_id not in dont_send[p]}
        pool = self._skip_origin_neighbours(pool, (topic,), origin, msg_id)
        scorer = self.scorer
        if scorer is None or not pool:
            return pool
        return {p for p in pool if p in ungated or _may_gossip(scorer, p, topic)}

    def _skip_origin_neighbours(
        self, peers: set[ID], topic_ids: Any, origin: ID, msg_id: bytes | None
    ) -> set[ID]:
        """A relay's targets less the peers connected to the message's author, as they or the
        author told us (`NeighbourMap.linked`): the author flood-published it to them already
        (net/neighbours.py). Each skip is a duplicate not sent, counted
        `gossip_relay_skipped_origin_neighbour`.

        What a peer told us can be out of date (its connection to the author closed since), so
        every skipped message is still announced to that peer by IHAVE within a few heartbeats,
        all of them in one control message: a peer that lacks it asks (IWANT) and gets it a
        few heartbeats late instead of never. py-libp2p's heartbeat gossip goes to peers outside
        the mesh only, so without this a peer whose mesh peers all skipped it would have to
        wait for an outsider's gossip (tests/net/test_net_neighbours.py)."""
        neighbours = self.origin_neighbours
        if neighbours is None or not peers or msg_id is None:
            return peers
        by_bytes = {peer.to_bytes(): peer for peer in peers}
        skipped = backups = 0
        origin_bytes = origin.to_bytes()
        for peer_bytes in neighbours.linked_to(origin_bytes, by_bytes):
            peer = by_bytes[peer_bytes]
            if self.relay_backup_copy and self._is_backup_relay(neighbours, peer_bytes, origin_bytes, msg_id):
                backups += 1  # sent after all: its second path, should the author's copy be late
                continue
            pending = self._skipped_ihave.get(peer)
            if pending is None:
                pending = self._skipped_ihave[peer] = {}
            elif sum(map(len, pending.values())) >= MAX_SKIPPED_IHAVE_IDS:
                continue  # too many to announce in one IHAVE: send it instead
            for topic in topic_ids:
                pending.setdefault(topic, []).append(msg_id)
            peers.discard(peer)
            skipped += 1
        if skipped:
            self._drop_counters.add("gossip_relay_skipped_origin_neighbour", skipped)
        if backups:
            self._drop_counters.add("gossip_relay_backup_copy", backups)
        return peers

    def _is_backup_relay(
        self, neighbours: NeighbourMap, receiver: bytes, origin: bytes, msg_id: bytes
    ) -> bool:
        """Whether we are the relay that sends `receiver` its backup copy of `msg_id`: the one
        `backup_relay` picks among the receiver's neighbours other than the author, by the
        receiver's own list (without it, no relay can agree on one, and none sends)."""
        pubsub = self.pubsub
        told = neighbours.neighbours_of(receiver)
        if pubsub is None or not told:
            return False
        # A list may name its own peer (a peer-exchange answer lists the answering peer first):
        # never a candidate, or relays holding different kinds of list would disagree.
        candidates = (p for p in told if p != origin and p != receiver)
        return backup_relay(msg_id, candidates) == pubsub.my_id.to_bytes()

    def gossip_heartbeat(self) -> Any:
        """py-libp2p's heartbeat gossip (IHAVE to peers outside the mesh) less what those peers
        hold from the authors' flood publishes, plus, every `SKIPPED_IHAVE_TICKS` heartbeats, an
        IHAVE to each peer we skipped a relay to since (`_skip_origin_neighbours`)."""
        peers_to_gossip = super().gossip_heartbeat()
        self._drop_ids_their_authors_sent(peers_to_gossip)
        if self._heartbeats % SKIPPED_IHAVE_TICKS:
            return peers_to_gossip
        pending, self._skipped_ihave = self._skipped_ihave, {}
        connected = self.pubsub.peers if self.pubsub is not None else {}
        scorer = self.scorer
        for peer, topics in pending.items():
            if peer not in connected:
                continue
            for topic, ids in topics.items():
                if scorer is not None and not _may_gossip(scorer, peer, topic):
                    continue  # upstream would not have relayed to it: no IHAVE either (`_relay_targets`)
                announced = peers_to_gossip[peer].setdefault(topic, [])
                known = set(announced)
                announced.extend(mid for mid in ids if mid not in known)
        return peers_to_gossip

    def _drop_ids_their_authors_sent(self, peers_to_gossip: Any) -> None:
        """Take out of the heartbeat's IHAVEs the message ids whose author is connected to the
        receiving peer, as either told us (net/neighbours.py): the author flood-published them to it.
        An IHAVE left empty is not sent. In a swarm where everyone is connected to everyone,
        each heartbeat's IHAVEs to D_lazy (6) peers outside the mesh for 3 heartbeats after a
        round were as many RPCs as the round's messages, and all of it was known already. If
        what a peer told us is stale, the IHAVEs of its mesh peers' skipped relays still reach
        it (`_skip_origin_neighbours`)."""
        neighbours = self.origin_neighbours
        if neighbours is None:
            return
        messages = self.mcache.msgs
        for peer in list(peers_to_gossip):
            peer_bytes = peer.to_bytes()
            topics = peers_to_gossip[peer]
            for topic in list(topics):
                kept = []
                for mid in topics[topic]:
                    msg = messages.get(mid)
                    if msg is None or not neighbours.linked(peer_bytes, msg.from_id):
                        kept.append(mid)
                if kept:
                    topics[topic] = kept
                else:
                    del topics[topic]
            if not topics:
                del peers_to_gossip[peer]

    def mesh_heartbeat(self) -> tuple[Any, Any]:
        """py-libp2p's mesh upkeep, plus a backoff on every peer it prunes, as go-libp2p's
        heartbeat does (`prunePeer` adds one).

        Without it a node prunes a peer (its mesh over D_high) and, once its mesh falls below
        D_low, grafts the same peer again within seconds; the peer, which just received our
        PRUNE, takes the GRAFT for a flood, penalizes us and prunes us back, and the exchange
        feeds itself: 20 idle nodes kept sending ~1 GRAFT and ~1.5 PRUNE RPCs a second each,
        with ~600 "GRAFT flood" refusals between honest peers in a 28 s run
        (tests/net/test_net_gossip_mesh.py)."""
        self._heartbeats += 1
        peers_to_graft, peers_to_prune = super().mesh_heartbeat()
        for peer, topics in peers_to_prune.items():
            for topic in topics:
                self._add_back_off(peer, topic, False)
        return peers_to_graft, peers_to_prune

    def _notify_mesh_peer_added(self, peer_id: ID, topic: str) -> None:
        """py-libp2p calls this wherever a peer enters a topic's mesh (join, the subscription
        fill, the heartbeat, an accepted GRAFT, opportunistic grafting): one place to report it."""
        super()._notify_mesh_peer_added(peer_id, topic)
        if self.on_mesh_join is not None:
            self.on_mesh_join(peer_id)

    def _perform_opportunistic_grafting(self, topic: str, peers_to_graft: Any) -> int:
        """py-libp2p's opportunistic grafting, run every `OPPORTUNISTIC_GRAFT_TICKS` heartbeats
        as in go-libp2p (py-libp2p 0.8.1 runs it on every heartbeat, so a mesh at D grows past
        D_high between two heartbeats and is pruned back to D by the next one)."""
        if self._heartbeats % OPPORTUNISTIC_GRAFT_TICKS:
            return 0
        return super()._perform_opportunistic_grafting(topic, peers_to_graft)

    async def handle_graft(self, graft_msg: rpc_pb2.ControlGraft, sender_peer_id: ID) -> None:
        """py-libp2p's GRAFT handling, refusing a GRAFT that would take the mesh above D_high
        (PRUNE with backoff), as go-libp2p's `handleGraft` does.

        py-libp2p 0.8.1 accepts every GRAFT, so with more than D_high subscribers a mesh
        overfills, the next heartbeat prunes it back to D, the pruned peers fall below D_low
        and graft again, and the mesh never settles: 20 idle nodes sent 1.1 GRAFT and 1.6 PRUNE
        RPCs a second each, logged "GRAFT flood" penalties against honest peers, and spent
        5.3-5.9 ms/s of idle CPU per node against 3.2 with no overfill (tests/net/test_net_gossip_mesh.py)."""
        topic = graft_msg.topicID
        mesh = self.mesh.get(topic)
        was_member = mesh is not None and sender_peer_id in mesh
        await super().handle_graft(graft_msg, sender_peer_id)
        mesh = self.mesh.get(topic)
        if mesh is None or was_member or sender_peer_id not in mesh or len(mesh) <= self.degree_high:
            return
        mesh.discard(sender_peer_id)
        if self.scorer is not None:
            self.scorer.on_leave_mesh(sender_peer_id, topic)
        self._add_back_off(sender_peer_id, topic, False)
        await self.emit_prune(topic, sender_peer_id, self.do_px, False)

    def _prune_pending_messages(self, peer_id: ID) -> None:
        # py-libp2p drops queued messages here (expired, or over the per-peer cap) with a
        # warning at most, which the node's logging silences.
        before = len(self._pending_messages.get(peer_id, ()))
        super()._prune_pending_messages(peer_id)
        dropped = before - len(self._pending_messages.get(peer_id, ()))
        if dropped > 0:
            self._drop_counters.add("gossip_pending_dropped", dropped)

    def _check_spam_protection(self, peer_id: ID, msg: rpc_pb2.Message) -> bool:
        accepted = super()._check_spam_protection(peer_id, msg)
        if not accepted:
            self._drop_counters.add("gossip_rate_limited")
        return accepted


def _may_gossip(scorer: Any, peer: ID, topic: str) -> bool:
    """py-libp2p's score gate on relaying to a mesh peer: above the gossip threshold and not
    graylisted (`GossipSub._get_peers_to_send`)."""
    topics = [topic]
    return bool(scorer.allow_gossip(peer, topics) and not scorer.is_graylisted(peer, topics))
