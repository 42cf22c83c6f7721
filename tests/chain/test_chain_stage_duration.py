"""The contract's stageDuration reaches the node: RoundInfo carries it (`stage_ms`), and a chain
node's round length is stageDuration x stageCount instead of its own --round-seconds guess
(which it keeps only when the contract publishes none or cannot be read)."""

from __future__ import annotations

import pytest
import trio

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.coordinator import ChainCoordinator
from swarmp2p.chain.embedded import EmbeddedChain
from swarmp2p.node_setup import _chain_round_ms
from swarmp2p.ports import CoordinatorError, RoundInfo


class FixedClock:
    def now_ms(self) -> int:
        return 0


def test_round_info_carries_the_contracts_stage_duration() -> None:
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=7_000, stage_count=2))
    # No embedded schedule handed over: the path of a real chain, which reads roundInfo alone.
    coordinator = ChainCoordinator(chain.client(chain.account_for("a")), clock=FixedClock())
    started_s = chain.manager.call("stageStartedAt")
    info = trio.run(coordinator.current)
    assert (info.stage_ms, info.stage_count) == (7_000, 2)
    assert info.stage_ends_ms == started_s * 1000 + 7_000
    chain.manager.transact("setStageDuration", 0)  # the operator withdraws the hint
    info = trio.run(coordinator.current)
    assert info.stage_ms == 0 and info.stage_ends_ms == started_s * 1000 + 30_000  # the default


def test_the_embedded_chain_reports_its_schedule() -> None:
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=4_000, stage_count=1))
    coordinator = ChainCoordinator(chain.client(chain.manager_account), clock=FixedClock(), embedded=chain)
    assert trio.run(coordinator.current).stage_ms == 4_000


class Said:
    def __init__(self, answer: RoundInfo | Exception) -> None:
        self.answer = answer

    async def current(self) -> RoundInfo:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "round_ms"),
    [
        (RoundInfo(3, 0, 2, 0, stage_ms=6_000), 12_000),  # 2 stages of 6 s
        (RoundInfo(3, 0, 1, 0, stage_ms=0), 30_000),  # none published: --round-seconds
        (CoordinatorError("connection refused"), 30_000),  # chain down at start: not fatal
    ],
)
def test_a_chain_nodes_round_length_comes_from_the_contract(answer: object, round_ms: int) -> None:
    assert trio.run(_chain_round_ms, Said(answer), 30.0) == round_ms  # type: ignore[arg-type]


def test_a_published_stage_length_lets_the_first_answer_skip_a_round_nearly_over() -> None:
    from protocol.rounds import CoordinatorSaid, RoundMachine, SkipRound

    # 2 s left of a 10 s stage, on the very first answer: learning needs two answers, so a
    # coordinator that publishes nothing gets the round opened (and its batch arrives late).
    guessing = RoundMachine()
    assert not any(isinstance(a, SkipRound) for a in guessing.handle(8_000, CoordinatorSaid(3, 0, 1, 10_000)))
    told = RoundMachine()
    assert told.handle(8_000, CoordinatorSaid(3, 0, 1, 10_000, stage_ms=10_000)) == (SkipRound(3, 0, 2_000),)
    assert told.stage_ms == 10_000
