"""A bounded inbox for gossip with two lanes: messages of established peers and the rest.

Gossip waits in two queues on its way to the node (py-libp2p's per-topic subscription queue,
then the adapter's per-receiver queue), and both dropped whatever arrived when full. A flood of
throwaway keys filled them and honest announcements were dropped with the junk (at
about 8,000 messages an honest announcement was lost). Here, when the inbox is full, a message
of an established peer takes the place of the newest queued message of an unknown one (that
one is dropped, counted), and the receiver takes established peers' messages first. Only when
the whole inbox is established peers' messages is an arriving one dropped regardless.

It stands in for both trio memory channels: the receive side has what the node's readers use
(`async for`, `receive`, `receive_nowait`) and what py-libp2p's subscription object offers
(`get`, `unsubscribe`); `close` ends it for the receiver once drained.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import trio

T = TypeVar("T")

QUEUED, EVICTED, DROPPED = "queued", "evicted", "dropped"
"""What `put` did: queued; queued in place of an unknown peer's message; not queued."""


class PriorityInbox(Generic[T]):
    def __init__(self, capacity: int, *, unsubscribe: Callable[[], Awaitable[None]] | None = None) -> None:
        if capacity < 1:
            raise ValueError("need capacity >= 1")
        self.capacity = capacity
        self._established: deque[T] = deque()
        self._unknown: deque[T] = deque()
        self._waiting = trio.lowlevel.ParkingLot()
        self._closed = False
        self._unsubscribe = unsubscribe

    def __len__(self) -> int:
        return len(self._established) + len(self._unknown)

    # ---- send side ----------------------------------------------------------------------

    def put(self, item: T, established: bool) -> str:
        """Queue `item` (never blocks): QUEUED, EVICTED (an unknown peer's newest message made
        room for an established peer's) or DROPPED (full, or closed)."""
        if self._closed:
            return DROPPED
        outcome = QUEUED
        if len(self) >= self.capacity:
            if not established or not self._unknown:
                return DROPPED
            self._unknown.pop()  # the newest: the flood's latest, not an early honest straggler
            outcome = EVICTED
        (self._established if established else self._unknown).append(item)
        self._waiting.unpark()
        return outcome

    def close(self) -> None:
        """No more items: the receiver drains what is queued, then sees the end."""
        self._closed = True
        self._waiting.unpark_all()

    async def aclose(self) -> None:
        """As a trio send channel's (py-libp2p closes a topic's send side on unsubscribe)."""
        self.close()
        await trio.lowlevel.checkpoint()

    # ---- receive side -------------------------------------------------------------------

    def receive_nowait(self) -> T:
        if self._established:
            return self._established.popleft()
        if self._unknown:
            return self._unknown.popleft()
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            try:
                item = self.receive_nowait()
            except trio.WouldBlock:
                await self._waiting.park()
                continue
            await trio.lowlevel.cancel_shielded_checkpoint()
            return item

    get = receive  # py-libp2p's ISubscriptionAPI

    async def unsubscribe(self) -> None:
        if self._unsubscribe is not None:
            await self._unsubscribe()

    def __aiter__(self) -> PriorityInbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
