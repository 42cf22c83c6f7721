"""ScheduleCoordinator: the chain-less round clock is pure arithmetic on the schedule."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import SwarmSchedule
from swarmp2p.clocks import RealClock, TrioClock
from swarmp2p.ports import CoordinatorError
from swarmp2p.schedule import ScheduleCoordinator


class FixedClock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


@given(
    genesis=st.integers(0, 2**45),
    stage_ms=st.integers(1, 10**6),
    stages=st.integers(1, 16),
    offset=st.integers(0, 10**10),
)
def test_round_and_stage_follow_the_schedule(genesis: int, stage_ms: int, stages: int, offset: int) -> None:
    schedule = SwarmSchedule("s", genesis, stage_ms * stages, stages, 1)
    coordinator = ScheduleCoordinator(schedule, FixedClock(genesis + offset))
    info = coordinator.info_at(genesis + offset)
    round_start = genesis + info.round * schedule.round_ms
    assert round_start <= genesis + offset < round_start + schedule.round_ms
    assert 0 <= info.stage < stages
    assert info.stage_count == stages
    # The stage ends strictly after now and at most one stage later.
    assert genesis + offset < info.stage_ends_ms <= genesis + offset + stage_ms
    # One millisecond before the stage end we are still in the same stage; at the end, the next.
    assert coordinator.info_at(info.stage_ends_ms - 1) == info
    after = coordinator.info_at(info.stage_ends_ms)
    assert (after.round, after.stage) == (
        (info.round, info.stage + 1) if info.stage + 1 < stages else (info.round + 1, 0)
    )


def test_before_genesis_is_a_coordinator_error() -> None:
    coordinator = ScheduleCoordinator(SwarmSchedule("s", 1000, 100, 1, 1), FixedClock(999))
    with pytest.raises(CoordinatorError) as error:
        coordinator.info_at(999)
    assert error.value.reason == "not_started"


def test_bad_schedules_are_refused() -> None:
    with pytest.raises(ValueError):
        ScheduleCoordinator(SwarmSchedule("s", 0, 0, 1, 1), FixedClock(0))
    with pytest.raises(ValueError):
        ScheduleCoordinator(SwarmSchedule("s", 0, 100, 3, 1), FixedClock(0))


def test_rewards_and_winners_are_recorded() -> None:
    async def main() -> ScheduleCoordinator:
        coordinator = ScheduleCoordinator(SwarmSchedule("s", 0, 100, 1, 1), FixedClock(250))
        await coordinator.register("a")
        await coordinator.register("a")
        await coordinator.submit_reward(2, 0, 0.5, "a")
        await coordinator.submit_winners(2, ["a", "b"], "a")
        assert (await coordinator.current()).round == 2
        return coordinator

    coordinator = trio.run(main)
    assert coordinator.registered == ["a"]
    assert coordinator.rewards == {(2, 0): {"a": 0.5}}
    assert coordinator.winners == {2: {"a": ("a", "b")}}


def test_clocks() -> None:
    assert abs(RealClock().now_ms() - __import__("time").time() * 1000) < 5000

    async def main() -> tuple[int, int]:
        clock = TrioClock(epoch_ms=1_000)
        before = clock.now_ms()
        await trio.sleep(2.5)
        return before, clock.now_ms()

    assert trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0)) == (1_000, 3_500)
