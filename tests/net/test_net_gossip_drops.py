"""Gossip messages py-libp2p drops on its own (it logs them only at debug level) are counted.

A bare libp2p host plays the attacker: it speaks gossipsub's wire format by hand on a raw
/meshsub/1.1.0 stream, so it can send what a real gossipsub implementation never would.
"""

from __future__ import annotations

from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.pubsub.pb import rpc_pb2
from libp2p.utils.varint import encode_uvarint, encode_varint_prefixed

from swarmp2p.net import open_libp2p_network
from tests.helpers.gossip import FAST, TOPIC, message, rpc
from tests.helpers.waiting import wait_until


def test_unsigned_forged_and_validator_rejected_gossip_is_counted() -> None:
    attacker_key = create_new_key_pair()
    bystander_key = create_new_key_pair()

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), FAST) as node:
                inbox = await node.subscribe(TOPIC)
                attacker = new_host(key_pair=attacker_key)
                async with attacker.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    await attacker.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
                    node_id = ID.from_base58(node.local_peer_id)
                    stream: Any = await attacker.new_stream(node_id, [PROTOCOL_ID_V11])

                    # A well-signed message arrives: the hand-made wire format is right.
                    await stream.write(rpc(message(attacker_key, b"fine", 1, signer=attacker_key)))
                    with trio.fail_after(10):
                        assert (await inbox.receive()).data == b"fine"
                    assert node.counters["gossip_bad_signature"] == 0

                    # Unsigned; signed by someone else; claiming to come from a bystander.
                    await stream.write(rpc(message(attacker_key, b"unsigned", 2)))
                    await stream.write(rpc(message(attacker_key, b"wrong key", 3, signer=bystander_key)))
                    await stream.write(rpc(message(bystander_key, b"impersonated", 4, signer=attacker_key)))
                    tampered = message(attacker_key, b"original", 5, signer=attacker_key)
                    tampered.data = b"tampered"
                    await stream.write(rpc(tampered))
                    # An undecodable public key made py-libp2p's signature check raise.
                    garbage_key = rpc_pb2.Message(
                        data=b"garbage key",
                        topicIDs=[TOPIC],
                        from_id=b"\x12\x20" + bytes(32),  # a sha256 peer id: the key must come along
                        seqno=(6).to_bytes(8, "big"),
                        signature=b"sig",
                        key=b"not a protobuf public key",
                    )
                    await stream.write(rpc(garbage_key))
                    await wait_until(lambda: node.counters["gossip_bad_signature"] == 5)

                    # A well-signed message that a topic validator refuses.
                    node.pubsub.set_topic_validator(TOPIC, lambda sender, msg: msg.data != b"refused", False)
                    await stream.write(rpc(message(attacker_key, b"refused", 7, signer=attacker_key)))
                    await wait_until(lambda: node.counters["gossip_validator_rejected"] == 1)

                    # None of the dropped ones was delivered; a good one still is.
                    await stream.write(rpc(message(attacker_key, b"fine again", 8, signer=attacker_key)))
                    with trio.fail_after(10):
                        assert (await inbox.receive()).data == b"fine again"
                    assert node.counters["gossip_bad_signature"] == 5
                    assert node.counters["gossip_validator_rejected"] == 1
                    assert "gossip_bad_signature" in node.status()["drops"]
                    await stream.reset()

    trio.run(main)


def test_garbage_and_oversized_gossip_frames_are_counted_and_survived() -> None:
    """A protobuf frame that does not parse made py-libp2p's read loop raise out of the host
    (one frame from any connected peer stopped the node); a frame over the 1 MiB RPC limit was
    dropped with a warning only. Both are counted; the node keeps serving the next peer."""
    attacker_key = create_new_key_pair()

    async def attack(node: Any, payload: bytes, counter: str) -> None:
        attacker = new_host(key_pair=attacker_key)
        async with attacker.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            await attacker.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
            stream: Any = await attacker.new_stream(ID.from_base58(node.local_peer_id), [PROTOCOL_ID_V11])
            before = node.counters[counter]
            await stream.write(payload)
            await wait_until(lambda: node.counters[counter] > before)

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), FAST) as node:
                inbox = await node.subscribe(TOPIC)
                await attack(
                    node,
                    encode_varint_prefixed(b"\xff\xfe not a protobuf RPC \x00" * 4),
                    "gossip_rpc_garbage",
                )
                assert node.counters["gossip_rpc_garbage"] == 1
                await attack(node, encode_uvarint(2 * 1024 * 1024) + b"x" * 64, "gossip_rpc_oversized")
                assert node.counters["gossip_rpc_oversized"] == 1
                assert node.counters["gossip_rpc_garbage"] == 1

                # Still alive: another peer's well-signed message is delivered.
                honest_key = create_new_key_pair()
                honest = new_host(key_pair=honest_key)
                async with honest.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    await honest.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
                    node_id = ID.from_base58(node.local_peer_id)
                    stream: Any = await honest.new_stream(node_id, [PROTOCOL_ID_V11])
                    await stream.write(rpc(message(honest_key, b"still here?", 1, signer=honest_key)))
                    with trio.fail_after(10):
                        assert (await inbox.receive()).data == b"still here?"

    trio.run(main)


def test_queued_messages_py_libp2p_prunes_for_a_peer_not_yet_open_are_counted() -> None:
    """py-libp2p queues our messages for a peer whose pubsub stream is not open yet (at most 100,
    for 30 s) and prunes the queue before flushing it: what it drops there is counted."""
    import time

    from libp2p.pubsub.gossipsub import PROTOCOL_ID

    from swarmp2p.net.counters import DropCounters
    from swarmp2p.net.gossip_router import CountingGossipSub

    counters = DropCounters()
    router = CountingGossipSub(
        counters=counters, protocols=[PROTOCOL_ID], degree=6, degree_low=4, degree_high=12
    )
    peer = ID.from_pubkey(create_new_key_pair().public_key)
    now = time.time()
    expired = [(now - 60.0, rpc_pb2.RPC()) for _ in range(3)]
    fresh = [(now, rpc_pb2.RPC()) for _ in range(105)]
    router._pending_messages[peer].extend(expired + fresh)
    router._prune_pending_messages(peer)
    assert len(router._pending_messages[peer]) == 100
    assert counters["gossip_pending_dropped"] == 3 + 5
    router._prune_pending_messages(peer)  # nothing more to drop: the count stays
    assert counters["gossip_pending_dropped"] == 8
