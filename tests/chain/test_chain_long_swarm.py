"""A 2-node chain swarm on anvil for several chain rounds (4 s stages), started by `swarmp2p chain
devnet` (anvil backend) and its printed node commands, checked as tests/chain/test_chain_devnet.py
checks the embedded backend's (no --bootstrap: the nodes meet through the contract's bootnode
list; funded 0600 keys; the printed state command; a clean stop), with every reward a node logged
on the contract, no failed submission, and the price of every node transaction bounded by the
chain's base fee.

Prices that compounded ran a node out of funds by round ~13. A bounded price is checked here on
every transaction the nodes sent, so a price that grows shows in the first rounds;
tests/chain/test_chain_fees.py pins the same bound over 60 rounds and a restart without node
processes. The suite runs 5 chain rounds (about 25 s); the long run is
`TEST_CHAIN_ROUNDS=60 pytest -m slow -k long_swarm` (about 5 minutes) or the chain soak,
`python bench/bench_chain_soak.py --nodes 2 --stage-seconds 4 --rounds 1000`
(docs/reliability.md, "Long runs")."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from swarmp2p.chain.anvil import find_anvil
from swarmp2p.chain.client import FeePolicy
from tests.helpers.devnet import Devnet
from tests.helpers.devnet_checks import check_devnet_stopped, check_printed_devnet
from tests.helpers.fast_config import write_fast_node_config
from tests.helpers.nodes import NodeProcess
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.slow

STAGE_SECONDS = 4
CHAIN_ROUNDS = int(os.environ.get("TEST_CHAIN_ROUNDS", "5"))


def test_a_two_node_chain_swarm_runs_many_rounds_with_every_reward_on_chain(tmp_path: Path) -> None:
    if find_anvil() is None:
        pytest.fail("anvil is not installed: run `npm install --prefix tools/anvil`")
    directory = tmp_path / "devnet"
    devnet = Devnet(directory, nodes=2, backend="anvil", stage_seconds=STAGE_SECONDS)
    nodes: list[NodeProcess] = []
    try:
        printed = check_printed_devnet(devnet.until("state: "), directory, nodes=2)
        coordinator = printed.coordinator
        w3 = coordinator.w3
        saved = json.loads((directory / "devnet.json").read_text())
        accounts = {node["address"].lower() for node in saved["nodes"]}
        config = write_fast_node_config(tmp_path / "fast.toml")
        for words in printed.commands:
            node = NodeProcess(Path(words[words.index("--data-dir") + 1]), config, Path("tiny"), [])
            node.args = [sys.executable, "-m", "swarmp2p.cli", *words[1:], "--config", str(config)]
            nodes.append(node)
            node.start()
        ids = [node.info()["peer_id"] for node in nodes]
        assert ids == printed.identities
        first_block = w3.eth.block_number
        start_round = int(coordinator.functions.currentRound().call())
        began = time.monotonic()

        def rounds_done() -> bool:
            assert not any(node.exited() for node in nodes), "a node exited"
            return int(coordinator.functions.currentRound().call()) >= start_round + CHAIN_ROUNDS

        wait_for(rounds_done, CHAIN_ROUNDS * STAGE_SECONDS * 3, f"{CHAIN_ROUNDS} chain rounds")
        for node in nodes:
            assert node.stop(signal.SIGTERM) == 0, node.output()
        elapsed = time.monotonic() - began

        # Every reward a node logged is on the contract, with the value it logged.
        for node, peer_id, other in zip(nodes, ids, reversed(ids), strict=True):
            completed = [r for r in node.rounds() if r["completed"]]
            has_reward = coordinator.functions.hasSubmittedReward
            on_chain = [r for r in completed if has_reward(r["round"], 0, peer_id).call()]
            summary = f"{node.data_dir.name}: {len(completed)} rounds completed in {elapsed:.0f}s"
            assert len(on_chain) == len(completed), summary + node.output()
            assert len(completed) >= CHAIN_ROUNDS // 2, summary + node.output()
            for record in completed:
                stored = coordinator.functions.stageReward(record["round"], 0, peer_id).call()
                assert stored == round(record["reward"] * 10**6), (record["round"], stored, record["reward"])
            met = [r for r in completed if other in r["accepted_peers"]]
            assert len(met) >= len(completed) // 2, f"{summary}, {len(met)} with the other's rollouts"
            whole = "".join(log.read_text(errors="replace") for log in node.data_dir.glob("stdout-*.log"))
            assert "in a row failed" not in whole, node.output()
            print(summary + f", {len(met)} with the other's rollouts")

        # Every node transaction was mined, at a price bounded by the chain's base fee.
        policy = FeePolicy()
        sent = 0
        for number in range(first_block, w3.eth.block_number + 1):
            block = w3.eth.get_block(number, full_transactions=True)
            for tx in block["transactions"]:
                if tx["from"].lower() not in accounts:
                    continue
                receipt = w3.eth.get_transaction_receipt(tx["hash"])
                assert receipt["status"] == 1, (number, tx["hash"].hex())
                paid = receipt["effectiveGasPrice"]
                assert paid <= 2 * block["baseFeePerGas"] + policy.tip_cap_wei, (number, paid)
                assert tx["maxFeePerGas"] <= policy.max_fee_cap_wei
                sent += 1
        assert sent >= CHAIN_ROUNDS, sent  # rewards (and votes) of both nodes
        check_devnet_stopped(devnet, printed.url)
    except BaseException:
        for node in nodes:
            print(f"===== {node.data_dir.name}\n{node.output()}")
        print("===== devnet\n" + "\n".join(devnet.seen))
        raise
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL, timeout_s=5)
        devnet.stop()
