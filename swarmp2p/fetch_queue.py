"""A bounded fetch queue with two lanes: workers take lane 0 (established senders) before lane 1
(unknown keys). A FIFO channel let a few hundred fetches of throwaway keys, each of which may
wait out its timeout, sit in front of an honest peer's fetch until its round was over.

Order alone is not enough: 16 unknown keys' fetches released at a round's open can take all 8
workers before the honest announcement arrives, each waits out its timeout, and the honest fetch
queues behind them past the round's collect window (the likely cause of 1 round lost in 18 in
bench/bench_attack.py). A lane
may therefore have a limit on the jobs in the workers' hands at once (`lane_limits`); a worker
reports the end of each job with `done()`, and the workers beyond the limit stay free for the
other lanes.

Otherwise it behaves exactly as trio's memory channel (its code, with lanes): a job put while a
worker waits is handed to the worker that has waited longest, and `get` checkpoints as
`receive` does. With one lane in use (no unknown senders, as in the simulator) the schedule,
and so the simulator's seeded report, is the channel's to the byte.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import outcome
import trio

T = TypeVar("T")


class LaneQueue(Generic[T]):
    def __init__(self, capacity: int, lanes: int = 2, lane_limits: Mapping[int, int] | None = None) -> None:
        if capacity < 1 or lanes < 1:
            raise ValueError("need capacity >= 1 and lanes >= 1")
        limits = dict(lane_limits or {})
        if any(not 0 <= lane < lanes or limit < 1 for lane, limit in limits.items()):
            raise ValueError(f"lane limits need lanes in 0..{lanes - 1} and limits >= 1: {limits}")
        self.capacity = capacity
        self._lanes: tuple[deque[T], ...] = tuple(deque() for _ in range(lanes))
        self._limits = limits
        self._busy = [0] * lanes  # jobs of each lane in the workers' hands
        self._lane_of_worker: dict[trio.lowlevel.Task, int] = {}  # what each busy worker holds
        # Workers waiting for a job, longest first (waiting only while no lane has a job they may take).
        self._waiting: OrderedDict[trio.lowlevel.Task, None] = OrderedDict()

    def _may_start(self, lane: int) -> bool:
        limit = self._limits.get(lane)
        return limit is None or self._busy[lane] < limit

    def _hand_out(self, task: trio.lowlevel.Task, lane: int) -> None:
        self._busy[lane] += 1
        self._lane_of_worker[task] = lane

    def done(self) -> None:
        """The calling worker finished the job `get` gave it. A job of a limited lane that waited
        for this slot goes to the longest-waiting worker."""
        lane = self._lane_of_worker.pop(trio.lowlevel.current_task(), None)
        if lane is None:
            return
        self._busy[lane] -= 1
        if self._waiting and self._lanes[lane] and self._may_start(lane):
            task, _ = self._waiting.popitem(last=False)
            self._hand_out(task, lane)
            trio.lowlevel.reschedule(task, outcome.Value(self._lanes[lane].popleft()))

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes)

    def put_nowait(self, item: T, lane: int = 0) -> None:
        """Queue `item` in `lane` (or hand it to a waiting worker); trio.WouldBlock when full."""
        if self._waiting and self._may_start(lane):
            task, _ = self._waiting.popitem(last=False)
            self._hand_out(task, lane)
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
        """The next item of the first non-empty lane below its limit, waiting for one if none is
        queued. Call `done()` when its job is finished."""
        await trio.lowlevel.checkpoint_if_cancelled()
        task = trio.lowlevel.current_task()
        for index, lane in enumerate(self._lanes):
            if lane and self._may_start(index):
                item = lane.popleft()
                self._hand_out(task, index)
                await trio.lowlevel.cancel_shielded_checkpoint()
                return item
        self._waiting[task] = None

        def abort(_: Any) -> trio.lowlevel.Abort:
            del self._waiting[task]
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)  # type: ignore[no-any-return]
