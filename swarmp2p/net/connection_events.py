"""Wake connection upkeep when a connection opens or closes, instead of at its next tick.

Upkeep (`LibP2PNetwork._upkeep_loop`) ticks every 0.5 s while connections change and backs off
to 4 s while they do not, so on a settled node a new connection reached the peer book, the DHT
table and the node's mesh peers (who learn whom it is connected to, net/neighbours.py) up to
4 s late. In a swarm that had just formed, the first round came 2 s after the last connection,
before some nodes had told their mesh peers, and was paid for in duplicate relays
(docs/benchmarks.md, "Peer exchange tells as well as asks").

py-libp2p runs every notifee method in a task of its own for every event, streams included;
this one does nothing for streams and listeners, so it costs one short task per stream opened
or closed (fetches, peer exchange, DHT queries), not per gossip message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from libp2p.abc import INotifee


class WakeOnConnectionChange(INotifee):
    """Calls `wake()` when a connection opens or closes."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake

    async def connected(self, network: Any, conn: Any) -> None:
        self._wake()

    async def disconnected(self, network: Any, conn: Any) -> None:
        self._wake()

    async def opened_stream(self, network: Any, stream: Any) -> None:
        pass

    async def closed_stream(self, network: Any, stream: Any) -> None:
        pass

    async def listen(self, network: Any, multiaddr: Any) -> None:
        pass

    async def listen_close(self, network: Any, multiaddr: Any) -> None:
        pass
