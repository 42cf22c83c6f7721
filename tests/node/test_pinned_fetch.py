"""Pinned fetch-queue rules (swarmp2p/fetch_queue.py): which configurations it accepts, that a
job put without a lane is an established sender's, that a waiting job goes to the worker that
has waited longest, and that a limited lane never has more jobs in the workers' hands than its
limit however often workers finish. Written against the survivors of scripts/mutation.sh on
that module.
"""

from __future__ import annotations

import re

import pytest
import trio
import trio.testing

from swarmp2p.fetch_queue import LaneQueue

CAPACITY_MESSAGE = "^" + re.escape("need capacity >= 1 and lanes >= 1") + "$"


@pytest.mark.parametrize(("capacity", "lanes"), [(0, 2), (1, 0), (0, 0)])
def test_a_queue_without_room_or_lanes_is_refused(capacity: int, lanes: int) -> None:
    with pytest.raises(ValueError, match=CAPACITY_MESSAGE):
        LaneQueue[str](capacity, lanes)


def test_one_lane_and_one_slot_are_a_valid_queue() -> None:
    async def main() -> str:
        queue = LaneQueue[str](capacity=1, lanes=1)
        queue.put_nowait("only")
        with pytest.raises(trio.WouldBlock):
            queue.put_nowait("more")
        return await queue.get()

    assert trio.run(main) == "only"


def test_lane_limits_name_existing_lanes_and_allow_at_least_one_job() -> None:
    LaneQueue[str](4, lanes=2, lane_limits={0: 1, 1: 1})  # lane 0 may be limited too
    message = "^" + re.escape("lane limits need lanes in 0..1 and limits >= 1: ")
    for limits in ({2: 1}, {-1: 1}, {1: 0}, {0: 0}):
        with pytest.raises(ValueError, match=message):
            LaneQueue[str](4, lanes=2, lane_limits=limits)


def test_a_job_put_without_a_lane_is_an_established_senders() -> None:
    async def main() -> list[str]:
        queue = LaneQueue[str](capacity=4)
        queue.put_nowait("unknown", lane=1)
        queue.put_nowait("default")
        return [await queue.get(), await queue.get()]

    assert trio.run(main) == ["default", "unknown"]


def test_a_job_goes_to_the_worker_that_has_waited_longest() -> None:
    async def main() -> list[tuple[str, str]]:
        queue = LaneQueue[str](capacity=4)
        got: list[tuple[str, str]] = []

        async def worker(name: str) -> None:
            got.append((name, await queue.get()))

        async with trio.open_nursery() as nursery:
            for name in ("first", "second", "third"):
                nursery.start_soon(worker, name)
                await trio.testing.wait_all_tasks_blocked()  # they start waiting in this order
            for job in ("j1", "j2", "j3"):
                queue.put_nowait(job)
        return got

    assert sorted(trio.run(main)) == [("first", "j1"), ("second", "j2"), ("third", "j3")]


def test_a_finished_limited_job_hands_its_slot_to_the_longest_waiting_worker() -> None:
    async def main() -> list[tuple[str, str]]:
        queue = LaneQueue[str](capacity=4, lane_limits={1: 1})
        got: list[tuple[str, str]] = []
        release = trio.Event()

        async def holder() -> None:
            await queue.get()
            await release.wait()
            queue.done()

        async def worker(name: str) -> None:
            got.append((name, await queue.get()))

        async with trio.open_nursery() as nursery:
            queue.put_nowait("held", lane=1)
            nursery.start_soon(holder)
            await trio.testing.wait_all_tasks_blocked()
            for name in ("first", "second"):
                nursery.start_soon(worker, name)
                await trio.testing.wait_all_tasks_blocked()
            queue.put_nowait("s", lane=1)  # lane 1 at its limit: buffered, both workers wait
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            release.set()  # the held job ends: its slot goes to "first"
            await trio.testing.wait_all_tasks_blocked()
            assert got == [("first", "s")]
            queue.put_nowait("h")
        return got

    assert trio.run(main) == [("first", "s"), ("second", "h")]


def test_a_limited_lane_never_exceeds_its_limit_as_workers_finish() -> None:
    """Three of lane 1's jobs in the workers' hands at most, with five workers and a stream of
    jobs: each `done()` frees exactly one slot."""

    async def main() -> tuple[int, int]:
        queue = LaneQueue[int](capacity=64, lane_limits={1: 3})
        in_hand = [0]
        most = [0]
        finished = [0]

        async def worker(hold_s: float) -> None:
            async with queue.worker():
                while True:
                    await queue.get()
                    in_hand[0] += 1
                    most[0] = max(most[0], in_hand[0])
                    try:
                        await trio.sleep(hold_s)
                    finally:
                        in_hand[0] -= 1
                        finished[0] += 1
                        queue.done()

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(worker, 1.0 + i / 10)
            await trio.testing.wait_all_tasks_blocked()
            for job in range(30):
                queue.put_nowait(job, lane=1)
            await trio.sleep(30)
            nursery.cancel_scope.cancel()
        return most[0], finished[0]

    most, finished = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert most == 3
    assert finished == 30  # and the limit never stalls the lane


def test_done_from_a_worker_that_holds_no_job_is_harmless() -> None:
    async def main() -> list[str]:
        queue = LaneQueue[str](capacity=4, lane_limits={1: 1})
        queue.done()  # this task was never given a job
        queue.put_nowait("a", lane=1)
        queue.put_nowait("b", lane=1)
        first = await queue.get()
        queue.done()
        queue.done()  # a second done for the same job frees nothing more
        return [first, await queue.get()]

    assert trio.run(main) == ["a", "b"]
