"""The round loop's idle wait: sleep until the machine's next deadline, or less when woken
(an announcement for the next round says the swarm has moved on). The sleep itself is the
Clock port's `sleep_wakeable`, so the simulator can park it on its own timer heap."""

from __future__ import annotations

from collections.abc import Callable

import trio

from swarmp2p.ports import Clock


class IdleWait:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._woken = False  # woken while not asleep: the next wait ends at once
        self._waker: Callable[[], None] | None = None

    async def until(self, wake_at_ms: int) -> None:
        """Sleep until `wake_at_ms` (clock time), or until `wake_up`."""
        if self._woken:
            await trio.lowlevel.checkpoint()
        else:
            # The clock is read again here, after the caller's reading: on a loaded host the
            # wake time can already have passed, and a negative sleep is an error in trio.
            seconds = max(0, wake_at_ms - self.clock.now_ms()) / 1000
            try:
                await self.clock.sleep_wakeable(seconds, self._set_waker)
            finally:
                self._waker = None
        self._woken = False

    def _set_waker(self, wake: Callable[[], None]) -> None:
        self._waker = wake

    def wake_up(self) -> None:
        """End the current (or the next) wait now."""
        self._woken = True
        waker, self._waker = self._waker, None
        if waker is not None:
            waker()
