"""A mesh peer that joins while the node's network is shutting down (its nursery closed, the
libp2p services still running their last tasks) is not asked for its neighbours; before, the
join raised "Nursery is closed to new arrivals" inside gossipsub's task and the network's exit
failed with an ExceptionGroup (seen in tests/net/test_net_adapter.py's flood test on CI)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import trio
from libp2p.peer.id import ID

from swarmp2p.net.counters import DropCounters
from swarmp2p.net.peer_exchange import PeerExchange
from swarmp2p.net.settings import NetworkSettings


class _Host:
    def set_stream_handler(self, protocol: Any, handler: Any) -> None:
        pass


def test_a_mesh_join_after_the_network_nursery_closed_is_not_asked_and_does_not_raise() -> None:
    async def main() -> PeerExchange:
        async with trio.open_nursery() as nursery:
            closed = nursery
        exchange = PeerExchange(
            peers=SimpleNamespace(),  # type: ignore[arg-type]
            requests=SimpleNamespace(host=_Host()),  # type: ignore[arg-type]
            router=None,
            settings=NetworkSettings(),
            counters=DropCounters(),
            nursery=closed,
        )
        joiner = ID(b"\x00\x24\x08\x01\x12\x20" + bytes(range(32)))
        exchange.on_mesh_join(joiner)
        # Not left as "being asked": a later join (after a restart of the exchange) may ask it.
        assert joiner.to_base58() not in exchange.asking_joiners
        return exchange

    trio.run(main)
