"""Attacks on two running honest Peers over real py-libp2p (netlab/attack_kit.py): a
gossip flood from one outside host, DHT-store abuse and hello replay. Each asserts that the two
honest peers still get (fetch and verify) each other's batch in every round and that the
defence's counters moved (in /api/status and, as Prometheus series, in /metrics). Whether a
node then trains on the other's rollouts also depends on the sampler, which drops question
groups of zero advantage (about 1 node-round in 20 with the simulator's policy, attack or
not), so training is reported by the bench, not asserted here (`Pair.rounds_not_trained`)."""

from __future__ import annotations

import time
from typing import Any

import attrs
import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11

from netlab.attack_kit import (
    FAST,
    SWARM,
    Pair,
    Sybil,
    gossip_frame,
    hello_replay,
    run_attacker,
    run_pair,
    wait_round_done,
    wait_rounds,
)
from swarmp2p.dashboard import normalize_status, render_metrics
from swarmp2p.net import open_libp2p_network
from swarmp2p.peer_settings import announce_topic
from tests.helpers.metrics import assert_every_status_counter_exported
from tests.helpers.waiting import wait_until


def metric(status: dict, family: str, label: str, key: str) -> float:
    text = render_metrics(normalize_status(status), 0)[0].decode()
    prefix = f'{family}{{{label}="{key}"}} '
    values = [float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)]
    assert len(values) == 1, (prefix, values)
    return values[0]


@pytest.mark.alone  # two peers and an attacker at full speed, judged by round deadlines
def test_a_gossip_flood_from_one_host_loses_no_honest_rollouts() -> None:
    """The attacker process writes gossip as fast as the streams take it for two whole rounds:
    announcements of 500 throwaway keys (validly signed), junk validly signed by one key, wrongly
    signed messages. Both honest peers must get each other's batch in every round: the one
    before, the two during and the one after the flood (on main: 3 rounds of 7 with none).

    Rounds of 8 s (collect window 4.8 s; a node's default is 30 s): both honest peers share this
    one Python process, which the flood starves for seconds at a time, and with 4 s rounds an
    announcement 3-7 s late lost a round in 1-2 of 6 runs on an idle 2-core machine. The
    attacker starts (imports, 500 keys, connections) during the first round and floods from the
    second round's start to the third's end, so no round is spent waiting for its start-up."""
    report: dict = {}

    async def attack(pair: Pair) -> None:
        first = pair.current_round() + 1  # the pair starts on a boundary: one whole round before
        args = pair.attacker_args("flood", 2 * pair.round_ms / 1000, 500, start_round=first)
        report.update(await run_attacker(args, 2 * pair.round_ms / 1000, pair.round_start_in_s(first)))
        await wait_round_done(pair, first + 2)  # and one whole round after

    started = time.monotonic()
    pair = run_pair(attack, round_ms=8000)
    wall = time.monotonic() - started
    trained = pair.trained()
    print(
        f"flood test: {wall:.1f} s wall, attacker {report}, rounds {sorted(trained)}, lost {pair.why_lost()}"
    )
    assert report.get("messages", 0) > 5000, report
    assert len(trained) >= 4, (trained, wall)
    assert pair.rounds_lost() == [], pair.why_lost()
    for index in (0, 1):
        status = pair.snapshots[index]
        drops = status["network"]["drops"]
        # Each defence did its part: the attacker's connection past its allowance dropped and
        # its stream paused (on main: read and checked in full, 3 rounds lost), the one key's
        # junk past its burst dropped unverified, the wrongly signed messages refused at the
        # signature, the validly signed junk by the validator.
        assert drops["gossip_forwarder_rate_limited"] > 0, drops
        assert drops["gossip_forwarder_paused"] > 0, drops
        assert drops["gossip_origin_rate_limited"] > 0, drops
        assert drops["gossip_bad_signature"] > 0, drops
        assert drops["gossip_validator_rejected"] > 0, drops
        # The throwaway keys' announcements were held to the unknown keys' share of fetches:
        # every failed fetch is one of theirs (no honest round was lost), at most the share per
        # round. (Whether the share fills, refusing the rest as fetch_unknown_limit, depends on
        # how many of their announcements the paused reading lets in while their round lasts.)
        unknown_share = pair.peers[index].inbox.unknown_fetch_limit
        rounds_seen = len(pair.records[index])
        failed = status["rejections"].get("fetch_failed", 0)
        assert failed <= rounds_seen * unknown_share, (status["rejections"], rounds_seen, unknown_share)
        count = float(drops["gossip_bad_signature"])
        assert metric(status, "swarmp2p_network_drops_total", "kind", "gossip_bad_signature") == count
        assert_every_status_counter_exported(status)


@pytest.mark.alone  # two peers and an attacker at full speed, judged by round deadlines
def test_dht_store_abuse_is_bounded_and_counted_and_loses_no_honest_rollouts() -> None:
    """For three rounds (12 s) the attacker process stores straight at both nodes (PUT_VALUE):
    validly signed ~960 KiB batch records under its own key (rounds now and next, three stages),
    60 KiB validly signed records of 200 throwaway keys, records outside our namespace, under
    malformed keys and with a libp2p record signature that does not verify. Each node keeps at
    most its per-owner caps of any one key, refuses and counts the rest, and the honest peers get
    each other's batch in every round."""
    report: dict = {}
    held: list[dict[str, tuple[int, int]]] = []
    settings = FAST

    async def attack(pair: Pair) -> None:
        # Started at once, it stores from the second round on: a whole round before it.
        first = pair.current_round() + 1
        args = pair.attacker_args("dht", 12, 200, start_round=first)
        report.update(await run_attacker(args, 12, pair.round_start_in_s(first)))
        for net in pair.nets:
            store = net.dht.value_store
            held.append(
                {owner: (len(keys), store._owner_bytes[owner]) for owner, keys in store._by_owner.items()}
            )
        await wait_rounds(pair, 1)

    started = time.monotonic()
    pair = run_pair(attack, settings=settings)
    print(f"dht test: {time.monotonic() - started:.1f} s wall, attacker {report}")
    trained = pair.trained()
    assert report.get("big", 0) >= 6 and report.get("foreign", 0) >= 3, report
    assert len(trained) >= 4, trained
    assert pair.rounds_lost() == [], pair.why_lost()
    for index in (0, 1):
        per_owner = held[index]
        assert report["owner"] in per_owner, per_owner.keys()  # the attacker's records did arrive...
        for owner, (records, size) in per_owner.items():  # ...and no key holds more than its caps
            assert records <= settings.max_dht_records_per_owner, (owner, records)
            assert size <= settings.max_dht_bytes_per_owner, (owner, size)
        status = pair.snapshots[index]
        drops, tables = status["network"]["drops"], status["network"]["tables"]
        assert tables["dht_record_bytes"] <= settings.max_dht_bytes, tables
        assert drops["dht_evicted_owner_cap"] > 0, drops  # the big records pushed out their elders
        assert drops["dht_foreign_namespace"] > 0, drops
        assert drops["dht_malformed_key"] > 0, drops
        # Refused inside py-libp2p (a key that is not UTF-8, a record over 1 MiB): on main
        # counted nowhere.
        assert drops["dht_refused_by_libp2p"] > 0, drops
        # A record with a libp2p record signature that does not verify: py-libp2p refuses it after
        # our validator accepted it (on main: a debug line, counted nowhere).
        assert drops["dht_bad_record_signature"] > 0, drops
        assert drops["dht_rejected"] >= drops["dht_foreign_namespace"] + drops["dht_malformed_key"], drops
        count = float(drops["dht_foreign_namespace"])
        assert metric(status, "swarmp2p_network_drops_total", "kind", "dht_foreign_namespace") == count
        assert_every_status_counter_exported(status)


def test_an_old_hello_replayed_after_the_seen_cache_forgot_it_is_refused_and_adds_no_peer() -> None:
    """A spy records the gossip messages of node B's hellos, waits three rounds, pushes the ids
    out of node A's seen-cache with 300 junk messages, then replays B's recorded hellos and
    50 hellos of throwaway keys (dead addresses) signed three rounds ago. On main the replayed
    hellos of B skipped the hello check (py-libp2p cached their earlier verdict, "valid", for
    its validation TTL) and were delivered again; now every one is refused and counted
    (hellos_stale / hellos_replayed), A's peer book does not grow, and the pair gets each
    other's batch in every round."""
    # A burst of 300 junk messages from one connection must reach the seen-cache to evict it.
    settings = attrs.evolve(FAST, max_seen_messages=256, forwarder_burst=1000)
    seen: dict[str, Any] = {}

    async def attack(pair: Pair) -> None:
        seen.update(await hello_replay(pair, settings, junk=300))
        await wait_rounds(pair, 1)

    started = time.monotonic()
    pair = run_pair(attack, settings=settings)
    print(f"replay test: {time.monotonic() - started:.1f} s wall, {seen}")
    assert seen["refused"] == seen["sent"], seen  # every replayed and every old hello refused
    assert seen["known_after"] <= seen["known_before"], seen  # none of the dead addresses learned
    trained = pair.trained()
    assert len(trained) >= 4, trained
    assert pair.rounds_lost() == [], pair.why_lost()
    status = pair.snapshots[0]
    assert status["network"]["drops"]["gossip_seen_cache_evicted"] > 0
    stale = float(status["hellos"]["hellos_stale"])
    assert stale >= 50
    assert metric(status, "swarmp2p_hellos_total", "kind", "hellos_stale") == stale
    assert_every_status_counter_exported(status)


def queued(inbox: Any) -> int:
    """Messages waiting in a receiver (a PriorityInbox; main's trio channel had no len)."""
    return len(inbox) if hasattr(inbox, "__len__") else int(inbox.statistics().current_buffer_used)


def test_a_full_gossip_inbox_keeps_a_connected_peers_messages_and_drops_the_floods() -> None:
    """A node that does not keep up: nobody reads its announce topic while an attacker host
    pushes 300 validly signed messages of 30 throwaway keys (more than its inboxes hold), then
    an honest connected peer publishes 5. On main the inboxes dropped whatever came last, the
    honest messages with it; now an honest message takes the place of a flood message (counted)
    where the inbox is full when it comes, and the reader gets the honest ones first."""
    settings = attrs.evolve(FAST, subscription_queue_size=64, forwarder_burst=1000)  # inboxes only
    topic = announce_topic(SWARM)

    async def main() -> None:
        with trio.fail_after(60):
            async with (
                open_libp2p_network(create_new_key_pair(), settings) as node,
                open_libp2p_network(create_new_key_pair(), settings) as honest,
                open_libp2p_network(create_new_key_pair(), settings) as attacker,
            ):
                inbox = await node.subscribe(topic)  # never read until the end
                await honest.subscribe(topic)
                await honest.connect(node.listen_addrs()[0])
                await attacker.connect(node.listen_addrs()[0])
                node_id = ID.from_base58(node.local_peer_id)
                await wait_until(lambda: node_id in honest.pubsub.peer_topics.get(topic, ()))
                stream = await attacker.host.new_stream(node_id, [PROTOCOL_ID_V11])
                keys = [Sybil(f"inbox-{i}") for i in range(30)]
                flood = [k.message(topic, b"flood %d" % i) for i in range(10) for k in keys]
                await stream.write(gossip_frame(flood, [topic]))
                await wait_until(lambda: node.counters["gossip_subscription_queue_full"] > 0)
                for i in range(5):
                    await honest.publish(topic, b"honest %d" % i)
                # Every message is accounted for: queued in the node's inbox, or dropped or
                # evicted (counted) in libp2p's or the node's.
                lost = (
                    "gossip_subscription_queue_full",
                    "gossip_subscription_evicted_unknown",
                    "inbound_channel_full",
                    "inbound_channel_evicted_unknown",
                )
                await wait_until(
                    lambda: queued(inbox) + sum(node.counters[kind] for kind in lost) == len(flood) + 5
                )
                received = []
                while True:
                    try:
                        received.append(inbox.receive_nowait())
                    except trio.WouldBlock:
                        break
                senders = [message.transport_sender for message in received]
                assert [m.data for m in received[:5]] == [b"honest %d" % i for i in range(5)]
                assert senders[:5] == [honest.local_peer_id] * 5
                assert len(received) == settings.subscription_queue_size
                drops = node.status()["drops"]
                # The inbox overflowed and what did not fit was flood: dropped on arrival, or
                # evicted by an honest message that came while it was full. Which of the two
                # depends on how the flood's frames were paced against the honest ones (yamux
                # credit, scheduling): both keep the honest messages, as asserted above. The
                # eviction itself is tested in tests/net/test_net_priority_inbox.py.
                assert (
                    drops["gossip_subscription_evicted_unknown"]
                    + drops["inbound_channel_evicted_unknown"]
                    + drops["inbound_channel_full"]
                    > 0
                )

    trio.run(main)


def test_idle_dht_streams_cannot_hold_the_nodes_dht_closed() -> None:
    """py-libp2p serves 12 inbound DHT streams at a time and resets every stream past those. A
    host that opens 12 and sends nothing held them for ever (so did the nodes' own lookups that
    timed out on their side: after a 60 s sybil attack neither node served any DHT request).
    Now a stream idle for `dht_stream_idle_s` is reset (counted), and a put gets through."""
    from libp2p.kad_dht.pb.kademlia_pb2 import Message, Record
    from libp2p.utils.varint import encode_varint_prefixed

    settings = attrs.evolve(FAST, dht_stream_idle_s=1.5)

    async def main() -> None:
        with trio.fail_after(60):
            async with (
                open_libp2p_network(create_new_key_pair(), settings) as node,
                open_libp2p_network(create_new_key_pair(), settings) as idler,
                open_libp2p_network(create_new_key_pair(), settings) as writer,
            ):
                node_id = ID.from_base58(node.local_peer_id)
                await idler.connect(node.listen_addrs()[0])
                await writer.connect(node.listen_addrs()[0])
                held = [await idler.host.new_stream(node_id, ["/ipfs/kad/1.0.0"]) for _ in range(12)]
                limiter = node.dht._inbound_limiter
                await wait_until(lambda: limiter.borrowed_tokens >= limiter.total_tokens)
                key = f"/swarmp2p/{SWARM}/1/0/{writer.local_peer_id}".encode()
                put = Message(type=Message.MessageType.PUT_VALUE, key=key, record=Record(key=key, value=b"v"))

                async def stored() -> bool:
                    try:
                        stream = await writer.host.new_stream(node_id, ["/ipfs/kad/1.0.0"])
                        await stream.write(encode_varint_prefixed(put.SerializeToString()))
                        with trio.move_on_after(1):
                            await stream.read(1024)
                        await stream.close()
                    except Exception:
                        pass
                    return key in node.dht.value_store.store

                with trio.fail_after(15):
                    while not await stored():
                        await trio.sleep(0.3)
                assert node.counters["dht_stream_idle_reset"] >= 1
                assert len(held) == 12

    trio.run(main)
