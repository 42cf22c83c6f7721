"""Every SwarmCoordinator function and every revert path, on the in-process chain.

One chain per module (deploying takes ~1 s); every test starts from the same snapshot with
fresh clients (clients track nonces, which a snapshot revert invalidates).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.client import GAS_LIMITS, ContractClient
from swarmp2p.chain.coordinator import vote_digest
from swarmp2p.chain.embedded import EmbeddedChain
from swarmp2p.chain.errors import ChainRevert

STAGES = 3
ZERO = "0x" + "00" * 20


@pytest.fixture(scope="module")
def base() -> Iterator[tuple[EmbeddedChain, dict[str, Any], Any]]:
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=60_000, stage_count=STAGES))
    accounts = {name: chain.account_for(name) for name in ("alice", "bob", "carol")}
    yield chain, accounts, chain.take_snapshot()


@attrs.define
class World:
    chain: EmbeddedChain
    owner: ContractClient
    alice: ContractClient
    bob: ContractClient
    carol: ContractClient

    def advance(self, stages: int) -> None:
        for _ in range(stages):
            self.owner.transact("updateStageAndRound")


@pytest.fixture
def w(base: tuple[EmbeddedChain, dict[str, Any], Any]) -> World:
    chain, accounts, snapshot = base
    chain.revert_to_snapshot(snapshot)
    return World(
        chain,
        chain.client(chain.manager_account),
        *(chain.client(accounts[n]) for n in ("alice", "bob", "carol")),
    )


def reverts(reason: str, client: ContractClient, function: str, *args: Any) -> None:
    with pytest.raises(ChainRevert) as caught:
        client.transact(function, *args)
    assert caught.value.reason == reason


def events(client: ContractClient, receipt: Any, name: str) -> list[dict[str, Any]]:
    return [dict(e["args"]) for e in client.contract.events[name]().process_receipt(receipt)]


# ---------------------------------------------------------------- deployment and roles


def test_deployment_state(w: World) -> None:
    o = w.owner
    me = w.chain.manager_account.address
    assert o.call("owner") == me
    assert o.call("stageManager") == me
    assert o.call("bootnodeManager") == me
    assert o.call("stageCount") == STAGES
    assert o.call("stageDuration") == 60
    assert (o.call("currentRound"), o.call("currentStage")) == (0, 0)
    assert o.call("REWARD_SCALE") == 10**6
    assert o.call("roundInfo")[:3] == [0, 0, STAGES]


@pytest.mark.parametrize("stage_count", [0, 17])
def test_constructor_rejects_bad_stage_count(w: World, stage_count: int) -> None:
    deployer = ContractClient(w.chain.w3, ZERO, w.chain.artifact.abi, w.alice.account)
    with pytest.raises(ChainRevert, match="invalid stage count"):
        deployer.deploy(w.chain.artifact.bytecode, stage_count, 10)


@pytest.mark.parametrize(
    ("function", "event", "getter"),
    [
        ("transferOwnership", "OwnershipTransferred", "owner"),
        ("setStageManager", "StageManagerChanged", "stageManager"),
        ("setBootnodeManager", "BootnodeManagerChanged", "bootnodeManager"),
    ],
)
def test_role_changes(w: World, function: str, event: str, getter: str) -> None:
    alice = w.alice.account.address
    reverts("only owner", w.alice, function, alice)
    reverts("zero address", w.owner, function, ZERO)
    receipt = w.owner.transact(function, alice)
    assert w.owner.call(getter) == alice
    [logged] = events(w.owner, receipt, event)
    assert list(logged.values())[1] == alice


def test_new_owner_takes_over_and_old_owner_loses_rights(w: World) -> None:
    w.owner.transact("transferOwnership", w.alice.account.address)
    reverts("only owner", w.owner, "setStageDuration", 5)
    w.alice.transact("setStageDuration", 5)
    assert w.owner.call("stageDuration") == 5


def test_set_stage_duration(w: World) -> None:
    reverts("only owner", w.bob, "setStageDuration", 7)
    receipt = w.owner.transact("setStageDuration", 7)
    assert w.owner.call("stageDuration") == 7
    assert events(w.owner, receipt, "StageDurationChanged") == [{"stageDuration": 7}]


# ---------------------------------------------------------------- round clock


def test_update_stage_and_round_wraps_rounds(w: World) -> None:
    reverts("only stage manager", w.alice, "updateStageAndRound")
    seen = []
    for _ in range(2 * STAGES + 1):
        receipt = w.owner.transact("updateStageAndRound")
        [logged] = events(w.owner, receipt, "StageAdvanced")
        block = w.chain.w3.eth.get_block(receipt["blockNumber"])
        assert logged["startedAt"] == block["timestamp"] == w.owner.call("stageStartedAt")
        seen.append((logged["round"], logged["stage"]))
    assert seen == [(0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    assert (w.owner.call("currentRound"), w.owner.call("currentStage")) == (2, 1)


def test_new_stage_manager_advances(w: World) -> None:
    w.owner.transact("setStageManager", w.bob.account.address)
    reverts("only stage manager", w.owner, "updateStageAndRound")
    w.bob.transact("updateStageAndRound")
    assert w.bob.call("currentStage") == 1


# ---------------------------------------------------------------- peers


def test_register_peer(w: World) -> None:
    receipt = w.alice.transact("registerPeer", "QmAlice1")
    assert events(w.alice, receipt, "PeerRegistered") == [
        {"owner": w.alice.account.address, "peerId": "QmAlice1"}
    ]
    w.alice.transact("registerPeer", "QmAlice2")  # one address may own several peer ids
    w.bob.transact("registerPeer", "QmBob")
    assert w.alice.call("peerOwner", "QmAlice2") == w.alice.account.address
    assert w.alice.call("peerOwner", "QmNobody") == ZERO
    assert w.alice.call("ownedPeerCount", w.alice.account.address) == 2
    assert w.alice.call("peerCount") == 3
    assert [w.alice.call("peerAt", i) for i in range(3)] == ["QmAlice1", "QmAlice2", "QmBob"]
    assert w.alice.call("areRegistered", ["QmBob", "QmNobody", "QmAlice1"]) == [True, False, True]
    with pytest.raises(ChainRevert, match="index out of range"):
        w.alice.call("peerAt", 3)


def test_register_peer_reverts(w: World) -> None:
    w.alice.transact("registerPeer", "QmAlice")
    reverts("peer id already registered", w.alice, "registerPeer", "QmAlice")
    reverts("peer id owned by another address", w.bob, "registerPeer", "QmAlice")
    reverts("empty peer id", w.bob, "registerPeer", "")
    # Longer than String[128]: the ABI decoder rejects it before any of our checks.
    reverts("execution reverted (no reason)", w.bob, "registerPeer", "Q" * 129)
    w.bob.transact("registerPeer", "Q" * 128)


# ---------------------------------------------------------------- rewards


def test_submit_reward_and_totals(w: World) -> None:
    w.alice.transact("registerPeer", "A")
    w.bob.transact("registerPeer", "B")
    receipt = w.alice.transact("submitReward", 0, 0, 250_000, "A")
    assert events(w.alice, receipt, "RewardSubmitted") == [
        {"sender": w.alice.account.address, "round": 0, "stage": 0, "reward": 250_000, "peerId": "A"}
    ]
    w.advance(2)
    w.alice.transact("submitReward", 0, 2, 1_000_000, "A")
    w.bob.transact("submitReward", 0, 2, 0, "B")
    w.advance(1)
    w.alice.transact("submitReward", 1, 0, 500_000, "A")
    w.alice.transact("submitReward", 0, 1, 1, "A")  # a past stage of a past round is fine
    a = w.alice
    assert a.call("stageReward", 0, 2, "A") == 1_000_000
    assert a.call("roundReward", 0, "A") == 1_250_001
    assert a.call("roundReward", 1, "A") == 500_000
    assert a.call("totalReward", "A") == 1_750_001
    assert a.call("totalReward", "B") == 0
    assert a.call("hasSubmittedReward", 0, 2, "B") is True
    assert a.call("hasSubmittedReward", 1, 0, "B") is False
    assert a.call("submissionCount", 0, 2) == 2
    assert a.call("rewardLeaderboard") == [("A", 1_750_001), ("B", 0)]


def test_submit_reward_reverts(w: World) -> None:
    w.alice.transact("registerPeer", "A")
    reverts("round in the future", w.alice, "submitReward", 1, 0, 1, "A")
    reverts("invalid stage", w.alice, "submitReward", 0, STAGES, 1, "A")
    reverts("stage in the future", w.alice, "submitReward", 0, 1, 1, "A")
    reverts("reward out of range", w.alice, "submitReward", 0, 0, 10**6 + 1, "A")
    reverts("peer id not registered", w.alice, "submitReward", 0, 0, 1, "Nobody")
    reverts("sender does not own peer id", w.bob, "submitReward", 0, 0, 1, "A")
    w.alice.transact("submitReward", 0, 0, 1, "A")
    reverts("reward already submitted", w.alice, "submitReward", 0, 0, 2, "A")
    assert w.alice.call("totalReward", "A") == 1


# ---------------------------------------------------------------- winners


def test_submit_winners_and_views(w: World) -> None:
    for client, peer in ((w.alice, "A"), (w.bob, "B"), (w.carol, "C")):
        client.transact("registerPeer", peer)
    receipt = w.alice.transact("submitWinners", 0, ["B", "C"], "A")
    assert events(w.alice, receipt, "WinnersSubmitted") == [
        {"sender": w.alice.account.address, "round": 0, "winnerCount": 2, "peerId": "A"}
    ]
    w.bob.transact("submitWinners", 0, ["C"], "B")
    w.advance(STAGES)
    w.bob.transact("submitWinners", 1, ["C", "A"], "B")
    c = w.carol
    assert c.call("roundVotes", 0, "C") == 2
    assert c.call("roundVotes", 0, "A") == 0
    assert c.call("totalWins", "C") == 3
    assert c.call("votesCast", "B") == 2
    assert c.call("voterCount", 0) == 2
    assert c.call("hasSubmittedWinners", 0, "A") is True
    assert c.call("hasSubmittedWinners", 1, "A") is False
    assert bytes(c.call("voteDigest", 0, "A")) == vote_digest(["B", "C"])
    assert bytes(c.call("voteDigest", 0, "A")) != vote_digest(["C", "B"])
    assert c.call("winnerLeaderboard") == [("C", 3), ("B", 1), ("A", 1)]


def test_submit_winners_reverts(w: World) -> None:
    w.alice.transact("registerPeer", "A")
    w.bob.transact("registerPeer", "B")
    reverts("round in the future", w.alice, "submitWinners", 1, ["B"], "A")
    reverts("no winners", w.alice, "submitWinners", 0, [], "A")
    reverts("peer id not registered", w.alice, "submitWinners", 0, ["B"], "Nobody")
    reverts("sender does not own peer id", w.bob, "submitWinners", 0, ["B"], "A")
    reverts("duplicate winner", w.alice, "submitWinners", 0, ["B", "A", "B"], "A")
    reverts("winner not registered", w.alice, "submitWinners", 0, ["B", "Nobody"], "A")
    # More than MAX_WINNERS: rejected by the ABI decoder's bound check.
    reverts("execution reverted (no reason)", w.alice, "submitWinners", 0, ["B"] * 33, "A")
    w.alice.transact("submitWinners", 0, ["B"], "A")
    reverts("winners already submitted", w.alice, "submitWinners", 0, ["A"], "A")
    assert w.alice.call("totalWins", "A") == 0


# ---------------------------------------------------------------- leaderboards


def test_leaderboard_keeps_top_32_sorted(w: World) -> None:
    peers = [f"P{i:02d}" for i in range(34)]
    for peer in peers:
        w.alice.transact("registerPeer", peer)
    for i, peer in enumerate(peers[:33]):
        w.alice.transact("submitReward", 0, 0, (i % 7) * 1000, peer)  # ties on purpose
    board = w.alice.call("rewardLeaderboard")
    assert len(board) == 32
    scores = [score for _, score in board]
    assert scores == sorted(scores, reverse=True)
    assert all(score == w.alice.call("totalReward", peer) for peer, score in board)
    left_out = set(peers[:33]) - {peer for peer, _ in board}
    assert all(w.alice.call("totalReward", peer) <= scores[-1] for peer in left_out)
    # A late peer beating everyone climbs from outside to the top.
    w.alice.transact("submitReward", 0, 0, 10**6, peers[33])
    board = w.alice.call("rewardLeaderboard")
    assert board[0] == (peers[33], 10**6)
    assert len(board) == 32


def test_gas_limits_cover_worst_case(w: World) -> None:
    """The explicit gas limits must cover the worst inputs with >= 20% headroom."""
    used: dict[str, int] = {}

    def measure(function: str, *args: Any) -> None:
        receipt = w.alice.transact(function, *args)
        used[function] = max(used.get(function, 0), receipt["gasUsed"])

    ids = [f"{i:03d}" + "x" * 125 for i in range(64)]
    for peer in ids:
        measure("registerPeer", peer)
    for i, peer in enumerate(ids[:32]):
        measure("submitReward", 0, 0, i + 1, peer)
    measure("submitReward", 0, 0, 10**6, ids[40])  # enters a full board and climbs to the top
    measure("submitWinners", 0, ids[:32], ids[0])  # 32 first-time winners
    measure("submitWinners", 0, ids[32:], ids[1])
    measure("submitWinners", 0, ids[32:], ids[2])  # 32 winners climbing a full board
    w.owner.transact("setBootnodeManager", w.alice.account.address)
    measure("addBootnodes", ["/ip4/" + "1" * 251] * 16)
    measure("removeBootnode", 0)
    deployer = ContractClient(w.chain.w3, ZERO, w.chain.artifact.abi, w.alice.account)
    address = deployer.deploy(w.chain.artifact.bytecode, 16, 10**9)
    [deployment] = w.chain.w3.eth.get_block("latest")["transactions"]
    receipt = w.chain.w3.eth.get_transaction_receipt(deployment)
    assert receipt["contractAddress"] == address
    used["constructor"] = receipt["gasUsed"]
    for function, gas in used.items():
        assert gas * 1.2 <= GAS_LIMITS[function], (function, gas, GAS_LIMITS[function])


# ---------------------------------------------------------------- bootnodes


def test_bootnodes(w: World) -> None:
    o = w.owner
    receipt = o.transact("addBootnodes", ["/ip4/1.1.1.1/tcp/1", "/ip4/2.2.2.2/tcp/2", "/ip4/3.3.3.3/tcp/3"])
    assert events(o, receipt, "BootnodesAdded") == [{"manager": o.account.address, "count": 3}]
    assert o.call("getBootnodesCount") == 3
    receipt = o.transact("removeBootnode", 0)  # the last one takes its place
    assert events(o, receipt, "BootnodeRemoved") == [{"manager": o.account.address, "index": 0}]
    assert o.call("getBootnodes") == ["/ip4/3.3.3.3/tcp/3", "/ip4/2.2.2.2/tcp/2"]
    o.transact("removeBootnode", 1)
    assert o.call("getBootnodes") == ["/ip4/3.3.3.3/tcp/3"]
    receipt = o.transact("clearBootnodes")
    assert events(o, receipt, "BootnodesCleared") == [{"manager": o.account.address}]
    assert o.call("getBootnodes") == []


def test_bootnode_reverts(w: World) -> None:
    o = w.owner
    reverts("only bootnode manager", w.alice, "addBootnodes", ["/ip4/1.1.1.1"])
    reverts("only bootnode manager", w.alice, "removeBootnode", 0)
    reverts("only bootnode manager", w.alice, "clearBootnodes")
    reverts("no bootnodes", o, "addBootnodes", [])
    reverts("empty bootnode", o, "addBootnodes", ["/ip4/1.1.1.1", ""])
    reverts("index out of range", o, "removeBootnode", 0)
    for batch in range(4):
        o.transact("addBootnodes", [f"/ip4/10.0.{batch}.{i}" for i in range(16)])
    reverts("too many bootnodes", o, "addBootnodes", ["/ip4/9.9.9.9"])
    assert o.call("getBootnodesCount") == 64
    w.owner.transact("setBootnodeManager", w.alice.account.address)
    w.alice.transact("clearBootnodes")
    reverts("only bootnode manager", o, "clearBootnodes")
