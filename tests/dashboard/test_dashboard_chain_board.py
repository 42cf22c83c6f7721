"""A chain node's dashboard leaderboard is the contract's (total reward, winner votes)."""

from __future__ import annotations

from typing import Any

import trio

from swarmp2p.chain.coordinator import Leaderboard, Standing
from swarmp2p.dashboard.chain_board import ChainLeaderboard
from swarmp2p.dashboard.names import peer_name
from swarmp2p.dashboard.status import normalize_status
from swarmp2p.dashboard.view import build_view


class FakeCoordinator:
    def __init__(self) -> None:
        self.reads = 0

    async def leaderboard(self) -> Leaderboard:
        self.reads += 1
        if self.reads == 2:
            raise RuntimeError("rpc timeout")  # the last table stays
        return Leaderboard(
            by_reward=(Standing("12D3KooWA", 2.5), Standing("12D3KooWB", 0.75)),
            by_wins=(Standing("12D3KooWB", 3.0), Standing("12D3KooWC", 1.0)),
        )


def test_the_chain_leaderboard_is_read_in_the_background_and_shown() -> None:
    board = ChainLeaderboard()
    coordinator = FakeCoordinator()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(board.watch, coordinator, 0.01)
            while coordinator.reads < 3:
                await trio.sleep(0.005)
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert board.failures == 1
    snapshot: dict[str, Any] = {"peer_id": "12D3KooWA", "peers": ["12D3KooWB"], "history": []}
    board.apply(snapshot)
    view = build_view(normalize_status(snapshot))
    rows = [(row["name"], row["reward"], row["note"]) for row in view["leaderboard"]]
    assert rows == [
        (peer_name("12D3KooWA"), 2.5, "0 wins"),
        (peer_name("12D3KooWB"), 0.75, "3 wins"),
        (peer_name("12D3KooWC"), None, "1 win"),
    ]
    assert "contract" in view["leaderboard_note"]


def test_nothing_is_applied_before_the_first_read() -> None:
    snapshot: dict[str, Any] = {}
    ChainLeaderboard().apply(snapshot)
    assert snapshot == {}
