"""A Peer on the simulated network with hand-fed announcements: the inbound path without a round loop."""

from __future__ import annotations

import hashlib

import trio
import trio.testing

from protocol.envelope import peer_id_from_seed
from protocol.messages import (
    SwarmSchedule,
)
from simulator.network import LinkModel, SimWorld
from simulator.policy import CheckpointStore, SimPolicy
from simulator.registry import SimTaskRegistry
from swarmp2p.clocks import TrioClock
from swarmp2p.peer import Peer, PeerSettings, announce_topic
from swarmp2p.schedule import ScheduleCoordinator

ROUND_MS = 10_000

SWARM = "t"


def seed_of(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


class Harness:
    """Three honest peers and one raw attacker port on an in-memory network, on virtual time."""

    def __init__(self, **settings: object) -> None:
        self.clock = TrioClock(0)
        self.coordinator = ScheduleCoordinator(SwarmSchedule(SWARM, 0, ROUND_MS, 1, 5), self.clock)
        self.world = SimWorld(
            LinkModel(), seed=1, now_ms=self.clock.now_ms, round_of=lambda now: now // ROUND_MS
        )
        self.registry = SimTaskRegistry()
        self.settings = PeerSettings(
            swarm_id=SWARM, seed=5, tasks=self.registry.task_names(), poll_interval_s=1.0, **settings
        )
        self.store = CheckpointStore()
        self.peers = [self.make_peer(f"honest-{i}") for i in range(3)]
        self.attacker_seed = seed_of("attacker")
        self.attacker = self.world.attach(peer_id_from_seed(self.attacker_seed))

    def make_peer(self, name: str) -> Peer:
        seed = seed_of(name)
        network = self.world.attach(peer_id_from_seed(seed))
        policy = SimPolicy(network.local_peer_id, self.registry, seed=5, store=self.store)

        async def inline(fn, *args):  # type: ignore[no-untyped-def]
            result = fn(*args)  # inline, then the policy's virtual compute time
            await trio.sleep(policy.take_cost())
            return result

        return Peer(
            self.settings, seed, network, self.coordinator, policy, self.registry, self.clock, offload=inline
        )

    def run(self, rounds: int, attack) -> None:  # type: ignore[no-untyped-def]
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.world.run_deliveries)
                for peer in self.peers:
                    await nursery.start(peer.run)
                await self.attacker.subscribe(announce_topic(SWARM))
                nursery.start_soon(attack, self)
                await trio.sleep(rounds * ROUND_MS / 1000)
                nursery.cancel_scope.cancel()

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
