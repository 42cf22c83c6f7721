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
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.nodes import NodeProcess
from tests.helpers.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
ANVIL = ROOT / "tools" / "anvil" / "node_modules" / ".bin" / "anvil"
STAGE_SECONDS = 6


@pytest.fixture
def anvil_rpc() -> Iterator[str]:
    if not ANVIL.exists():
        pytest.fail(f"anvil is not installed ({ANVIL}); run: npm install --prefix tools/anvil")
    from swarmp2p.chain.anvil import Anvil

    # Anvil stops the whole process group: killing the npm shim alone orphaned the native anvil.
    with Anvil(str(ANVIL)) as anvil:
        yield anvil.url


class StageManager:
    """Deploys the contract from anvil's first (unlocked) account and advances it every
    `period_s` seconds on a thread, like an operator's stage manager."""

    def __init__(self, url: str, period_s: float) -> None:
        from web3 import HTTPProvider, Web3

        from swarmp2p.chain.artifact import load_artifact

        self.w3 = Web3(HTTPProvider(url, request_kwargs={"timeout": 10}))
        self.manager = self.w3.eth.accounts[0]
        artifact = load_artifact()
        factory = self.w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
        tx = factory.constructor(1, STAGE_SECONDS).transact({"from": self.manager})
        self.address = self.w3.eth.wait_for_transaction_receipt(tx)["contractAddress"]
        self.contract = self.w3.eth.contract(address=self.address, abi=artifact.abi)
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def fund(self, address: str) -> None:
        tx = self.w3.eth.send_transaction({"from": self.manager, "to": address, "value": 10**18})
        self.w3.eth.wait_for_transaction_receipt(tx)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            tx = self.contract.functions.updateStageAndRound().transact({"from": self.manager})
            self.w3.eth.wait_for_transaction_receipt(tx)

    def __enter__(self) -> StageManager:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def current_round(self) -> int:
        return int(self.contract.functions.currentRound().call())

    def owner_of(self, peer_id: str) -> str:
        return str(self.contract.functions.peerOwner(peer_id).call())

    def has_reward(self, round_number: int, peer_id: str) -> bool:
        return bool(self.contract.functions.hasSubmittedReward(round_number, 0, peer_id).call())


def _node_config(path: Path) -> Path:
    path.write_text(
        """
[node]
questions_per_round = 2
n_local = 2
n_external = 2
hello_interval_s = 2.0

[trainer]
tasks = ["basic_arithmetic"]
threads = 1
format_reward = 0.5
max_new_tokens = 16
tiny_hidden_size = 32
tiny_pretrain_steps = 0
"""
    )
    return path


@pytest.mark.slow
def test_two_nodes_register_and_submit_rewards_on_the_contract(tmp_path: Path, anvil_rpc: str) -> None:
    from eth_account import Account

    from swarmp2p.chain.keys import write_key_file

    config = _node_config(tmp_path / "chain.toml")
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
