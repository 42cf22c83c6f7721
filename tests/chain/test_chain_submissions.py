"""How the node's chain coordinator accounts for its submissions (embedded chain): retries are
idempotent, a submission that fails after its stage moved on is a counted skip, and a run of
failures is said once, in one line, and counted in the status, without raising to the round loop."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.coordinator import open_coordinator
from swarmp2p.chain.embedded import EmbeddedChain
from swarmp2p.chain.errors import ChainError, ChainRevert, ChainUnavailable

STAGE_MS = 10_000


class FakeClock:
    def __init__(self) -> None:
        self.ms = 0

    def now_ms(self) -> int:
        return self.ms


def _failing(client: Any, error: Exception) -> None:
    real = client.transact

    def transact(function: str, *args: Any, **kwargs: Any) -> Any:
        if function in ("submitReward", "submitWinners") and client.fail:
            raise error
        return real(function, *args, **kwargs)

    client.fail = True
    client.transact = transact


def test_failures_are_said_once_counted_and_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=STAGE_MS, stage_count=1))
    node = open_coordinator(embedded=chain, account_name="a", clock=clock, tolerant=True)
    _failing(node.client, ChainError("account 0xabc cannot pay for gas: balance 0 ETH; fund it"))
    caplog.set_level(logging.DEBUG, logger="swarmp2p.chain")

    async def main() -> None:
        await node.register("QmA")
        for round_ in range(6):
            clock.ms = round_ * STAGE_MS
            await node.submit_reward(round_, 0, 0.5, "QmA")  # no exception: counted
        node.client.fail = False
        clock.ms = 6 * STAGE_MS
        await node.submit_reward(6, 0, 0.5, "QmA")
        await node.submit_reward(6, 0, 0.5, "QmA")  # a retry of our own: already on chain

    trio.run(main)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert "3 submissions in a row failed" in errors[0].getMessage()
    assert "cannot pay for gas" in errors[0].getMessage()
    assert len(errors[0].getMessage().splitlines()) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["chain: submissions work again after 6 failures"]
    status = node.status()
    assert (status["failed"], status["failing_in_a_row"], status["submitted"]) == (6, 0, 1)
    assert status["already_on_chain"] == 1
    assert "cannot pay for gas" in status["last_error"]
    assert node.health.counters()["chain_failed"] == 6


def test_a_late_failure_is_a_counted_skip() -> None:
    clock = FakeClock()
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=STAGE_MS, stage_count=1))
    strict = open_coordinator(embedded=chain, account_name="a", clock=clock)
    _failing(strict.client, ChainUnavailable("submitReward: receipt failed after 5 attempts"))

    async def main() -> None:
        await strict.register("QmA")
        with pytest.raises(ChainUnavailable):  # the stage is still open: a real failure
            await strict.submit_reward(0, 0, 0.5, "QmA")
        clock.ms = STAGE_MS  # round 1 now: the same failure for round 0 is a skip
        await strict.submit_reward(0, 0, 0.5, "QmA")
        await strict.submit_winners(0, ["QmA"], "QmA")
        strict.client.fail = False
        with pytest.raises(ChainRevert, match="different value"):  # never a skip
            await strict.submit_reward(1, 0, 0.5, "QmA")
            await strict.submit_reward(1, 0, 0.7, "QmA")

    trio.run(main)
    assert strict.health.late_skipped == 2
    assert strict.health.failed == 1  # our own earlier, different reward is not a failure...
    assert strict.health.already_on_chain == 1  # ... but counted (and raised by a strict client)
