"""Every per-peer table of a node stays within its peer book under churn: 1,000 peers (real
py-libp2p hosts, each with a fresh key, listening, subscribing to the node's topic) join one by
one, twenty at a time, and leave. The peer book is capped; py-libp2p's peerstore, its
auto-connector's cooldowns and pubsub's and gossipsub's per-peer state must end within the book
plus a small constant (docs/reliability.md lists each table and its bound)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import multiaddr
import pytest
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11
from libp2p.pubsub.pb import rpc_pb2
from libp2p.utils.varint import encode_varint_prefixed

from swarmp2p.net import LibP2PNetwork, NetworkSettings, open_libp2p_network
from tests.helpers.waiting import wait_until

TOPIC = "swarmp2p/test/churn"
PEERS = 1000
AT_ONCE = 20
BOOK = 32
SETTINGS = NetworkSettings(
    handler_timeout_s=2.0,
    peer_exchange_interval_s=0.5,
    upkeep_interval_s=0.2,
    upkeep_settled_s=0.5,
    max_known_peers=BOOK,
    peerstore_grace_s=1.0,
)


async def join_and_leave(target: PeerInfo) -> None:
    """One peer's visit: connect (identify, pubsub hello), subscribe to the node's topic, stay a
    moment, disconnect and stop."""
    host = new_host(key_pair=create_new_key_pair())
    async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
        await host.connect(target)
        stream = await host.new_stream(target.peer_id, [PROTOCOL_ID_V11])
        hello = rpc_pb2.RPC(subscriptions=[rpc_pb2.RPC.SubOpts(subscribe=True, topicid=TOPIC)])
        await stream.write(encode_varint_prefixed(hello.SerializeToString()))
        await trio.sleep(0.3)
        await host.disconnect(target.peer_id)
        # As a process that exits: py-libp2p's host.run leaves its listener open otherwise, and
        # the node's re-dials would reach a host that no longer runs.
        await host.close()


def _sized(tables: dict[str, Any], name: str, table: Any) -> None:
    if table is not None:
        tables[name] = len(table)


def per_peer_tables(node: LibP2PNetwork) -> dict[str, int]:
    """Entries in every table of the node (ours and py-libp2p's) that holds something per peer."""
    tables: dict[str, int] = {}
    peerstore = node.host.get_peerstore()
    _sized(tables, "peerstore", peerstore.peer_data_map)
    _sized(tables, "peerstore.peer_records", peerstore.peer_record_map)
    network = node.host.get_network()
    auto_connector = getattr(network, "auto_connector", None)
    for name in ("_recent_disconnects", "_failure_counts", "_last_connect_attempt"):
        _sized(tables, f"auto_connector.{name}", getattr(auto_connector, name, None))
    for name in ("connections", "_round_robin_index", "health_data"):
        _sized(tables, f"swarm.{name}", getattr(network, name, None))
    _sized(tables, "host._identified_peers", getattr(node.host, "_identified_peers", None))
    manager = getattr(network, "_resource_manager", None)
    limiter = getattr(manager, "connection_rate_limiter", None)
    for name in ("_token_buckets", "_last_request_times", "_window_counts"):
        _sized(tables, f"resource_manager.rate.{name}", getattr(limiter, name, None))
    tracker = getattr(manager, "connection_tracker", None)
    _sized(tables, "resource_manager.established_per_peer", getattr(tracker, "established_per_peer", None))
    pubsub = node.pubsub
    names = (
        "peers",
        "peer_queues",
        "_replayed_recent_topics",
        "_peer_subscription_count",
        "_paused_until",
        "_reading",
    )
    for name in names:
        _sized(tables, f"pubsub.{name}", getattr(pubsub, name, None))
    tables["pubsub.peer_topics"] = len({peer for peers in pubsub.peer_topics.values() for peer in peers})
    router: Any = pubsub.router
    for name in (
        "peer_protocol",
        "dont_send_message_ids",
        "message_rate_limits",
        "iwant_request_limits",
        "ihave_message_limits",
        "graft_flood_tracking",
        "_skipped_ihave",
        "_pending_messages",
    ):
        _sized(tables, f"gossipsub.{name}", getattr(router, name, None))
    tables["gossipsub.mesh"] = len({peer for peers in router.mesh.values() for peer in peers})
    tables["gossipsub.back_off"] = len({peer for peers in router.back_off.values() for peer in peers})
    scorer = getattr(router, "scorer", None)
    for name, value in (vars(scorer) if scorer is not None else {}).items():
        if isinstance(value, dict):
            tables[f"gossipsub.scorer.{name}"] = len(value)
    limiter = pubsub.forwarder_limiter
    _sized(tables, "forwarder_limiter", limiter._buckets if limiter is not None else None)
    _sized(tables, "node.neighbours", node.neighbours._entries)
    _sized(tables, "node.exchange_quiet", node.exchange.quiet_until)
    _sized(tables, "node.dht_peers", node._dht_peers)
    tables["dht.routing_table"] = len(node.dht.routing_table.get_peer_ids())
    return tables


def over_bound(tables: dict[str, int], bound: int, skip: Iterable[str] = ()) -> dict[str, int]:
    return {name: size for name, size in tables.items() if size > bound and name not in skip}


@pytest.mark.slow  # 1,000 real hosts: about 80 s of one core
def test_after_1000_peers_join_and_leave_every_per_peer_table_is_within_the_peer_book() -> None:
    async def main() -> None:
        with trio.fail_after(600):
            async with open_libp2p_network(create_new_key_pair(), SETTINGS) as node:
                await node.subscribe(TOPIC)
                target = info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0]))
                slots = trio.Semaphore(AT_ONCE)
                visits = {"done": 0, "failed": 0}
                why: dict[str, int] = {}

                async def visit() -> None:
                    async with slots:
                        try:
                            await join_and_leave(target)
                            visits["done"] += 1
                        except Exception as error:
                            visits["failed"] += 1  # a visit that did not connect adds nothing
                            while isinstance(error, BaseExceptionGroup):
                                error = error.exceptions[0]
                            key = f"{type(error).__name__}: {error}"[-300:]
                            why[key] = why.get(key, 0) + 1

                async with trio.open_nursery() as nursery:
                    for _ in range(PEERS):
                        nursery.start_soon(visit)
                assert visits["done"] >= 0.95 * PEERS, (visits, why)
                # Everyone has left; the book still names up to BOOK of them (dead now).
                await wait_until(lambda: not node.connected_peers(), 30)
                assert len(node.book) <= BOOK
                # A few upkeep ticks past the grace.
                with trio.move_on_after(30):
                    while over_bound(per_peer_tables(node), len(node.book) + 1):
                        await trio.sleep(0.1)
                tables = per_peer_tables(node)
                print(f"after {visits} visits: book {len(node.book)}, tables {tables}")
                # Within the book plus ourselves (the peerstore holds our own keys).
                assert over_bound(tables, len(node.book) + 1) == {}, tables
                assert node.counters["peerstore_pruned"] >= visits["done"] - BOOK - 1
                assert node.status()["tables"]["peerstore"] == tables["peerstore"]

    trio.run(main)


def test_a_node_accepts_inbound_connections_after_max_connections_have_come_and_gone() -> None:
    """py-libp2p held each inbound connection's slot until the host stopped: with
    `max_connections` 10, the 11th peer ever to connect was refused, though the 10 before had
    all left (swarmp2p/net/inbound_slots.py)."""
    settings = NetworkSettings(
        handler_timeout_s=2.0,
        upkeep_interval_s=0.2,
        target_peers=2,
        conn_low_watermark=4,
        conn_high_watermark=8,
        max_connections=10,
    )

    async def main() -> None:
        with trio.fail_after(120):
            async with open_libp2p_network(create_new_key_pair(), settings) as node:
                target = info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0]))
                for _ in range(25):
                    await join_and_leave(target)
                    # Gone before the next comes: at most one live inbound connection at a time.
                    await wait_until(lambda: not node.connected_peers(), 10)

    trio.run(main)


def test_a_peer_met_through_the_dht_is_kept_for_the_grace_then_pruned() -> None:
    """An address the DHT learned (a closer peer named in an answer) is not pruned while a
    lookup may still dial it, and is once the grace has passed; our own entry never is."""
    settings = NetworkSettings(
        handler_timeout_s=2.0, upkeep_interval_s=0.2, upkeep_settled_s=0.5, peerstore_grace_s=2.0
    )

    async def main() -> None:
        with trio.fail_after(60):
            async with open_libp2p_network(create_new_key_pair(), settings) as node:
                stranger = create_new_key_pair()
                pid = ID.from_pubkey(stranger.public_key)
                peerstore = node.host.get_peerstore()
                peerstore.add_addrs(pid, [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/9")], 120)
                await trio.sleep(1.0)
                assert peerstore.has_peer(pid)  # within the grace
                await wait_until(lambda: not peerstore.has_peer(pid), 10)
                assert node.counters["peerstore_pruned"] == 1
                assert peerstore.has_peer(node.host.get_id())
                assert peerstore.pubkey(node.host.get_id()) is not None

    trio.run(main)
