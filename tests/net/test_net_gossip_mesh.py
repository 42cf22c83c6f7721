"""The gossip mesh settles (swarmp2p/net/gossip_router.py's CountingGossipSub): with more subscribers
than D_high, idle nodes stop exchanging GRAFT and PRUNE once their meshes have formed, and
honest peers never take each other's GRAFTs for a flood.

py-libp2p 0.8.1 grafts opportunistically on every heartbeat, accepts GRAFTs past D_high and
sets no backoff on the peers its heartbeat prunes; together they kept an idle mesh churning
for as long as it ran (docs/benchmarks.md)."""

from __future__ import annotations

import collections
from collections.abc import Callable
from contextlib import AsyncExitStack

import pytest
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.pubsub.gossipsub import GossipSub

from swarmp2p.net import LibP2PNetwork, NetworkSettings, open_libp2p_network
from swarmp2p.net.gossip_router import OPPORTUNISTIC_GRAFT_TICKS

TOPIC = "swarmp2p/test/mesh"
NODES = 10
# D_high below the 9 other subscribers, so meshes can overfill and must be kept in bounds.
SMALL_MESH = dict(mesh_degree=3, mesh_degree_low=2, mesh_degree_high=4, heartbeat_s=0.1)
# The meshes form within WARM heartbeats of every node, then stay put for IDLE more. Counted in
# heartbeats, not seconds: on a busy machine a node's heartbeats come late and seconds would
# hold fewer of them (the warm-up then ended before the meshes had formed).
WARM = IDLE = 20
assert IDLE < OPPORTUNISTIC_GRAFT_TICKS  # see `restart_heartbeat_count`


def restart_heartbeat_count(nets: list[LibP2PNetwork]) -> None:
    """Count every node's heartbeats from 0 (once all are connected, and as the idle window
    opens): the opportunistic grafting round (every OPPORTUNISTIC_GRAFT_TICKS heartbeats, which
    may graft by design) then falls after the idle window, however long the connecting and the
    warm-up took."""
    for net in nets:
        net.pubsub.router._heartbeats = 0  # type: ignore[attr-defined]


def mesh_sizes(nets: list[LibP2PNetwork]) -> list[int]:
    return [len(net.pubsub.router.mesh.get(TOPIC, ())) for net in nets]  # type: ignore[attr-defined]


def formed(nets: list[LibP2PNetwork]) -> bool:
    """Every node's mesh holds D_low to D_high peers."""
    low, high = SMALL_MESH["mesh_degree_low"], SMALL_MESH["mesh_degree_high"]
    return all(low <= size <= high for size in mesh_sizes(nets))


async def wait_heartbeats(
    nets: list[LibP2PNetwork], count: int, also: Callable[[], bool] = lambda: True
) -> None:
    """Until every node has run `count` heartbeats since `restart_heartbeat_count` and `also()`
    holds (bounded)."""
    with trio.fail_after(60):
        while any(net.pubsub.router._heartbeats < count for net in nets) or not also():  # type: ignore[attr-defined]
            await trio.sleep(0.05)


@pytest.mark.alone  # ten nodes in one process: on a starved machine their connections time out
def test_an_idle_mesh_stops_grafting_and_pruning(monkeypatch: pytest.MonkeyPatch) -> None:
    received: collections.Counter[str] = collections.Counter()
    handle_graft, handle_prune = GossipSub.handle_graft, GossipSub.handle_prune
    check_flood = GossipSub._check_graft_flood_protection

    async def counting_graft(self: GossipSub, msg: object, sender: object) -> None:
        received["graft"] += 1
        await handle_graft(self, msg, sender)  # type: ignore[arg-type]

    async def counting_prune(self: GossipSub, msg: object, sender: object) -> None:
        received["prune"] += 1
        await handle_prune(self, msg, sender)  # type: ignore[arg-type]

    def counting_flood_check(self: GossipSub, peer: object, topic: str) -> bool:
        ok = check_flood(self, peer, topic)  # type: ignore[arg-type]
        received["flood_refused"] += not ok
        return ok

    monkeypatch.setattr(GossipSub, "handle_graft", counting_graft)
    monkeypatch.setattr(GossipSub, "handle_prune", counting_prune)
    monkeypatch.setattr(GossipSub, "_check_graft_flood_protection", counting_flood_check)

    async def main() -> tuple[collections.Counter[str], collections.Counter[str], list[int]]:
        async with AsyncExitStack() as stack:
            nets = []
            for _ in range(NODES):
                bootstrap = [nets[0].listen_addrs()[0]] if nets else []
                settings = NetworkSettings(bootstrap=bootstrap, **SMALL_MESH)  # type: ignore[arg-type]
                net = await stack.enter_async_context(open_libp2p_network(create_new_key_pair(), settings))
                nets.append(net)
                await nets[-1].subscribe(TOPIC)
            for net in nets:
                for other in nets:
                    if other is not net:
                        await net.connect(other.listen_addrs()[0])
            with trio.fail_after(30):
                while any(len(net.connected_peers()) < NODES - 1 for net in nets):
                    await trio.sleep(0.1)
            restart_heartbeat_count(nets)
            await wait_heartbeats(nets, WARM, lambda: formed(nets))  # the meshes form
            warm = collections.Counter(received)
            restart_heartbeat_count(nets)
            await wait_heartbeats(nets, IDLE)  # idle
            idle = collections.Counter(received)
            idle.subtract(warm)
            meshes = mesh_sizes(nets)
            return warm, idle, meshes

    warm, idle, meshes = trio.run(main)
    assert warm["graft"] > 0  # the meshes did form
    assert idle["graft"] + idle["prune"] <= 2, (warm, idle)
    assert warm["flood_refused"] + idle["flood_refused"] == 0, (warm, idle)
    assert all(1 <= size <= SMALL_MESH["mesh_degree_high"] for size in meshes), meshes
