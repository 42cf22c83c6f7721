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


def test_a_blacklisted_origin_or_forwarder_and_a_repeated_message_are_dropped_and_counted_by_name() -> None:
    """Bugs: a blacklist that drops only when both the forwarder and the origin are on it (or
    checks neither), and drops counted under another name (the dashboard, /metrics and the
    tests read these names). Messages are pushed into the node's pubsub as its stream reader
    would: a repeat is one `gossip_seen_duplicate`, a blacklisted origin's message or a
    blacklisted forwarder's one `gossip_blacklisted` each, and none of them reaches the inbox."""
    origin, banned_origin = create_new_key_pair(), create_new_key_pair()
    forwarder = ID.from_pubkey(create_new_key_pair().public_key)
    banned_forwarder = ID.from_pubkey(create_new_key_pair().public_key)

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), FAST) as node:
                inbox = await node.subscribe(TOPIC)
                pubsub: Any = node.pubsub
                pubsub.blacklisted_peers.update({ID.from_pubkey(banned_origin.public_key), banned_forwarder})
                first = message(origin, b"first", 1, signer=origin)
                banned = message(banned_origin, b"banned origin", 1, signer=banned_origin)
                for via, pushed in (
                    (forwarder, first),
                    (forwarder, first),
                    (forwarder, banned),
                    (banned_forwarder, message(origin, b"banned forwarder", 2, signer=origin)),
                    (forwarder, message(origin, b"last", 3, signer=origin)),
                ):
                    await pubsub.push_msg(via, pushed)
                with trio.fail_after(10):
                    received = [(await inbox.receive()).data for _ in range(2)]
                assert received == [b"first", b"last"]
                names = ("gossip_seen_duplicate", "gossip_blacklisted")
                drops = {name: node.counters[name] for name in names}
                assert drops == {"gossip_seen_duplicate": 1, "gossip_blacklisted": 2}

    trio.run(main)


def test_a_full_inbox_drops_an_unknown_origins_message_and_gives_an_established_ones_a_place() -> None:
    """Bugs: the inbox not told whether the origin is established (or told the opposite), and
    its outcomes counted under other names. An inbox of two nobody reads: two unknown origins'
    messages fill it, a third is dropped (`gossip_subscription_queue_full`), and an established
    origin's message takes an unknown one's place (`gossip_subscription_evicted_unknown`)."""
    unknown = [create_new_key_pair() for _ in range(3)]
    known = create_new_key_pair()
    known_id = ID.from_pubkey(known.public_key).to_bytes()
    forwarder = ID.from_pubkey(create_new_key_pair().public_key)

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(
                create_new_key_pair(), attrs.evolve(FAST, subscription_queue_size=2)
            ) as node:
                inbox = await node.subscribe(TOPIC)
                pubsub: Any = node.pubsub
                pubsub.established_origin = lambda from_id: from_id == known_id
                for index, key in enumerate(unknown):
                    await pubsub.push_msg(forwarder, message(key, b"unknown %d" % index, 1, signer=key))
                assert node.counters["gossip_subscription_queue_full"] == 1
                await pubsub.push_msg(forwarder, message(known, b"established", 1, signer=known))
                with trio.fail_after(10):
                    received = {(await inbox.receive()).data for _ in range(2)}
                assert b"established" in received and b"unknown 2" not in received, received
                names = ("gossip_subscription_queue_full", "gossip_subscription_evicted_unknown")
                assert {name: node.counters[name] for name in names} == dict.fromkeys(names, 1)

    trio.run(main)


def test_relaying_asks_whether_the_origin_is_established_when_no_subscription_did() -> None:
    """Bug: with no subscribed topic to ask on delivery (`notify_subscriptions` returns None),
    the relay treats every origin as unknown, so an established peer's messages use up the
    budget for unknown origins' and are dropped past it. A relay budget of one message: an
    established origin's three all go on, two of three unknown origins' are counted
    `gossip_relay_unknown_limited`."""
    known = create_new_key_pair()
    known_id = ID.from_pubkey(known.public_key).to_bytes()
    forwarder = ID.from_pubkey(create_new_key_pair().public_key)
    settings = attrs.evolve(FAST, relay_unknown_burst=1.0, relay_unknown_rate_per_s=1e-6)

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), settings) as node:
                pubsub: Any = node.pubsub  # nothing subscribed: nothing delivered here
                pubsub.established_origin = lambda from_id: from_id == known_id
                for seqno in range(3):
                    await pubsub.push_msg(forwarder, message(known, b"known", seqno, signer=known))
                assert node.counters["gossip_relay_unknown_limited"] == 0
                for key in [create_new_key_pair() for _ in range(3)]:
                    await pubsub.push_msg(forwarder, message(key, b"unknown", 1, signer=key))
                assert node.counters["gossip_relay_unknown_limited"] == 2

    trio.run(main)


def test_a_forwarder_below_the_publish_score_is_gated_and_counted_and_a_failing_score_gates_nothing() -> None:
    """Bugs: the gate asking no scorer (or another attribute), asking about another peer or no
    topics, and gating when the scorer itself fails (upstream gates nothing then). The router's
    own scorer answers the publish check: one forwarder is below the threshold."""
    origin = create_new_key_pair()
    below, above = (ID.from_pubkey(create_new_key_pair().public_key) for _ in range(2))

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), FAST) as node:
                inbox = await node.subscribe(TOPIC)
                pubsub: Any = node.pubsub
                asked: list[tuple[ID, list[str]]] = []

                def allow_publish(peer: ID, topics: list[str]) -> bool:
                    asked.append((peer, topics))
                    return peer != below

                def failing(peer: ID, topics: list[str]) -> bool:
                    raise RuntimeError("no score")

                pubsub.router.scorer.allow_publish = allow_publish
                await pubsub.push_msg(below, message(origin, b"gated", 1, signer=origin))
                await pubsub.push_msg(above, message(origin, b"passed", 2, signer=origin))
                pubsub.router.scorer.allow_publish = failing
                await pubsub.push_msg(below, message(origin, b"unscored", 3, signer=origin))
                with trio.fail_after(10):
                    received = [(await inbox.receive()).data for _ in range(2)]
                assert received == [b"passed", b"unscored"]
                assert asked == [(below, [TOPIC]), (above, [TOPIC])]
                assert node.counters["gossip_score_gated"] == 1

    trio.run(main)
