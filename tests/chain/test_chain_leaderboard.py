"""The leaderboards of the current contract against the first version's, operation by operation.

Version 1 (`bench/fixtures/SwarmCoordinator_v1.vy`) kept each board as a storage array and
searched it linearly; the current contract packs a board into four words and sorts in
memory. The order is part of the interface (ties keep arrival order), so both contracts get
the same random submissions on one chain, starting from nearly full boards with many ties,
and must show identical boards and totals after every one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.artifact import Artifact, compile_source, load_artifact
from swarmp2p.chain.client import ContractClient
from swarmp2p.chain.embedded import EmbeddedChain
from tests.helpers.budget import examples

V1_SOURCE = Path(__file__).resolve().parents[2] / "bench/fixtures/SwarmCoordinator_v1.vy"
STAGES = 2
PEERS = [f"12D3KooW{i:044d}" for i in range(40)]  # more peers than board places (32)
PREFILLED = 30
ZERO = "0x" + "00" * 20


@attrs.define
class Pair:
    """The two contracts, each deployed by its own account (clients track nonces per account),
    which holds every role of that contract and registers all the peers on it."""

    chain: EmbeddedChain
    accounts: tuple[Any, Any]
    artifacts: tuple[Artifact, Artifact] = attrs.field(repr=False)  # hypothesis prints the repr
    addresses: tuple[str, str]
    snapshot: Any

    def clients(self) -> tuple[ContractClient, ContractClient]:
        return tuple(  # type: ignore[return-value]
            ContractClient(self.chain.w3, address, artifact.abi, account, retry=self.chain.retry)
            for artifact, address, account in zip(self.artifacts, self.addresses, self.accounts, strict=True)
        )


def both(clients: tuple[ContractClient, ...], function: str, *args: Any) -> None:
    for client in clients:
        # Explicit gas: v1 needs more than the client's limits (tuned for the current contract).
        client.transact(function, *args, gas=6_000_000)


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=60_000, stage_count=STAGES))
    accounts = (chain.account_for("leaderboard-v1"), chain.account_for("leaderboard-now"))
    artifacts = (compile_source(V1_SOURCE), load_artifact())
    addresses = tuple(
        ContractClient(chain.w3, ZERO, artifact.abi, account, retry=chain.retry).deploy(
            artifact.bytecode, STAGES, 60
        )
        for artifact, account in zip(artifacts, accounts, strict=True)
    )
    pair = Pair(chain, accounts, artifacts, addresses, None)  # type: ignore[arg-type]
    clients = pair.clients()
    for peer in PEERS:
        both(clients, "registerPeer", peer)
    # Nearly full boards with many ties, so that entering, evicting and tie order all happen.
    for i, peer in enumerate(PEERS[:PREFILLED]):
        both(clients, "submitReward", 0, 0, (i % 4) * 1000, peer)
    both(clients, "submitWinners", 0, PEERS[:PREFILLED], PEERS[0])
    both(clients, "submitWinners", 0, PEERS[5:15], PEERS[1])
    pair.snapshot = chain.take_snapshot()
    yield pair


rewards = st.tuples(st.just("reward"), st.integers(0, len(PEERS) - 1), st.sampled_from([0, 1000, 2000, 7000]))
votes = st.tuples(
    st.just("vote"),
    st.integers(0, len(PEERS) - 1),
    st.lists(st.integers(0, len(PEERS) - 1), min_size=1, max_size=32, unique=True),
)


@settings(
    max_examples=examples(0.03),  # each example replays rounds on two chains: 6 under ci
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking on a chain: minutes
)
@given(operations=st.lists(st.one_of(rewards, votes), min_size=4, max_size=10))
def test_boards_match_the_first_version(pair: Pair, operations: list[tuple[Any, ...]]) -> None:
    pair.chain.revert_to_snapshot(pair.snapshot)
    clients = pair.clients()
    position = [0, 0]  # round, stage
    rewarded = {(0, 0, i) for i in range(PREFILLED)}  # as in the fixture
    voted = {(0, 0), (0, 1)}

    def advance() -> None:
        both(clients, "updateStageAndRound")
        position[1] += 1
        if position[1] == STAGES:
            position[:] = [position[0] + 1, 0]

    for kind, peer, argument in operations:
        if kind == "reward":
            while (position[0], position[1], peer) in rewarded:
                advance()
            rewarded.add((position[0], position[1], peer))
            both(clients, "submitReward", position[0], position[1], argument, PEERS[peer])
        else:
            while (position[0], peer) in voted:
                advance()
            voted.add((position[0], peer))
            both(clients, "submitWinners", position[0], [PEERS[i] for i in argument], PEERS[peer])
        # The board this operation touched (a board view costs ~60 ms on py-evm).
        view = "rewardLeaderboard" if kind == "reward" else "winnerLeaderboard"
        old, new = (client.call(view) for client in clients)
        assert new == old, f"{view} differs after {kind} by peer {peer}"
    for view in ("rewardLeaderboard", "winnerLeaderboard"):
        old, new = (client.call(view) for client in clients)
        assert new == old, f"{view} differs at the end"
        assert len(new) <= 32


def test_prefilled_boards_are_what_the_comparison_needs(pair: Pair) -> None:
    """The starting point exercises ties and leaves room to fill and then evict."""
    pair.chain.revert_to_snapshot(pair.snapshot)
    _, new = pair.clients()
    rewards_board = new.call("rewardLeaderboard")
    assert len(rewards_board) == PREFILLED
    assert [score for _, score in rewards_board][:8] == [3000] * 7 + [2000]
    # Ties keep arrival order: the first of the 3000s to arrive is still first.
    assert rewards_board[0][0] == PEERS[3]
    wins_board = new.call("winnerLeaderboard")
    assert [peer for peer, _ in wins_board[:10]] == PEERS[5:15]
    assert new.call("totalReward", "not a peer") == 0
    assert new.call("totalWins", "not a peer") == 0
