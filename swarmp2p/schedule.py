"""Chain-less round coordination: the round clock is a fixed schedule every peer derives locally.

A swarm without a chain agrees on one `SwarmSchedule` (genesis time, round length, stage count,
seed), fixed by its first peer and carried in hellos. Every peer then computes the current round
from its own clock, so no peer has to stay up for the swarm to keep its rhythm. Rewards and
winners are recorded locally here; the node may additionally publish them as DHT records.

Also home of the two clocks: `RealClock` (wall time) and `TrioClock` (trio's clock, which is
virtual under `trio.testing.MockClock` — the simulator's time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from protocol.messages import SwarmSchedule
from swarmp2p.ports import Clock, CoordinatorError, RoundInfo


class RealClock:
    """Wall-clock milliseconds since the Unix epoch."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class TrioClock:
    """Milliseconds on trio's clock, shifted to look like epoch time.

    Under `MockClock` this is virtual time, so a simulated swarm and its schedule share one
    deterministic timeline. Must be called from inside `trio.run`.
    """

    def __init__(self, epoch_ms: int = 0, clock: Any = None) -> None:
        """`clock`: the trio Clock the run uses (e.g. the simulator's MockClock). Reading it
        directly skips trio's run-context lookup; the simulator reads the time ~10k times per
        virtual round. Without it, `trio.current_time()` is used."""
        self.epoch_ms = epoch_ms
        self._current_time: Callable[[], float] | None = clock.current_time if clock is not None else None

    def now_ms(self) -> int:
        if self._current_time is not None:
            return self.epoch_ms + round(self._current_time() * 1000)
        import trio  # local: schedule.py stays importable without a running trio loop

        return self.epoch_ms + round(trio.current_time() * 1000)


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
        self.clock = clock
        self.registered: list[str] = []
        self.rewards: dict[tuple[int, int], dict[str, float]] = {}
        self.winners: dict[int, dict[str, tuple[str, ...]]] = {}

    def info_at(self, now_ms: int) -> RoundInfo:
        """The round and stage at `now_ms`: a pure function of the schedule (used by tests too)."""
        elapsed = now_ms - self.schedule.genesis_ms
        if elapsed < 0:
            raise CoordinatorError("not_started")
        stage_ms = self.schedule.round_ms // self.schedule.stage_count
        round_number, into_round = divmod(elapsed, self.schedule.round_ms)
        stage = into_round // stage_ms
        stage_ends = self.schedule.genesis_ms + round_number * self.schedule.round_ms + (stage + 1) * stage_ms
        return RoundInfo(
            round=round_number, stage=stage, stage_count=self.schedule.stage_count, stage_ends_ms=stage_ends
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
