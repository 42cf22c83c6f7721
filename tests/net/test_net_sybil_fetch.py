"""The next-round sybil attack over real py-libp2p: ~300 throwaway keys announce the NEXT round to two
honest nodes every round. They once filled the per-round fetch budget (256) before the round
opened, the honest peer's announcement was refused as `fetch_limit`, and neither node trained
on the other's rollouts. Now unknown keys get a bounded share and established peers go first.

Two real Peers (the simulator's cheap policy, real libp2p hosts on 127.0.0.1, real time) and a
bare attacker host that writes gossipsub frames by hand, each message from a sybil key and
validly signed by it (gossip signature and envelope), so every check passes but the fetch.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import multiaddr
import pytest
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.utils.varint import encode_varint_prefixed

from protocol.envelope import seal
from protocol.messages import RolloutAnnouncement, SwarmSchedule
from simulator.policy import CheckpointStore, SimPolicy
from simulator.registry import SimTaskRegistry
from swarmp2p.clocks import TrioClock
from swarmp2p.dashboard import normalize_status, render_metrics
from swarmp2p.hello import hello_topic, open_hello
from swarmp2p.identity import Identity
from swarmp2p.net import NetworkSettings, open_libp2p_network
from swarmp2p.net.checks import install_gossip_checks
from swarmp2p.peer import Peer, PeerSettings
from swarmp2p.peer_settings import announce_topic
from swarmp2p.round_record import RoundRecord
from swarmp2p.schedule import ScheduleCoordinator
from tests.helpers.metrics import assert_every_status_counter_exported

SWARM = "sybil"
ROUND_MS = 4000
ROUNDS = 5  # the sybils announce each next round from the first: every round after it is crowded
SYBILS = 300
FAST = NetworkSettings(handler_timeout_s=2.0, peer_exchange_interval_s=0.5, upkeep_interval_s=0.2)


class Sybil:
    """A throwaway key: one libp2p key pair and the same key as an envelope signer."""

    def __init__(self, index: int) -> None:
        self.seed = hashlib.sha256(f"sybil-{index}-{os.getpid()}".encode()).digest()
        self.identity = Identity.from_seed(self.seed)
        self.seqno = 0

    def gossip(self, round_number: int) -> rpc_pb2.Message:
        body = RolloutAnnouncement(SWARM, round_number, 0, self.identity.peer_id, os.urandom(32), 2, 2000)
        self.seqno += 1
        msg = rpc_pb2.Message(
            data=seal(body, self.seed),
            topicIDs=[announce_topic(SWARM)],
            from_id=ID.from_base58(self.identity.peer_id).to_bytes(),
            seqno=self.seqno.to_bytes(8, "big"),
        )
        key = self.identity.key_pair
        msg.signature = key.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
        msg.key = key.public_key.serialize()
        return msg


def frame(messages: list[rpc_pb2.Message]) -> bytes:
    out = rpc_pb2.RPC(publish=messages)
    out.subscriptions.append(rpc_pb2.RPC.SubOpts(subscribe=True, topicid=announce_topic(SWARM)))
    return encode_varint_prefixed(out.SerializeToString())


@pytest.mark.alone  # two peers and 300 sybils' gossip in one process, judged by round deadlines
def test_two_honest_nodes_train_on_each_other_every_round_under_300_next_round_sybils() -> None:
    registry = SimTaskRegistry()
    settings = PeerSettings(swarm_id=SWARM, seed=5, tasks=registry.task_names(), fetch_timeout_s=1.0)
    store = CheckpointStore()
    sybils = [Sybil(i) for i in range(SYBILS)]
    records: dict[str, dict[int, RoundRecord]] = {}
    peers: list[Peer] = []
    snapshots: list[dict[str, Any]] = []

    async def offload(fn: Any, *args: Any) -> Any:
        await trio.sleep(0)
        return fn(*args)

    async def attack(targets: list[Any], clock: TrioClock) -> None:
        """Every round, as soon as it opens: SYBILS announcements for the next one to each target."""
        attacker = new_host(key_pair=create_new_key_pair())
        async with attacker.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            streams: list[Any] = []
            node_ids = [ID.from_base58(node.local_peer_id) for node in targets]
            for node, node_id in zip(targets, node_ids, strict=True):
                await attacker.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
                streams.append(await attacker.new_stream(node_id, [PROTOCOL_ID_V11]))
            while True:
                round_number = clock.now_ms() // ROUND_MS
                batch = frame([sybil.gossip(round_number + 1) for sybil in sybils])
                for index, node_id in enumerate(node_ids):
                    try:
                        if streams[index] is None:
                            streams[index] = await attacker.new_stream(node_id, [PROTOCOL_ID_V11])
                        await streams[index].write(batch)
                    except Exception:
                        # A node may drop the attacker's gossip stream (py-libp2p gives up on a
                        # peer that never opens a gossip stream back): a real attacker opens
                        # another one next round, and so does this one.
                        streams[index] = None
                # On a busy machine the writes can outlast the round: then on to the next at once.
                await trio.sleep(max(0.0, (round_number + 1) * ROUND_MS / 1000 - trio.current_time() + 0.05))

    async def main() -> None:
        clock = TrioClock(0)
        schedule = SwarmSchedule(SWARM, 0, ROUND_MS, 1, 5, tasks=registry.task_names())
        async with (
            open_libp2p_network(Identity.from_seed(b"a" * 32).key_pair, FAST) as net_a,
            open_libp2p_network(Identity.from_seed(b"b" * 32).key_pair, FAST) as net_b,
            trio.open_nursery() as nursery,
        ):
            await net_b.connect(net_a.listen_addrs()[0])
            # Start on a round boundary (after a second to settle), so the first round is whole.
            await trio.sleep(-(clock.now_ms() + 1000) % ROUND_MS / 1000 + 1.0)
            for net, seed in ((net_a, b"a" * 32), (net_b, b"b" * 32)):
                install_gossip_checks(
                    net,
                    swarm_id=SWARM,
                    hello_topic=hello_topic(SWARM),
                    announce_topic=announce_topic(SWARM),
                    current_round=lambda: clock.now_ms() // ROUND_MS,
                    open_hello=open_hello,
                    hello_stats={},
                    max_announce_bytes=settings.max_announce_bytes,
                )
                book = records.setdefault(net.local_peer_id, {})
                peer = Peer(
                    settings,
                    seed,
                    net,
                    ScheduleCoordinator(schedule, clock),
                    SimPolicy(net.local_peer_id, registry, seed=5, store=store),
                    registry,
                    clock,
                    offload=offload,
                    on_round_complete=lambda record, book=book: book.__setitem__(record.round, record),
                )
                peers.append(peer)
                await nursery.start(peer.run)
            nursery.start_soon(attack, [net_a, net_b], clock)
            await trio.sleep(ROUNDS * ROUND_MS / 1000)
            # What swarmp2p/node.py serves as /api/status, from the attacked nodes themselves.
            for peer, net in zip(peers, (net_a, net_b), strict=True):
                snapshot = {**peer.status(), "network": net.status(), "hellos": {"hellos_accepted": 0}}
                snapshot["peers"] = sorted(net.connected_peers())
                snapshots.append(snapshot)
            nursery.cancel_scope.cancel()

    trio.run(main)

    (a, b), (book_a, book_b) = list(records), list(records.values())
    both = sorted(set(book_a) & set(book_b))
    trained = {r: (book_a[r].external_peers_trained_on, book_b[r].external_peers_trained_on) for r in both}
    assert len(both) >= ROUNDS - 2, trained
    trained_rounds = 0
    for round_number in both:
        why = {
            peer: (
                book[round_number].accepted_peers,
                dict(book[round_number].rejected),
                book[round_number].to_json().get("untrained_batches"),
            )
            for peer, book in zip((a, b), (book_a, book_b), strict=True)
        }
        for book, other in ((book_a, b), (book_b, a)):
            record = book[round_number]
            # The sybils did not crowd the honest batch out: fetched, verified, accepted...
            assert record.accepted_peers == (other,), (round_number, trained, why)
            # ...and trained on, unless it had nothing to teach: the round numbers come from
            # trio's clock (a random origin), so once in a while a peer's simulated answers in
            # every group of its batch score alike (zero advantage), whatever the network did.
            digest = record.accepted_batches[other]
            if record.external_peers_trained_on != (other,):
                assert record.untrained_batches.get(digest) == "zero_advantage", (round_number, trained, why)
            else:
                trained_rounds += 1
    assert trained_rounds >= len(both), (trained, "fewer than half of the exchanges were trained on")
    assert len(snapshots) == 2
    for status in snapshots:
        # The sybils were heard, and held to their allowances, counted by reason.
        rejections = status["rejections"]
        assert rejections.get("future_round_limit", 0) > 0, rejections
        assert rejections.get("fetch_limit", 0) == 0, rejections
        # ...and the same counts are Prometheus series on /metrics.
        metrics = render_metrics(normalize_status(status), 0)[0].decode()
        count = float(rejections["future_round_limit"])
        series = f'swarmp2p_rejections_total{{reason="future_round_limit"}} {count}'
        assert series in metrics.splitlines()
        assert_every_status_counter_exported(status)  # and so is every other status count
