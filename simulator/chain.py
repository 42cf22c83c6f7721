"""`coordinator = "chain"`: every simulated peer talks to the SwarmCoordinator contract on ONE
shared in-process chain (swarmp2p.chain.EmbeddedChain), through the real CoordinatorPort adapter
(swarmp2p.chain.ChainCoordinator), each peer with its own funded account.

Threads and virtual time: the real adapter runs every chain call in a worker thread
(`trio.to_thread.run_sync`). Under `MockClock(autojump_threshold=0)` virtual time jumps as soon
as every task is blocked, and a task waiting for a thread counts as blocked: the clock would
leap to the next deadline while py-evm is still working, at a point that depends on how fast the
thread runs. So here the calls run inline, on the simulator's one thread, through
`InlineChainCoordinator`, which changes only HOW a call is executed (`_run`), not what it does:
the same catch-up of the stage manager, the same client, the same error mapping. A chain call
then takes no virtual time, and a seed reproduces a run exactly (tested).

Block timestamps on the embedded chain are wall-clock; nothing here reads them (the adapter
derives stage ends from the schedule), so they cannot leak into a report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import trio

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.coordinator import ChainCoordinator, fixed_to_reward, vote_digest
from swarmp2p.chain.embedded import EmbeddedChain
from swarmp2p.chain.errors import ChainError
from swarmp2p.ports import Clock, CoordinatorError

T = TypeVar("T")


class InlineChainCoordinator(ChainCoordinator):
    """ChainCoordinator whose chain calls run inline instead of in a worker thread."""

    async def _run(self, operation: Callable[..., T], *args: Any) -> T:
        now_ms = self.clock.now_ms()
        try:
            result = self._in_worker(now_ms, operation, *args)
        except CoordinatorError:
            raise
        except Exception as error:  # same mapping as the threaded adapter
            raise ChainError(f"unexpected {type(error).__name__}: {error}") from error
        await trio.lowlevel.checkpoint()  # still a checkpoint, like the awaited thread call
        return result


class SimChain:
    """One embedded chain for a simulated swarm and a coordinator factory for its peers."""

    def __init__(self, genesis_ms: int, round_ms: int) -> None:
        # One stage per round, like the simulator's schedule coordinator.
        self.chain = EmbeddedChain(StageSchedule(genesis_ms, round_ms, 1))

    def coordinator(self, account_name: str, clock: Clock) -> InlineChainCoordinator:
        """A coordinator transacting from the account derived from `account_name`: the same
        name after a crash gives the same account, which still owns the peer id it registered."""
        account = self.chain.account_for(account_name)
        return InlineChainCoordinator(self.chain.client(account), clock=clock, embedded=self.chain)

    # ---- reads for reports and tests (synchronous; call outside or inside trio) ---------

    def stage_reward(self, round_number: int, stage: int, peer_id: str) -> float:
        return fixed_to_reward(self.chain.manager.call("stageReward", round_number, stage, peer_id))

    def has_vote(self, round_number: int, peer_id: str, winners: Sequence[str]) -> bool:
        stored = bytes(self.chain.manager.call("voteDigest", round_number, peer_id))
        return stored == vote_digest(list(winners))

    def total_reward(self, peer_id: str) -> float:
        return fixed_to_reward(self.chain.manager.call("totalReward", peer_id))

    def winner_counts(self) -> dict[str, int]:
        return {peer: int(count) for peer, count in self.chain.manager.call("winnerLeaderboard")}

    def position(self) -> tuple[int, int]:
        round_number, stage, *_ = self.chain.manager.call("roundInfo")
        return int(round_number), int(stage)
