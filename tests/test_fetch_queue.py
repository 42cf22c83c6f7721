"""The fetch queue's lanes: established senders' fetches run before unknown keys' (issue 15),
and otherwise it behaves as the memory channel it replaced."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from swarmp2p.fetch_queue import LaneQueue


def test_lane_zero_runs_first_then_each_lane_in_order() -> None:
    async def main() -> list[str]:
        queue = LaneQueue[str](capacity=300)
        for i in range(256):
            queue.put_nowait(f"sybil{i}", lane=1)
        queue.put_nowait("honest", lane=0)
        queue.put_nowait("honest2", lane=0)
        return [await queue.get() for _ in range(4)]

    assert trio.run(main) == ["honest", "honest2", "sybil0", "sybil1"]


def test_a_full_queue_refuses_and_a_waiting_worker_is_handed_the_job() -> None:
    async def main() -> list[str]:
        queue = LaneQueue[str](capacity=2)
        queue.put_nowait("a", lane=1)
        queue.put_nowait("b", lane=0)
        with pytest.raises(trio.WouldBlock):
            queue.put_nowait("c", lane=0)
        got = [await queue.get(), await queue.get()]
        async with trio.open_nursery() as nursery:

            async def worker() -> None:
                async with queue.worker():
                    got.append(await queue.get())

            nursery.start_soon(worker)
            await trio.testing.wait_all_tasks_blocked()
            queue.put_nowait("d", lane=1)  # handed over directly, never buffered
            assert len(queue) == 0
        return got

    assert trio.run(main) == ["b", "a", "d"]


def test_a_cancelled_waiting_worker_leaves_no_trace() -> None:
    async def main() -> int:
        queue = LaneQueue[str](capacity=1)
        with trio.move_on_after(0.01):
            await queue.get()
        queue.put_nowait("x", lane=0)  # nobody waits: buffered, not handed to the gone worker
        return len(queue)

    assert trio.run(main) == 1
