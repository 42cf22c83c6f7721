"""`swarmp2p node --chain-rpc URL --contract ADDR --eth-key FILE`: two real node processes use a
SwarmCoordinator deployed on a real local JSON-RPC node (anvil, from tools/anvil/) as their
round clock, register their peer ids and submit rewards on it.

The test plays the stage manager: it advances the contract one round every few seconds, as an
operator's manager would. anvil is installed by `npm install --prefix tools/anvil`; when it is
missing the test FAILS with that command (it is part of the product's integration surface).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.helpers.chain_nodes import STAGE_SECONDS, StageManager
from tests.helpers.fast_config import write_fast_node_config
from tests.helpers.nodes import NodeProcess
from tests.helpers.waiting import wait_for


@pytest.mark.slow
def test_two_nodes_register_and_submit_rewards_on_the_contract(tmp_path: Path, anvil_rpc: str) -> None:
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
            address = Account.from_key(key).address
            chain.fund(address)
            addresses.append(address)
            chain_flags = ["--chain-rpc", anvil_rpc, "--contract", chain.address, "--eth-key", str(key_file)]
            nodes.append(NodeProcess(tmp_path / f"node{i}", config, Path("tiny"), chain_flags))
        try:
            nodes[0].start()
            boot = nodes[0].info()
            nodes[1].args += ["--bootstrap", boot["listen_addrs"][0]]
            nodes[1].start()
            infos = [boot, nodes[1].info()]
            ids = [info["peer_id"] for info in infos]
            # Both derive the swarm from the contract, not from each other.
            assert infos[0]["schedule"] == infos[1]["schedule"]
            assert infos[0]["schedule"]["swarm_id"] == f"chain-{chain.address.lower()[2:14]}"

            # Registered on-chain by the node's own Ethereum account.
            wait_for(
                lambda: all(chain.owner_of(p) == a for p, a in zip(ids, addresses, strict=True)),
                30,
                "registration",
            )

            # A completed round on each node, and its reward on the contract.
            def rewarded() -> bool:
                return all(
                    any(r["completed"] and chain.has_reward(r["round"], p) for r in node.rounds())
                    for node, p in zip(nodes, ids, strict=True)
                )

            wait_for(rewarded, 45, "rewards submitted on-chain by both nodes")
            for node, peer_id in zip(nodes, ids, strict=True):
                records = [r for r in node.rounds() if r["completed"]]
                assert all(r["round"] <= chain.current_round() for r in records)
                rewarded_rounds = [r for r in records if chain.has_reward(r["round"], peer_id)]
                assert rewarded_rounds, node.output()
                stage_reward = chain.contract.functions.stageReward(
                    rewarded_rounds[0]["round"], 0, peer_id
                ).call()
                assert stage_reward == round(rewarded_rounds[0]["reward"] * 10**6)
            for node in nodes:
                assert node.stop(signal.SIGTERM) == 0, node.output()
        except BaseException:
            for node in nodes:
                print(f"===== {node.data_dir.name}\n{node.output()}")
            raise
        finally:
            for node in nodes:
                node.stop(signal.SIGKILL, timeout_s=5)
