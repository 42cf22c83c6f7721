"""The SwarmCoordinator against a Python model of its rules (hypothesis stateful testing).

Every rule sends a real transaction on the in-process chain and checks that it succeeds
exactly when the model says so, and otherwise reverts with the reason the model predicts
(so the ORDER of the contract's checks is part of the specification). At the end of every
example, all views are compared with the model.
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.client import ContractClient
from swarmp2p.chain.embedded import EmbeddedChain
from swarmp2p.chain.errors import ChainRevert
from tests.helpers.budget import examples

STAGES = 2
SCALE = 10**6
ACTORS = ("manager", "alice", "bob")
PEERS = ("A1", "A2", "B1", "C1", "")  # small pool: collisions and foreign ids happen often
_CHAIN: dict[str, Any] = {}


def shared_chain() -> tuple[EmbeddedChain, dict[str, Any], Any]:
    """One chain for the whole module; every example starts from the same snapshot."""
    if not _CHAIN:
        chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=1000, stage_count=STAGES))
        accounts = {"manager": chain.manager_account}
        accounts.update({name: chain.account_for(name) for name in ACTORS[1:]})
        _CHAIN.update(chain=chain, accounts=accounts, snapshot=chain.take_snapshot())
    return _CHAIN["chain"], _CHAIN["accounts"], _CHAIN["snapshot"]


@attrs.define
class Model:
    round: int = 0
    stage: int = 0
    owner_of: dict[str, str] = attrs.Factory(dict)  # peer id -> actor
    rewarded: set[tuple[int, int, str]] = attrs.Factory(set)
    total_reward: dict[str, int] = attrs.Factory(dict)
    voted: set[tuple[int, str]] = attrs.Factory(set)
    total_wins: dict[str, int] = attrs.Factory(dict)
    bootnodes: list[str] = attrs.Factory(list)
    # The leaderboards' exact order, by the contract's documented rule (see `promote`).
    reward_board: list[str] = attrs.Factory(list)
    wins_board: list[str] = attrs.Factory(list)

    @staticmethod
    def promote(board: list[str], totals: dict[str, int], peer: str) -> None:
        """A peer whose total rose: if off the board, it is appended (room left) or replaces
        the last entry when it strictly beats it; then it moves up past strictly lower totals,
        so equal totals keep arrival order."""
        if peer not in board:
            if len(board) < 32:
                board.append(peer)
            elif totals[peer] > totals[board[-1]]:
                board[-1] = peer
            else:
                return
        i = board.index(peer)
        while i > 0 and totals[board[i - 1]] < totals[peer]:
            board[i - 1], board[i] = board[i], board[i - 1]
            i -= 1

    def register(self, actor: str, peer: str) -> str | None:
        if not peer:
            return "empty peer id"
        if self.owner_of.get(peer) == actor:
            return "peer id already registered"
        if peer in self.owner_of:
            return "peer id owned by another address"
        self.owner_of[peer] = actor
        return None

    def advance(self, actor: str) -> str | None:
        if actor != "manager":
            return "only stage manager"
        self.stage += 1
        if self.stage == STAGES:
            self.round, self.stage = self.round + 1, 0
        return None

    def _owned(self, actor: str, peer: str) -> str | None:
        if peer not in self.owner_of:
            return "peer id not registered"
        if self.owner_of[peer] != actor:
            return "sender does not own peer id"
        return None

    def submit_reward(self, actor: str, round: int, stage: int, reward: int, peer: str) -> str | None:
        if round > self.round:
            return "round in the future"
        if stage >= STAGES:
            return "invalid stage"
        if round == self.round and stage > self.stage:
            return "stage in the future"
        if reward > SCALE:
            return "reward out of range"
        if error := self._owned(actor, peer):
            return error
        if (round, stage, peer) in self.rewarded:
            return "reward already submitted"
        self.rewarded.add((round, stage, peer))
        self.total_reward[peer] = self.total_reward.get(peer, 0) + reward
        self.promote(self.reward_board, self.total_reward, peer)
        return None

    def submit_winners(self, actor: str, round: int, winners: list[str], peer: str) -> str | None:
        if round > self.round:
            return "round in the future"
        if not winners:
            return "no winners"
        if error := self._owned(actor, peer):
            return error
        if (round, peer) in self.voted:
            return "winners already submitted"
        for i, winner in enumerate(winners):
            if winner in winners[:i]:
                return "duplicate winner"
            if winner not in self.owner_of:
                return "winner not registered"
        self.voted.add((round, peer))
        for winner in winners:
            self.total_wins[winner] = self.total_wins.get(winner, 0) + 1
            self.promote(self.wins_board, self.total_wins, winner)
        return None

    def add_bootnodes(self, actor: str, addresses: list[str]) -> str | None:
        if actor != "manager":
            return "only bootnode manager"
        if not addresses:
            return "no bootnodes"
        if len(self.bootnodes) + len(addresses) > 64:
            return "too many bootnodes"
        if "" in addresses:
            return "empty bootnode"
        self.bootnodes.extend(addresses)
        return None

    def remove_bootnode(self, actor: str, index: int) -> str | None:
        if actor != "manager":
            return "only bootnode manager"
        if index >= len(self.bootnodes):
            return "index out of range"
        self.bootnodes[index] = self.bootnodes[-1]
        self.bootnodes.pop()
        return None


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        chain, accounts, snapshot = shared_chain()
        chain.revert_to_snapshot(snapshot)
        self.clients: dict[str, ContractClient] = {a: chain.client(accounts[a]) for a in ACTORS}
        self.model = Model()

    def _peer(self, actor: str, pick: int) -> str:
        """Any pool id for small picks; for larger ones, one the actor owns (when it owns
        any), so that valid submissions, and the checks behind ownership, are reached often."""
        if pick < len(PEERS):
            return PEERS[pick]
        owned = sorted(p for p, owner in self.model.owner_of.items() if owner == actor)
        return owned[pick % len(owned)] if owned else PEERS[pick % len(PEERS)]

    def _check(self, expected: str | None, actor: str, function: str, *args: Any) -> None:
        try:
            self.clients[actor].transact(function, *args)
        except ChainRevert as error:
            assert error.reason == expected, (
                f"{function}{args} by {actor}: chain {error.reason!r}, model {expected!r}"
            )
        else:
            assert expected is None, f"{function}{args} by {actor} succeeded; model expected {expected!r}"

    @initialize()
    def register_some(self) -> None:
        # Most checks sit behind ownership: start every example with three owned peer ids.
        for actor, peer in (("alice", "A1"), ("bob", "B1"), ("manager", "C1")):
            self._check(self.model.register(actor, peer), actor, "registerPeer", peer)

    @rule(actor=st.sampled_from(ACTORS), peer=st.sampled_from(PEERS))
    def register(self, actor: str, peer: str) -> None:
        self._check(self.model.register(actor, peer), actor, "registerPeer", peer)

    @rule(actor=st.sampled_from(ACTORS))
    def advance(self, actor: str) -> None:
        self._check(self.model.advance(actor), actor, "updateStageAndRound")

    @rule(
        actor=st.sampled_from(ACTORS),
        round_offset=st.sampled_from([0, 0, -1, -2, 1]),
        stage=st.sampled_from([-1, 0, 1, STAGES]),  # -1: the current stage
        reward=st.sampled_from([0, 1, SCALE // 3, SCALE, SCALE + 1]),
        pick=st.integers(0, 2 * len(PEERS)),
    )
    def submit_reward(self, actor: str, round_offset: int, stage: int, reward: int, pick: int) -> None:
        peer = self._peer(actor, pick)
        round_ = max(self.model.round + round_offset, 0)
        stage = self.model.stage if stage < 0 else stage
        expected = self.model.submit_reward(actor, round_, stage, reward, peer)
        self._check(expected, actor, "submitReward", round_, stage, reward, peer)

    @rule(
        actor=st.sampled_from(ACTORS),
        round_offset=st.sampled_from([0, 0, -1, 1]),
        empty=st.sampled_from([False] * 7 + [True]),  # an empty vote now and then, not half the time
        winners=st.lists(st.sampled_from(("A1", "B1", "C1", "A2", "Z9")), min_size=1, max_size=4),
        pick=st.integers(0, 2 * len(PEERS)),
    )
    def submit_winners(
        self, actor: str, round_offset: int, empty: bool, winners: list[str], pick: int
    ) -> None:
        peer = self._peer(actor, pick)
        winners = [] if empty else winners
        round_ = max(self.model.round + round_offset, 0)
        expected = self.model.submit_winners(actor, round_, winners, peer)
        self._check(expected, actor, "submitWinners", round_, winners, peer)

    @rule(
        actor=st.sampled_from(("manager", "alice")),
        remove=st.booleans(),
        index=st.integers(0, 3),
        addresses=st.lists(st.sampled_from(["/ip4/1.2.3.4/tcp/1", "/dns/boot/tcp/2", ""]), max_size=3),
        count=st.sampled_from([1, 1, 1, 25]),  # sometimes many at once, to reach the cap of 64
    )
    def bootnodes(self, actor: str, remove: bool, index: int, addresses: list[str], count: int) -> None:
        # One rule for both operations, so bootnodes do not take half of every example.
        if remove:
            self._check(self.model.remove_bootnode(actor, index), actor, "removeBootnode", index)
        else:
            batch = (addresses * count)[:16]
            self._check(self.model.add_bootnodes(actor, batch), actor, "addBootnodes", batch)

    def teardown(self) -> None:
        view = self.clients["alice"].call
        m = self.model
        assert view("roundInfo")[:2] == [m.round, m.stage]
        assert view("peerCount") == len(m.owner_of)
        assert {view("peerAt", i) for i in range(len(m.owner_of))} == set(m.owner_of)
        for peer in PEERS[:4]:
            assert view("totalReward", peer) == m.total_reward.get(peer, 0)
            assert view("totalWins", peer) == m.total_wins.get(peer, 0)
        for board, totals, expected in (
            (view("rewardLeaderboard"), m.total_reward, m.reward_board),
            (view("winnerLeaderboard"), m.total_wins, m.wins_board),
        ):
            # Fewer peers than board places: every scored peer is on it, sorted, with its total,
            # in exactly the model's order (ties: arrival order).
            assert {peer for peer, _ in board} == set(totals)
            assert [score for _, score in board] == sorted((score for _, score in board), reverse=True)
            assert board == [(peer, totals[peer]) for peer in expected]
        assert view("getBootnodes") == m.bootnodes


TestCoordinatorMachine = CoordinatorMachine.TestCase
TestCoordinatorMachine.settings = settings(
    max_examples=examples(0.15),  # every step is a transaction: 30 runs under ci
    stateful_step_count=20,
    suppress_health_check=[HealthCheck.too_slow],
    # No shrinking: on a real chain it can take minutes, and the failure message already names
    # the call, its arguments and both the chain's and the model's verdicts.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
