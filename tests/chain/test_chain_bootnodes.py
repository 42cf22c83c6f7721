"""Peers on one contract find each other through its bootnode list: a chain node with no
--bootstrap dials the addresses `getBootnodes` returns, and a node whose account is the
contract's bootnode manager publishes its own listen addresses there (replacing its stale ones
from an earlier run). Unit tests run `sync_bootnodes` on the embedded chain; the slow test runs
two `swarmp2p node` processes on anvil with no --bootstrap at all, the test playing the stage
manager. It also checks the chain path of `swarmp2p node --chain-rpc URL --contract ADDR
--eth-key FILE`: both nodes take the swarm and its round clock from the contract, register their
peer ids from their own Ethereum accounts and submit each reward with the value they logged."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.bootnodes import sync_bootnodes
from swarmp2p.chain.embedded import EmbeddedChain
from tests.helpers.chain_nodes import STAGE_SECONDS, StageManager
from tests.helpers.fast_config import write_fast_node_config
from tests.helpers.nodes import NodeProcess
from tests.helpers.waiting import wait_for

ME = "12D3KooWMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMeMe"
OTHER = "/ip4/10.0.0.2/tcp/4001/p2p/12D3KooWOtherOtherOtherOtherOtherOtherOtherOther"


@pytest.fixture(scope="module")
def base() -> Iterator[tuple[EmbeddedChain, Any]]:
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=10_000, stage_count=1))
    chain.account_for("node")
    yield chain, chain.take_snapshot()


@pytest.fixture
def chain(base: tuple[EmbeddedChain, Any]) -> EmbeddedChain:
    embedded, snapshot = base
    embedded.revert_to_snapshot(snapshot)
    return embedded


def _listed(chain: EmbeddedChain) -> list[str]:
    return list(chain.manager.call("getBootnodes"))


def test_a_node_that_is_not_the_manager_only_reads(chain: EmbeddedChain) -> None:
    chain.manager.transact("addBootnodes", [OTHER])
    node = chain.client(chain.account_for("node"))
    result = sync_bootnodes(node, ME, [f"/ip4/127.0.0.1/tcp/5000/p2p/{ME}"])
    assert result.others == (OTHER,)
    assert not result.manager and result.published == () and result.removed == ()
    assert _listed(chain) == [OTHER]


def test_the_manager_publishes_its_addresses_once(chain: EmbeddedChain) -> None:
    chain.manager.transact("addBootnodes", [OTHER])
    own = [f"/ip4/127.0.0.1/tcp/5000/p2p/{ME}", f"/ip4/10.0.0.1/tcp/5000/p2p/{ME}"]
    first = sync_bootnodes(chain.manager, ME, own)
    assert first.manager and first.published == tuple(own) and first.others == (OTHER,)
    assert _listed(chain) == [OTHER, *own]
    again = sync_bootnodes(chain.manager, ME, own)  # a second start: nothing new to send
    assert again.published == () and again.removed == ()
    assert _listed(chain) == [OTHER, *own]


def test_the_manager_replaces_its_stale_addresses(chain: EmbeddedChain) -> None:
    old = [f"/ip4/127.0.0.1/tcp/5000/p2p/{ME}", f"/ip4/127.0.0.1/tcp/5001/p2p/{ME}"]
    chain.manager.transact("addBootnodes", [old[0], OTHER, old[1]])
    new = f"/ip4/127.0.0.1/tcp/6000/p2p/{ME}"
    result = sync_bootnodes(chain.manager, ME, [new])
    assert set(result.removed) == set(old) and result.published == (new,)
    assert sorted(_listed(chain)) == sorted([OTHER, new])


def test_the_manager_publishes_nothing_when_told_not_to(chain: EmbeddedChain) -> None:
    result = sync_bootnodes(chain.manager, ME, [f"/ip4/127.0.0.1/tcp/5000/p2p/{ME}"], publish=False)
    assert result.published == () and _listed(chain) == []


@pytest.mark.slow
def test_two_nodes_find_each_other_through_the_contract_alone(tmp_path: Path, anvil_rpc: str) -> None:
    from eth_account import Account

    from swarmp2p.chain.keys import write_key_file

    config = write_fast_node_config(tmp_path / "chain.toml")
    with StageManager(anvil_rpc, period_s=STAGE_SECONDS) as chain:
        nodes: list[NodeProcess] = []
        addresses = []
        for i in range(2):
            key = os.urandom(32)
            key_file = tmp_path / f"eth{i}.key"
            write_key_file(key_file, key)
            addresses.append(Account.from_key(key).address)
            chain.fund(addresses[-1])
            flags = ["--chain-rpc", anvil_rpc, "--contract", chain.address, "--eth-key", str(key_file)]
            nodes.append(NodeProcess(tmp_path / f"node{i}", config, Path("tiny"), flags))
        # The first node's account may publish bootnodes; the second's may not.
        tx = chain.contract.functions.setBootnodeManager(addresses[0]).transact({"from": chain.manager})
        chain.w3.eth.wait_for_transaction_receipt(tx)
        listed = chain.contract.functions.getBootnodes
        try:
            nodes[0].start()
            first = nodes[0].info()
            assert first["schedule"]["round_ms"] == STAGE_SECONDS * 1000  # the contract's stageDuration
            wait_for(lambda: set(listed().call()) == set(first["listen_addrs"]), 30, "node0 on the contract")
            nodes[1].start()
            second = nodes[1].info()
            assert set(listed().call()) == set(first["listen_addrs"]), "a non-manager published"
            ids = [first["peer_id"], second["peer_id"]]
            # Both derive the swarm from the contract, not from each other.
            assert first["schedule"] == second["schedule"]
            assert first["schedule"]["swarm_id"] == f"chain-{chain.address.lower()[2:14]}"
            # Registered on-chain by the node's own Ethereum account.
            wait_for(
                lambda: all(chain.owner_of(p) == a for p, a in zip(ids, addresses, strict=True)),
                30,
                "registration",
            )

            def exchanged(node: NodeProcess, other: str) -> bool:
                return any(r["peers"] >= 1 and other in r["accepted_peers"] for r in node.rounds())

            wait_for(
                lambda: exchanged(nodes[0], second["peer_id"]) and exchanged(nodes[1], first["peer_id"]),
                90,
                "both nodes to accept each other's rollouts",
            )
            assert "bootnode" in nodes[1].output()
            # Its join lines name the chain and a key of the joiner's own (they once named neither).
            assert f"--contract {chain.address}" in nodes[0].output()
            assert "swarmp2p chain new-key " in nodes[0].output()
            # A completed round's reward is on the contract with the value the node logged.
            for node, peer_id in zip(nodes, ids, strict=True):
                records = [r for r in node.rounds() if r["completed"]]
                assert all(r["round"] <= chain.current_round() for r in records)
                wait_for(
                    lambda node=node, peer_id=peer_id: any(
                        chain.has_reward(r["round"], peer_id) for r in node.rounds() if r["completed"]
                    ),
                    30,
                    f"a reward of {peer_id} on the contract",
                )
                rewarded = next(
                    r for r in node.rounds() if r["completed"] and chain.has_reward(r["round"], peer_id)
                )
                stored = chain.contract.functions.stageReward(rewarded["round"], 0, peer_id).call()
                assert stored == round(rewarded["reward"] * 10**6), (rewarded, stored)
            for node in nodes:
                assert node.stop(signal.SIGTERM) == 0, node.output()
        except BaseException:
            for node in nodes:
                print(f"===== {node.data_dir.name}\n{node.output()}")
            raise
        finally:
            for node in nodes:
                node.stop(signal.SIGKILL, timeout_s=5)
