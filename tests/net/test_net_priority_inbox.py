"""The gossip inbox with two lanes (swarmp2p/net/priority_inbox.py)."""

from __future__ import annotations

import pytest
import trio

from swarmp2p.net.priority_inbox import DROPPED, EVICTED, QUEUED, PriorityInbox


def test_full_inbox_evicts_the_newest_unknown_message_for_an_established_one() -> None:
    inbox: PriorityInbox[str] = PriorityInbox(3)
    assert [inbox.put(x, False) for x in ("u1", "u2", "u3")] == [QUEUED] * 3
    assert inbox.put("u4", False) == DROPPED  # full: an unknown origin's message is dropped
    assert inbox.put("e1", True) == EVICTED  # an established one takes u3's place
    assert inbox.put("e2", True) == EVICTED
    assert inbox.put("e3", True) == EVICTED
    assert inbox.put("e4", True) == DROPPED  # all established now: nothing to evict
    assert [inbox.receive_nowait() for _ in range(3)] == ["e1", "e2", "e3"]
    with pytest.raises(trio.WouldBlock):
        inbox.receive_nowait()


def test_established_messages_are_received_first_and_close_ends_after_draining() -> None:
    inbox: PriorityInbox[str] = PriorityInbox(8)
    received: list[str] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                async for item in inbox:
                    received.append(item)

            nursery.start_soon(reader)
            await trio.sleep(0.01)  # the reader waits on an empty inbox
            inbox.put("u1", False)
            await trio.sleep(0.01)
            inbox.put("u2", False)
            inbox.put("e1", True)
            inbox.close()
            assert inbox.put("late", True) == DROPPED

    trio.run(main)
    assert received == ["u1", "e1", "u2"]
