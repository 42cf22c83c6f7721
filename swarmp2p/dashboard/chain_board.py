"""The swarm leaderboard of a node on a chain: the contract's own tables (total verified reward
and winner votes per peer), read every round in the background, since the dashboard's status is
a plain function and a chain read is a network call."""

from __future__ import annotations

import logging
from typing import Any

import trio

log = logging.getLogger("swarmp2p.dashboard")

NOTE = (
    "from the SwarmCoordinator contract: reward = total reward submitted on chain, "
    "note = times chosen as a round's winner"
)


def leaderboard_rows(board: Any) -> list[dict[str, Any]]:
    """A swarmp2p.chain.coordinator.Leaderboard as the dashboard's leaderboard rows."""
    wins = {standing.peer_id: standing.score for standing in board.by_wins}
    rows = [
        {
            "peer_id": standing.peer_id,
            "reward": standing.score,
            "note": _wins(wins.get(standing.peer_id, 0)),
        }
        for standing in board.by_reward
    ]
    for peer_id in sorted(set(wins) - {row["peer_id"] for row in rows}):
        rows.append({"peer_id": peer_id, "reward": None, "note": _wins(wins[peer_id])})
    return rows


def _wins(count: float) -> str:
    return "1 win" if int(count) == 1 else f"{int(count)} wins"


class ChainLeaderboard:
    """The latest on-chain leaderboard; `apply` puts it into a status snapshot once read."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] | None = None
        self.failures = 0

    async def watch(self, coordinator: Any, interval_s: float) -> None:
        while True:
            try:
                self.rows = leaderboard_rows(await coordinator.leaderboard())
            except Exception as error:  # a chain hiccup: keep the last table, try again next time
                self.failures += 1
                log.debug("reading the chain leaderboard failed: %s", error)
            await trio.sleep(interval_s)

    def apply(self, snapshot: dict[str, Any]) -> None:
        if self.rows is not None:
            snapshot["leaderboard"] = [dict(row) for row in self.rows]
            snapshot["leaderboard_note"] = NOTE
