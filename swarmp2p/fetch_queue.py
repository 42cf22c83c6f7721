"""A bounded fetch queue with two lanes: workers take lane 0 (established senders) before lane 1
(unknown keys). A FIFO channel let a few hundred fetches of throwaway keys, each of which may
wait out its timeout, sit in front of an honest peer's fetch until its round was over (issue 15).

Otherwise it behaves exactly as trio's memory channel (its code, with lanes): a job put while a
worker waits is handed to the worker that has waited longest, and `get` checkpoints as
`receive` does. With one lane in use (no unknown senders, as in the simulator) the schedule,
and so the simulator's seeded report, is the channel's to the byte.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import outcome
import trio

T = TypeVar("T")


class LaneQueue(Generic[T]):
    def __init__(self, capacity: int, lanes: int = 2) -> None:
        if capacity < 1 or lanes < 1:
            raise ValueError("need capacity >= 1 and lanes >= 1")
        self.capacity = capacity
        self._lanes: tuple[deque[T], ...] = tuple(deque() for _ in range(lanes))
        # Workers waiting for a job, longest first (only ever waiting while every lane is empty).
        self._waiting: OrderedDict[trio.lowlevel.Task, None] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes)

    def put_nowait(self, item: T, lane: int = 0) -> None:
        """Queue `item` in `lane` (or hand it to a waiting worker); trio.WouldBlock when full."""
        if self._waiting:
            task, _ = self._waiting.popitem(last=False)
            trio.lowlevel.reschedule(task, outcome.Value(item))
            return
        if len(self) >= self.capacity:
            raise trio.WouldBlock
        self._lanes[lane].append(item)

    @asynccontextmanager
    async def worker(self) -> AsyncIterator[None]:
        """Wraps a worker's life as `async with receive_channel` did: leaving it is a checkpoint
        (the channel's `aclose`), even when cancelled. One schedule point more or less per
        stopped worker reorders the simulator's seeded schedule, hence its report."""
        try:
            yield
        finally:
            await trio.lowlevel.checkpoint()

    async def get(self) -> T:
        """The next item of the first non-empty lane, waiting for one if none is queued."""
        await trio.lowlevel.checkpoint_if_cancelled()
        for lane in self._lanes:
            if lane:
                item = lane.popleft()
                await trio.lowlevel.cancel_shielded_checkpoint()
                return item
        task = trio.lowlevel.current_task()
        self._waiting[task] = None

        def abort(_: Any) -> trio.lowlevel.Abort:
            del self._waiting[task]
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)  # type: ignore[no-any-return]
