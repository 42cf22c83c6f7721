"""The runtime's clocks (swarmp2p.ports.Clock): milliseconds since the Unix epoch.

- `RealClock`: wall time, for `swarmp2p node` and the chain coordinator. The only wall clock:
  a second one (the chain adapter had its own) would let two parts of one node disagree on
  rounding at a round boundary.
- `TrioClock`: trio's clock, which is virtual under `trio.testing.MockClock` (the simulator's
  time) and shifted to look like epoch time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from swarmp2p.ports import Waker, trio_sleep_wakeable


class RealClock:
    """Wall-clock milliseconds since the Unix epoch."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Waker], None]) -> None:
        await trio_sleep_wakeable(seconds, set_waker)


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

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Waker], None]) -> None:
        await trio_sleep_wakeable(seconds, set_waker)
