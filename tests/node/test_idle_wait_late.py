"""The round loop's idle wait when its deadline has passed before the sleep starts.

The loop reads the clock, asks the round machine when to wake (at least 1 ms later), and the
wait reads the clock again. On a loaded host the second reading can be later than the wake
time (another thread held the GIL, the process was descheduled): the wait must then end at
once. A negative sleep raised trio's ValueError and ended a chain soak's node at round 565."""

from __future__ import annotations

from collections.abc import Callable

import trio

from swarmp2p.idle_wait import IdleWait
from swarmp2p.ports import Waker, trio_sleep_wakeable


class LateClock:
    """A clock whose every reading is `step_ms` after the previous one."""

    def __init__(self, start_ms: int, step_ms: int) -> None:
        self.ms = start_ms
        self.step_ms = step_ms
        self.slept: list[float] = []

    def now_ms(self) -> int:
        self.ms += self.step_ms
        return self.ms

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Waker], None]) -> None:
        self.slept.append(seconds)
        await trio_sleep_wakeable(seconds, set_waker)


def test_a_wait_whose_wake_time_has_passed_ends_at_once() -> None:
    clock = LateClock(start_ms=1_000, step_ms=5)
    wait = IdleWait(clock)

    async def main() -> None:
        now = clock.now_ms()
        with trio.fail_after(1):
            await wait.until(now + 1)  # the next reading is 5 ms later: 4 ms past the wake time

    trio.run(main)
    assert clock.slept == [0.0]


def test_a_wait_in_the_future_sleeps_until_then() -> None:
    clock = LateClock(start_ms=1_000, step_ms=0)
    wait = IdleWait(clock)

    async def main() -> None:
        await wait.until(clock.now_ms() + 20)

    trio.run(main)
    assert clock.slept == [0.02]
