"""A peer's own gossip goes out ahead of what it relays, and it relays unknown origins' gossip
only within a budget (swarmp2p/net/gossip.py).

Measured in the flood test (tests/net/test_net_attacks.py) on one busy core: each honest peer's
outbound queue to the other held 50-150 RPCs of the attacker's relayed announcements, and the
peer's own announcement waited behind them for 4-5 s, past the other's collect deadline: both
lost the round (CI lost one of seven rounds this way). Own messages are now queued ahead of
relayed ones, and a full queue drops a relayed message to make room for an own one. That left
the frames already written ahead of it (the other peer reads and handles them one by one), so
the messages of origins that are neither connected nor vouched for are relayed within a budget
per node: delivered here always, forwarded only while the budget lasts (counted past it)."""

from __future__ import annotations

import attrs
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import RpcQueue

from swarmp2p.net import open_libp2p_network
from swarmp2p.net.counters import DropCounters
from swarmp2p.net.gossip_bounds import SizedOutboundQueues
from tests.helpers.gossip import FAST, TOPIC, message, rpc
from tests.helpers.waiting import wait_until


def publish_rpc(origin: ID, seqno: int) -> rpc_pb2.RPC:
    message = rpc_pb2.Message(
        data=b"x", topicIDs=["t"], from_id=origin.to_bytes(), seqno=seqno.to_bytes(8, "big")
    )
    return rpc_pb2.RPC(publish=[message])


def drain(queue: RpcQueue) -> list[tuple[bytes, int]]:
    out = []
    while (rpc := queue._queue.pop()) is not None:
        out.extend((m.from_id, int.from_bytes(m.seqno, "big")) for m in rpc.publish)
    return out


def test_own_messages_overtake_relayed_ones_and_displace_them_when_full() -> None:
    me = ID.from_pubkey(create_new_key_pair().public_key)
    other = ID.from_pubkey(create_new_key_pair().public_key)
    neighbour = ID.from_pubkey(create_new_key_pair().public_key)
    counters = DropCounters()
    queues = SizedOutboundQueues(4, counters, me)

    async def main() -> None:
        queues[neighbour] = RpcQueue()
        queue = queues[neighbour]
        for seqno in range(3):
            assert queue.push(publish_rpc(other, seqno))
        assert queue.push(publish_rpc(me, 100))
        assert drain(queue) == [(me.to_bytes(), 100), *((other.to_bytes(), s) for s in range(3))]

        # Full of relayed messages: the own one still goes in, in place of the newest relayed.
        for seqno in range(4):
            assert queue.push(publish_rpc(other, seqno))
        assert not queue.push(publish_rpc(other, 9)), "a relayed message into a full queue is refused"
        assert queue.push(publish_rpc(me, 101))
        assert drain(queue) == [(me.to_bytes(), 101), *((other.to_bytes(), s) for s in range(3))]
        assert counters["gossip_outbound_queue_full"] == 2  # the refused one and the displaced one

        # A queue full of our own messages refuses one more (nothing relayed to displace).
        for seqno in range(4):
            assert queue.push(publish_rpc(me, seqno))
        assert not queue.push(publish_rpc(me, 200))
        assert counters["gossip_outbound_queue_full"] == 3

    trio.run(main)


def test_unknown_origins_are_relayed_within_the_budget_and_always_delivered() -> None:
    """A raw host forwards 40 validly signed messages of 40 throwaway keys to node A: A delivers
    all 40 to its own subscriber and relays only its budget's burst (5) to its neighbour B.
    A's own messages are not held to the budget."""
    import multiaddr
    from libp2p import new_host
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11

    settings = attrs.evolve(FAST, relay_unknown_rate_per_s=0.001, relay_unknown_burst=5.0)
    keys = [create_new_key_pair() for _ in range(40)]

    async def main() -> None:
        with trio.fail_after(60):
            async with (
                open_libp2p_network(create_new_key_pair(), settings) as node_a,
                open_libp2p_network(create_new_key_pair(), FAST) as node_b,
            ):
                inbox_a = await node_a.subscribe(TOPIC)
                inbox_b = await node_b.subscribe(TOPIC)
                await node_b.connect(node_a.listen_addrs()[0])
                # A's own message reaches B: the path is up (flood publish, not the budget).
                await wait_until(lambda: len(node_a.pubsub.peer_topics.get(TOPIC, ())) == 1)
                for n in range(8):
                    await node_a.publish(TOPIC, b"own %d" % n)
                with trio.fail_after(10):
                    for n in range(8):
                        assert (await inbox_b.receive()).data == b"own %d" % n
                await wait_until(lambda: len(node_a.pubsub.router.mesh.get(TOPIC, ())) == 1)

                forwarder = new_host(key_pair=create_new_key_pair())
                listen = [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]
                async with forwarder.run(listen_addrs=listen):
                    await forwarder.connect(info_from_p2p_addr(multiaddr.Multiaddr(node_a.listen_addrs()[0])))
                    stream = await forwarder.new_stream(
                        ID.from_base58(node_a.local_peer_id), [PROTOCOL_ID_V11]
                    )
                    for seqno, key in enumerate(keys):
                        await stream.write(rpc(message(key, b"unknown %d" % seqno, seqno + 1, signer=key)))
                    with trio.fail_after(10):
                        delivered = {(await inbox_a.receive()).data for _ in keys}
                    assert len(delivered) == len(keys), "every message is delivered here"
                    await wait_until(lambda: node_a.counters["gossip_relay_unknown_limited"] == len(keys) - 5)
                    await trio.sleep(0.5)  # relayed ones would have arrived by now
                    relayed = []
                    while True:
                        try:
                            relayed.append(inbox_b.receive_nowait().data)
                        except trio.WouldBlock:
                            break
                    assert len(relayed) == 5, relayed
                    await stream.reset()

    trio.run(main)
