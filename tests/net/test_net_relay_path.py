"""The relay path (swarmp2p/net/relay_path.py, CountingGossipSub._relay_targets): upstream's
decisions at a fraction of upstream's cost.

The reference is py-libp2p 0.8.1's own `GossipSub.publish` with the relay rule as it was before
the lean path (upstream's targets, then the peers connected to the author skipped). Over
generated router states both must send the same RPCs to the same peers, queue the same messages
for the same not-yet-ready peers and cache the same messages. The one intended difference: a
relay skipped because the peer holds the author's flood publish is skipped before the scorer
is asked about that peer, so the IHAVE that announces it later is where the scorer decides
(`gossip_heartbeat`).
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import trio
from hypothesis import event, given
from hypothesis import strategies as st
from libp2p.peer.id import ID
from libp2p.pubsub import floodsub
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pb import rpc_pb2

from swarmp2p.net.counters import DropCounters
from swarmp2p.net.gossip import GOSSIP_PROTOCOLS
from swarmp2p.net.gossip_router import SKIPPED_IHAVE_TICKS, CountingGossipSub
from swarmp2p.net.neighbours import NeighbourMap

ME = ID(b"\x00\x05me-00")
POOL = [ID(b"\x00\x05peer" + bytes([i])) for i in range(7)]
TOPIC, OTHER_TOPIC = "t", "u"
SKIPPED = "gossip_relay_skipped_origin_neighbour"


class Reference(CountingGossipSub):
    """Upstream's publish, with the relay rule as it stood before the lean path."""

    publish = GossipSub.publish  # type: ignore[assignment]

    def _get_peers_to_send(
        self, topic_ids: Any, msg_forwarder: ID, origin: ID, msg_id: bytes | None = None
    ) -> Any:
        peers = set(GossipSub._get_peers_to_send(self, topic_ids, msg_forwarder, origin, msg_id))
        assert self.pubsub is not None
        if origin != self.pubsub.my_id:
            return self._skip_origin_neighbours(peers, topic_ids, origin, msg_id)
        for topic in topic_ids:
            for peer_id in self.pubsub.peer_topics.get(topic, ()):
                if peer_id in self.peer_protocol and peer_id != origin:
                    peers.add(peer_id)
        return peers


class Scorer:
    """A scorer with fixed verdicts per peer."""

    def __init__(self, gossip_ok: set[ID], graylisted: set[ID], publish_ok: set[ID]) -> None:
        self.gossip_ok, self.graylisted, self.publish_ok = gossip_ok, graylisted, publish_ok

    def allow_gossip(self, peer: ID, topics: list[str]) -> bool:
        return peer in self.gossip_ok

    def is_graylisted(self, peer: ID, topics: list[str]) -> bool:
        return peer in self.graylisted

    def allow_publish(self, peer: ID, topics: list[str]) -> bool:
        return peer in self.publish_ok


def _router(cls: type[CountingGossipSub], state: dict[str, Any]) -> tuple[CountingGossipSub, list[Any]]:
    router = cls(
        counters=DropCounters(), protocols=list(GOSSIP_PROTOCOLS), degree=6, degree_low=4, degree_high=12
    )
    router.pubsub = SimpleNamespace(  # type: ignore[assignment]
        my_id=ME,
        peers={peer: None for peer in state["connected"]},
        peer_topics={topic: set(peers) for topic, peers in state["peer_topics"].items()},
        get_message_id=lambda msg: msg.from_id + msg.seqno,
        host=None,
    )
    router.peer_protocol = dict(state["protocols"])
    router.mesh = {topic: set(peers) for topic, peers in state["mesh"].items()}
    router.direct_peers = {peer: None for peer in state["direct"]}
    router.dont_send_message_ids = {peer: set(ids) for peer, ids in state["dont_send"].items()}
    router.scorer = Scorer(*state["scorer"]) if state["scorer"] is not None else None  # type: ignore[assignment]
    neighbours = NeighbourMap(ttl_s=60.0)
    for peer, linked in state["told"].items():
        neighbours.learn(peer.to_bytes(), [p.to_bytes() for p in linked])
    router.origin_neighbours = neighbours
    sent: list[Any] = []
    router.send_rpc = lambda peer, rpc, priority=False: sent.append(  # type: ignore[method-assign]
        (peer.to_bytes(), priority, rpc.SerializeToString())
    )
    return router, sent


def _subset(draw: Any, of: list[ID]) -> set[ID]:
    return set(draw(st.sets(st.sampled_from(of)))) if of else set()


@st.composite
def states(draw: Any) -> dict[str, Any]:
    everyone = [*POOL, ME]
    topics = draw(st.sampled_from([[TOPIC], [TOPIC], [TOPIC], [TOPIC, OTHER_TOPIC]]))
    peer_topics = {t: _subset(draw, POOL) for t in (TOPIC, OTHER_TOPIC) if draw(st.integers(0, 5))}
    protocols = {
        peer: draw(
            st.sampled_from(
                [PROTOCOL_ID_V11, PROTOCOL_ID_V11, PROTOCOL_ID, floodsub.PROTOCOL_ID, PROTOCOL_ID_V12]
            )
        )
        for peer in _subset(draw, POOL)
    }
    author = draw(st.sampled_from(everyone))
    msg_id = author.to_bytes() + b"seq-0001"
    scorer = None
    if draw(st.booleans()):
        scorer = (_subset(draw, POOL), _subset(draw, POOL), _subset(draw, POOL))
    return {
        "topics": topics,
        "author": author,
        "forwarder": draw(st.sampled_from(everyone)),
        "connected": _subset(draw, POOL),
        "peer_topics": peer_topics,
        "protocols": protocols,
        "mesh": {t: _subset(draw, POOL) for t in (TOPIC, OTHER_TOPIC) if draw(st.integers(0, 4))},
        "direct": _subset(draw, POOL) if not draw(st.integers(0, 3)) else set(),
        "dont_send": {p: {msg_id} for p in _subset(draw, POOL)} if not draw(st.integers(0, 3)) else {},
        "scorer": scorer,
        # Whom each peer (the author among them) said it is connected to.
        "told": {peer: _subset(draw, everyone) for peer in _subset(draw, everyone)},
        "seed": draw(st.integers(0, 2**16)),
    }


def _publish(router: CountingGossipSub, state: dict[str, Any]) -> None:
    msg = rpc_pb2.Message(
        from_id=state["author"].to_bytes(), seqno=b"seq-0001", data=b"batch", topicIDs=state["topics"]
    )
    random.seed(state["seed"])  # upstream picks fanout peers at random for topics outside the mesh
    trio.run(router.publish, state["forwarder"], msg)


def _pending(router: CountingGossipSub) -> dict[bytes, list[bytes]]:
    return {
        peer.to_bytes(): [rpc.SerializeToString() for _at, rpc in queue]
        for peer, queue in router._pending_messages.items()
        if queue
    }


@given(states())
def test_the_lean_publish_makes_upstreams_decisions(state: dict[str, Any]) -> None:
    lean, lean_sent = _router(CountingGossipSub, state)
    reference, reference_sent = _router(Reference, state)
    _publish(lean, state)
    _publish(reference, state)

    fast = len(state["topics"]) == 1 and TOPIC in state["mesh"] and TOPIC in state["peer_topics"]
    event(f"lean target rule: {fast and state['author'] != ME}")
    event(f"sent: {bool(reference_sent)}, queued: {bool(_pending(reference))}")
    event(f"skipped: {bool(reference._skipped_ihave)}")
    assert sorted(lean_sent) == sorted(reference_sent)
    assert _pending(lean) == _pending(reference)
    assert set(lean.mcache.msgs) == set(reference.mcache.msgs)
    assert {t: set(p) for t, p in lean.fanout.items()} == {t: set(p) for t, p in reference.fanout.items()}
    lean_counts, reference_counts = lean._drop_counters.snapshot(), reference._drop_counters.snapshot()
    assert {k: v for k, v in lean_counts.items() if k != SKIPPED} == {
        k: v for k, v in reference_counts.items() if k != SKIPPED
    }
    # Skipped relays: the reference's, plus mesh peers it left out on their score alone (their
    # IHAVE is refused at the heartbeat, by the same scorer).
    assert set(reference._skipped_ihave) <= set(lean._skipped_ihave)
    extra = set(lean._skipped_ihave) - set(reference._skipped_ihave)
    if extra:
        scorer = state["scorer"]
        assert scorer is not None
        gossip_ok, graylisted, _ = scorer
        assert all(peer not in gossip_ok or peer in graylisted for peer in extra)
    assert lean_counts.get(SKIPPED, 0) == reference_counts.get(SKIPPED, 0) + len(extra)
    for peer, topics in reference._skipped_ihave.items():
        assert lean._skipped_ihave[peer] == topics


def test_a_skipped_relay_is_announced_only_to_peers_the_scorer_lets_gossip() -> None:
    """The IHAVE for a skipped relay asks the scorer, as the relay itself would have."""
    low, graylisted, fine = POOL[:3]
    state = {
        "connected": {low, graylisted, fine},
        "peer_topics": {TOPIC: {low, graylisted, fine}},
        "protocols": {p: PROTOCOL_ID_V11 for p in (low, graylisted, fine)},
        "mesh": {TOPIC: set()},
        "direct": set(),
        "dont_send": {},
        "scorer": ({graylisted, fine}, {graylisted}, {low, graylisted, fine}),
        "told": {},
    }
    router, _sent = _router(CountingGossipSub, state)
    mid = POOL[5].to_bytes() + b"seq-0001"
    router._skipped_ihave = {peer: {TOPIC: [mid]} for peer in (low, graylisted, fine)}
    router._heartbeats = SKIPPED_IHAVE_TICKS
    announced = router.gossip_heartbeat()
    assert {peer: dict(topics) for peer, topics in announced.items() if topics} == {fine: {TOPIC: [mid]}}


def test_relaying_leaves_no_record_per_message_behind() -> None:
    """Adaptive gossip is off in the node (net/gossip.py), and it was the only reader and the only
    pruner of py-libp2p's per-message delivery times: upstream's publish appended one for every
    message for as long as the node lived."""
    peers = set(POOL[:4])
    state = {
        "connected": peers,
        "peer_topics": {TOPIC: peers},
        "protocols": dict.fromkeys(peers, PROTOCOL_ID_V11),
        "mesh": {TOPIC: peers},
        "direct": set(),
        "dont_send": {},
        "scorer": None,
        "told": {},
    }
    router, sent = _router(CountingGossipSub, state)
    router.adaptive_gossip_enabled = False
    router.max_messages_per_topic_per_second = 1000  # one forwarder, 200 messages at once

    async def relay_many() -> None:
        for seqno in range(200):
            msg = rpc_pb2.Message(
                from_id=POOL[0].to_bytes(), seqno=seqno.to_bytes(8, "big"), data=b"x", topicIDs=[TOPIC]
            )
            await router.publish(POOL[0], msg)

    trio.run(relay_many)
    assert len(sent) == 200 * 3  # relayed to the three mesh peers that are neither author nor forwarder
    assert sum(len(times) for times in router.recent_message_deliveries.values()) == 0
