"""A CoordinatorPort wrapper that records the submissions the coordinator accepted, so a run
can check afterwards that the coordinator (schedule or contract) holds what the peers sent."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swarmp2p.ports import RoundInfo


class RecordingCoordinator:
    """Passes calls through to a CoordinatorPort and records what was accepted (for reports
    and for checking, after the run, that the coordinator holds what the peers sent)."""

    def __init__(self, inner: Any, log: dict[str, Any]) -> None:
        self.inner = inner
        self.log = log

    async def current(self) -> RoundInfo:
        return await self.inner.current()

    async def register(self, peer_id: str) -> None:
        await self.inner.register(peer_id)

    async def submit_reward(self, round: int, stage: int, reward: float, peer_id: str) -> None:
        await self.inner.submit_reward(round, stage, reward, peer_id)
        self.log["rewards"][(round, stage, peer_id)] = reward

    async def submit_winners(self, round: int, winners: Sequence[str], peer_id: str) -> None:
        await self.inner.submit_winners(round, winners, peer_id)
        self.log["winners"][(round, peer_id)] = tuple(winners)
