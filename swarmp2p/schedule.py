"""Chain-less round coordination: the round clock is a fixed schedule every peer derives locally.

A swarm without a chain agrees on one `SwarmSchedule` (genesis time, round length, stage count,
seed), fixed by its first peer and carried in hellos. Every peer then computes the current round
from its own clock, so no peer has to stay up for the swarm to keep its rhythm. Rewards and
winners are recorded locally here; the node may additionally publish them as DHT records.

The clocks it reads live in swarmp2p/clocks.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.messages import SwarmSchedule
from protocol.stage_schedule import StageSchedule
from swarmp2p.ports import Clock, CoordinatorError, RoundInfo


class ScheduleCoordinator:
    """CoordinatorPort for chain-less swarms: round = (now - genesis) // round_ms.

    `submit_reward` / `submit_winners` are recorded in memory (`rewards`, `winners`) so the
    dashboard and the simulator's report can read them; they never fail.
    """

    def __init__(self, schedule: SwarmSchedule, clock: Clock) -> None:
        if schedule.round_ms <= 0 or schedule.stage_count <= 0:
            raise ValueError("schedule needs round_ms > 0 and stage_count > 0")
        if schedule.round_ms % schedule.stage_count:
            raise ValueError("round_ms must be a multiple of stage_count")
        self.schedule = schedule
        self.stages = StageSchedule(
            schedule.genesis_ms, schedule.round_ms // schedule.stage_count, schedule.stage_count
        )
        self.clock = clock
        self.registered: list[str] = []
        self.rewards: dict[tuple[int, int], dict[str, float]] = {}
        self.winners: dict[int, dict[str, tuple[str, ...]]] = {}

    def info_at(self, now_ms: int) -> RoundInfo:
        """The round and stage at `now_ms`: a pure function of the schedule (used by tests too)."""
        if now_ms < self.schedule.genesis_ms:
            raise CoordinatorError("not_started")
        round_number, stage = self.stages.position(now_ms)
        return RoundInfo(
            round=round_number,
            stage=stage,
            stage_count=self.schedule.stage_count,
            stage_ends_ms=self.stages.stage_ends_ms(round_number, stage),
            stage_ms=self.stages.stage_ms,
        )

    async def current(self) -> RoundInfo:
        return self.info_at(self.clock.now_ms())

    async def register(self, peer_id: str) -> None:
        if peer_id not in self.registered:
            self.registered.append(peer_id)

    async def submit_reward(self, round: int, stage: int, reward: float, peer_id: str) -> None:
        self.rewards.setdefault((round, stage), {})[peer_id] = reward

    async def submit_winners(self, round: int, winners: Sequence[str], peer_id: str) -> None:
        self.winners.setdefault(round, {})[peer_id] = tuple(winners)
