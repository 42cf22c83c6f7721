"""Inbound gossip is rate-limited per origin key before its signature is checked:
past its burst, a flooding key's messages are dropped and counted as
`gossip_origin_rate_limited`, never verified, and other origins still get through."""

from __future__ import annotations

from typing import Any

import attrs
import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11

from swarmp2p.net import open_libp2p_network
from swarmp2p.net.origin_limit import OriginRateLimiter
from tests.helpers.gossip import FAST, TOPIC, message, rpc
from tests.helpers.waiting import wait_until


def test_a_bucket_allows_its_burst_then_its_rate_and_the_table_is_capped() -> None:
    now = [0.0]
    limiter = OriginRateLimiter(rate_per_s=2.0, burst=5, max_origins=100, clock=lambda: now[0])
    assert [limiter.allow(b"a") for _ in range(7)] == [True] * 5 + [False] * 2
    assert limiter.allow(b"b")  # another origin has its own bucket
    now[0] = 1.0  # one second refills two tokens
    assert [limiter.allow(b"a") for _ in range(3)] == [True, True, False]
    for i in range(10_000):
        limiter.allow(i.to_bytes(4, "big"))
    assert len(limiter) == 100 and limiter.evicted == 10_000 + 2 - 100


def test_over_real_libp2p_a_flooding_origin_is_dropped_before_its_signature_is_checked() -> None:
    flooder, other, bystander = create_new_key_pair(), create_new_key_pair(), create_new_key_pair()
    burst = 50
    # No refill during the test: what passes is exactly the burst.
    settings = attrs.evolve(FAST, origin_burst=burst, origin_rate_per_s=1e-6)

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), settings) as node:
                inbox = await node.subscribe(TOPIC)
                attacker = new_host(key_pair=create_new_key_pair())
                async with attacker.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    await attacker.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
                    node_id = ID.from_base58(node.local_peer_id)
                    stream: Any = await attacker.new_stream(node_id, [PROTOCOL_ID_V11])
                    # The burst, validly signed, is delivered (py-libp2p handles one RPC's
                    # messages concurrently, so the burst goes first, alone).
                    await stream.write(
                        rpc(*[message(flooder, b"ok%d" % i, i, signer=flooder) for i in range(burst)])
                    )
                    received = {(await inbox.receive()).data for _ in range(burst)}
                    assert received == {b"ok%d" % i for i in range(burst)}
                    # 100 more signed by the wrong key: had they been verified, they would count
                    # as gossip_bad_signature. They are dropped on the origin's empty bucket.
                    bad = [message(flooder, b"x%d" % i, 1000 + i, signer=bystander) for i in range(100)]
                    await stream.write(rpc(*bad))
                    await wait_until(lambda: node.counters["gossip_origin_rate_limited"] == 100)
                    # Another origin still gets through.
                    await stream.write(rpc(message(other, b"other", 1, signer=other)))
                    assert (await inbox.receive()).data == b"other"
                    assert node.counters["gossip_bad_signature"] == 0
                    assert node.status()["drops"]["gossip_origin_rate_limited"] == 100
                    await stream.reset()

    trio.run(main)
