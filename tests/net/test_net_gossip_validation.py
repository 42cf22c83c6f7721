"""Gossip that fails our checks is not relayed: a node that receives an invalid message does
not forward it to a third node (real py-libp2p hosts on 127.0.0.1), and hellos are held to
freshness (a replayed hello older than the window is refused and counted)."""

from __future__ import annotations

import os
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.utils.varint import encode_varint_prefixed

from protocol.envelope import seal
from protocol.messages import PROTOCOL_VERSION, Hello, RolloutAnnouncement, SwarmSchedule
from swarmp2p.hello import open_hello
from swarmp2p.net import NetworkSettings, open_libp2p_network
from swarmp2p.net.checks import HelloGuard, announcement_check
from tests.helpers.waiting import wait_until

TOPIC = "swarmp2p/test/relay"
FAST = NetworkSettings(handler_timeout_s=2.0, peer_exchange_interval_s=0.5, upkeep_interval_s=0.2)


def signed(origin: KeyPair, data: bytes, seqno: int) -> bytes:
    """One gossipsub RPC publishing `data` on TOPIC, signed by `origin` (a real message)."""
    msg = rpc_pb2.Message(
        data=data,
        topicIDs=[TOPIC],
        from_id=ID.from_pubkey(origin.public_key).to_bytes(),
        seqno=seqno.to_bytes(8, "big"),
    )
    msg.signature = origin.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
    msg.key = origin.public_key.serialize()
    out = rpc_pb2.RPC(publish=[msg])
    out.subscriptions.append(rpc_pb2.RPC.SubOpts(subscribe=True, topicid=TOPIC))
    return encode_varint_prefixed(out.SerializeToString())


def run_relay_test(deliver_rejected: bool) -> None:
    """attacker (a bare host speaking gossipsub by hand) -> relay -> third. The relay's
    validator refuses data not starting with b"ok"; the third node must never see those."""
    attacker_key = create_new_key_pair()

    async def main() -> None:
        with trio.fail_after(90):
            async with (
                open_libp2p_network(create_new_key_pair(), FAST) as relay,
                open_libp2p_network(create_new_key_pair(), FAST) as third,
            ):
                relay.set_gossip_validator(
                    TOPIC,
                    lambda origin, data: None if data.startswith(b"ok") else "not_ok",
                    deliver_rejected=deliver_rejected,
                )
                relay_inbox = await relay.subscribe(TOPIC)
                third_inbox = await third.subscribe(TOPIC)
                await third.connect(relay.listen_addrs()[0])
                attacker = new_host(key_pair=attacker_key)
                async with attacker.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                    await attacker.connect(info_from_p2p_addr(multiaddr.Multiaddr(relay.listen_addrs()[0])))
                    stream: Any = await attacker.new_stream(
                        ID.from_base58(relay.local_peer_id), [PROTOCOL_ID_V11]
                    )
                    # Until the relay forwards to the third node (mesh formed), send valid ones.
                    seqno = 0
                    with trio.fail_after(30):
                        while True:
                            seqno += 1
                            await stream.write(signed(attacker_key, b"ok %d" % seqno, seqno))
                            with trio.move_on_after(1.0):
                                got = await third_inbox.receive()
                                assert got.data.startswith(b"ok")
                                break
                    # The third node was never connected to the attacker: it heard via the relay.
                    assert attacker.get_id() not in third.host.get_network().connections
                    while True:  # drain what is still on its way
                        with trio.move_on_after(1.0):
                            await third_inbox.receive()
                            continue
                        break
                    rejected_before = relay.gossip_rejections["not_ok"]
                    for n in range(5):
                        await stream.write(signed(attacker_key, b"bad %d" % n, 1000 + n))
                    await stream.write(signed(attacker_key, b"ok after", 2000))
                    with trio.fail_after(10):
                        got = await third_inbox.receive()
                    assert got.data == b"ok after"  # the five bad ones were not forwarded
                    with trio.move_on_after(1.0):
                        extra = await third_inbox.receive()
                        raise AssertionError(f"third node got {extra.data!r}")
                    await wait_until(lambda: relay.gossip_rejections["not_ok"] == rejected_before + 5)
                    assert relay.counters["gossip_validator_rejected"] >= 5
                    status = relay.status()
                    assert status["gossip_rejections"]["not_ok"] >= 5
                    # Delivered locally or not, as asked; a repeat of a bad one is deduplicated.
                    seen: list[bytes] = []
                    while True:
                        try:
                            seen.append(relay_inbox.receive_nowait().data)
                        except trio.WouldBlock:
                            break
                    bad = [data for data in seen if data.startswith(b"bad")]
                    assert bad == ([b"bad %d" % n for n in range(5)] if deliver_rejected else [])
                    await stream.reset()

    trio.run(main)


def test_a_message_failing_validation_is_not_forwarded_to_a_third_node() -> None:
    run_relay_test(deliver_rejected=False)


def test_rejected_but_delivered_for_the_nodes_own_accounting_is_still_not_forwarded() -> None:
    run_relay_test(deliver_rejected=True)


# ---- the node's checks -------------------------------------------------------------------------

SCHEDULE = SwarmSchedule(
    swarm_id="s1",
    genesis_ms=0,
    round_ms=30_000,
    stage_count=1,
    seed=7,
    tasks=("basic_arithmetic",),
    weights=(),
    questions_per_round=4,
    format_reward=0.0,
    difficulty=0,
)


def hello(seed: bytes, current_round: int) -> tuple[str, bytes]:
    from protocol.envelope import peer_id_from_seed as signer_id

    peer_id = signer_id(seed)
    message = Hello(
        protocol_version=PROTOCOL_VERSION,
        peer_id=peer_id,
        schedule=SCHEDULE,
        current_round=current_round,
        listen_addrs=("/ip4/127.0.0.1/tcp/4001",),
        model="tiny",
    )
    return peer_id, seal(message, seed)


def test_a_replayed_hello_older_than_the_window_is_rejected_and_counted() -> None:
    now = [10]
    stats: dict[str, int] = {"hellos_accepted": 0, "hellos_rejected": 0}
    guard = HelloGuard(open_hello, lambda: now[0], stats, window_rounds=2)
    seed = os.urandom(32)
    peer_id, old = hello(seed, 3)
    # Fresh when made (round 3 of 3), replayed at round 10: older than the 2-round window.
    now[0] = 3
    assert guard.check(peer_id, old) is None
    now[0] = 10
    assert guard.check(peer_id, old) == "stale"
    assert stats["hellos_stale"] == 1 and stats["hellos_rejected"] == 1
    # Within the window but older than what this peer already said: a replay.
    _, r9 = hello(seed, 9)
    _, r8 = hello(seed, 8)
    assert guard.check(peer_id, r9) is None
    assert guard.check(peer_id, r8) == "replayed"
    assert guard.check(peer_id, r9) is None  # the same round again: a periodic re-announce
    assert stats["hellos_replayed"] == 1 and stats["hellos_rejected"] == 2
    # Signed by someone else than the gossip origin, or garbage: invalid.
    other, _ = hello(os.urandom(32), 10)
    assert guard.check(other, r9) == "invalid"
    assert guard.check(peer_id, b"garbage") == "invalid"
    assert stats["hellos_invalid"] == 2 and stats["hellos_rejected"] == 4
    # Before genesis (no round yet) nothing is stale.
    now[0] = -1
    assert guard.check(peer_id, r9) is None


def test_the_hello_guard_table_is_capped_and_expires() -> None:
    clock = [0.0]
    stats: dict[str, int] = {}
    guard = HelloGuard(
        lambda data, origin: None, lambda: 5, stats, max_peers=100, ttl_s=60, clock=lambda: clock[0]
    )
    for i in range(100_000):
        assert guard.check_round(f"sybil{i}", 5) is None
        assert len(guard) <= 100
    assert stats["hello_peers_evicted"] == 100_000 - 100
    clock[0] = 61.0
    guard.check_round("late", 5)
    assert len(guard) == 1


def test_announcement_check_reasons() -> None:
    seed = os.urandom(32)
    from protocol.envelope import peer_id_from_seed as signer_id

    me = signer_id(seed)

    def announcement(round_number: int, swarm: str = "s1", author: str | None = None) -> bytes:
        return seal(
            RolloutAnnouncement(
                swarm_id=swarm,
                round=round_number,
                stage=0,
                peer_id=author or me,
                batch_digest=bytes(32),
                group_count=4,
                size_bytes=100,
            ),
            seed,
        )

    check = announcement_check("s1", lambda: 10, 1280)
    assert check(me, announcement(10)) is None
    assert check(me, announcement(11)) is None  # the next round: a peer slightly ahead
    assert check(me, announcement(9)) is None  # one behind: still relayed for laggards
    assert check(me, announcement(8)) == "stale_round"
    assert check(me, announcement(12)) == "future_round"
    assert check(me, announcement(10, swarm="other")) == "wrong_swarm"
    assert check("12D3KooWsomeoneelse", announcement(10)) == "sender_mismatch"
    assert check(me, b"\x00\xffnot msgpack") is not None
    assert check(me, b"x" * 2000) == "oversized"
    _, a_hello = hello(seed, 10)
    assert check(me, a_hello) == "wrong_kind"
    assert announcement_check("s1", lambda: None, 1280)(me, announcement(10**6)) is None


def test_over_real_libp2p_a_fresh_hello_is_delivered_and_a_replayed_old_one_is_refused() -> None:
    from swarmp2p.net.checks import install_gossip_checks

    hello_topic, announce = "swarmp2p/s1/hello", "swarmp2p/s1/announce"

    async def main() -> None:
        with trio.fail_after(60):
            sender_key = create_new_key_pair()
            seed = sender_key.private_key.to_bytes()[:32]
            async with (
                open_libp2p_network(sender_key, FAST) as sender,
                open_libp2p_network(create_new_key_pair(), FAST) as node,
            ):
                now = [3]
                stats: dict[str, int] = {"hellos_accepted": 0, "hellos_rejected": 0}
                guard = install_gossip_checks(
                    node,
                    swarm_id="s1",
                    hello_topic=hello_topic,
                    announce_topic=announce,
                    current_round=lambda: now[0],
                    open_hello=open_hello,
                    hello_stats=stats,
                    max_announce_bytes=1280,
                )
                assert guard is not None
                inbox = await node.subscribe(hello_topic)
                await sender.subscribe(hello_topic)
                await node.connect(sender.listen_addrs()[0])
                peer_id, old = hello(seed, 3)
                assert peer_id == sender.local_peer_id
                node_id = ID.from_base58(node.local_peer_id)
                await wait_until(lambda: node_id in sender.pubsub.peer_topics.get(hello_topic, ()))
                await sender.publish(hello_topic, old)
                with trio.fail_after(10):
                    assert (await inbox.receive()).data == old
                now[0] = 10  # the swarm moved on; the same signed hello is published again
                await sender.publish(hello_topic, old)
                await wait_until(lambda: stats["hellos_stale"] == 1)
                _, fresh = hello(seed, 10)
                await sender.publish(hello_topic, fresh)
                with trio.fail_after(10):
                    assert (await inbox.receive()).data == fresh  # the stale one never arrived
                assert stats["hellos_rejected"] == 1
                assert node.gossip_rejections["stale"] == 1

    trio.run(main)
