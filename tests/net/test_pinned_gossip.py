"""Inbound gossip limits a plausible bug would bend without any other test noticing: a quiet
origin's bucket refills only up to its burst, and an established origin's messages never count
against the allowance of the peer that forwards them. Each test fails on the bug named in its
docstring."""

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


def test_a_quiet_origins_bucket_refills_up_to_its_burst_and_no_further() -> None:
    """Bug: the refill is not capped at the burst, so a key that stayed quiet for a while (or
    since it was last seen) saves up an allowance of rate x seconds and floods with it."""
    now = [0.0]
    limiter = OriginRateLimiter(rate_per_s=2.0, burst=5, clock=lambda: now[0])
    assert [limiter.allow(b"a") for _ in range(6)] == [True] * 5 + [False]
    now[0] = 1000.0  # 2000 tokens' worth of quiet
    assert [limiter.allow(b"a") for _ in range(6)] == [True] * 5 + [False]
    now[0] = 1000.5  # half a second: one token
    assert [limiter.allow(b"a") for _ in range(2)] == [True, False]


def test_an_established_origins_messages_do_not_use_up_its_forwarders_allowance() -> None:
    """Bug: every message counts against the forwarder's bucket, whoever wrote it, so an honest
    neighbour relaying past its allowance has its own announcements dropped with the rest. The
    neighbour here forwards its own messages (it is connected: established) and then unknown
    keys' ones: only the unknown keys' are limited."""
    burst = 5
    # The forwarder's bucket never refills during the test; the origins' buckets are generous.
    settings = attrs.evolve(FAST, forwarder_burst=burst, forwarder_rate_per_s=1e-6, origin_burst=1000.0)
    neighbour = create_new_key_pair()

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), settings) as node:
                inbox = await node.subscribe(TOPIC)
                host = new_host(key_pair=neighbour)
                async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
                    stream: Any = await host.new_stream(ID.from_base58(node.local_peer_id), [PROTOCOL_ID_V11])
                    own = [message(neighbour, b"own %d" % i, i, signer=neighbour) for i in range(4 * burst)]
                    await stream.write(rpc(*own))
                    with trio.fail_after(15):  # a dropped one never comes
                        received = {(await inbox.receive()).data for _ in own}
                    assert received == {m.data for m in own}
                    assert node.counters["gossip_forwarder_rate_limited"] == 0
                    # Unknown keys' messages through the same neighbour: its allowance applies.
                    strangers = [create_new_key_pair() for _ in range(2 * burst)]
                    relayed = [message(key, b"relayed", 1, signer=key) for key in strangers]
                    await stream.write(rpc(*relayed))
                    await wait_until(lambda: node.counters["gossip_forwarder_rate_limited"] == burst)
                    await stream.reset()

    trio.run(main)
