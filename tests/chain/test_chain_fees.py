"""Fees and nonces on a real local chain (anvil): the price a transaction pays stays bounded by
the chain's base fee, whatever the swarm sent before.

The bug this pins: the client paid 2 x `eth_gasPrice` as a legacy price; anvil's
`eth_gasPrice` is the base fee plus the tip recent transactions paid, so every transaction's
price doubled the next one's (7.8 gwei at block 2, 4e15 wei at block 50) until every
submission failed with "Insufficient funds" although the accounts held thousands of ETH.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from swarmp2p.chain.anvil import DEPLOYER_KEY, Anvil
from swarmp2p.chain.artifact import load_artifact
from swarmp2p.chain.client import ContractClient, FeePolicy
from swarmp2p.chain.coordinator import open_coordinator
from swarmp2p.chain.keys import load_key_file, write_key_file

pytestmark = pytest.mark.slow

GWEI = 10**9
ROUNDS = 60


@pytest.fixture
def anvil() -> Iterator[Anvil]:
    try:
        chain = Anvil()
    except Exception as error:
        pytest.fail(f"{error}")
    with chain:
        yield chain


def _key(directory: Path, name: str, anvil: Anvil | None, wei: int) -> Path:
    path = directory / name
    write_key_file(path, secrets.token_bytes(32))
    if anvil is not None:
        anvil.set_balance(load_key_file(path).address, wei)
    return path


def test_fee_per_transaction_stays_bounded_over_many_rounds(anvil: Anvil, tmp_path: Path) -> None:
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(anvil.url))
    abi = load_artifact().abi
    deployer = ContractClient(w3, "0x" + "00" * 20, abi, load_key_file(_deployer_key(tmp_path)))
    contract = deployer.deploy(load_artifact().bytecode, 1, 1)
    manager = ContractClient(w3, contract, abi, deployer.account)
    # 0.1 ETH each: hundreds of submissions at a bounded price, a handful at the bug's prices.
    keys = [_key(tmp_path, f"peer{i}.key", anvil, 10**17) for i in range(2)]
    peers = ["QmAlice", "QmBob"]
    policy = FeePolicy()

    async def main() -> None:
        coordinators = [open_coordinator(anvil.url, contract, key) for key in keys]
        for coordinator, peer in zip(coordinators, peers, strict=True):
            await coordinator.register(peer)
        for round_ in range(ROUNDS):
            if round_ == ROUNDS // 2:
                # A restart: fresh clients know no nonce and no price; the chain tells them.
                coordinators = [open_coordinator(anvil.url, contract, key) for key in keys]
            for coordinator, peer in zip(coordinators, peers, strict=True):
                await coordinator.submit_reward(round_, 0, 0.5, peer)
            await trio.to_thread.run_sync(manager.transact, "updateStageAndRound")

    trio.run(main)

    for peer in peers:
        assert manager.call("totalReward", peer) == ROUNDS * 500_000, peer
    latest = w3.eth.block_number
    checked = 0
    for number in range(1, latest + 1):
        block = w3.eth.get_block(number, full_transactions=True)
        base = block["baseFeePerGas"]
        for tx in block["transactions"]:
            receipt = w3.eth.get_transaction_receipt(tx["hash"])
            assert receipt["status"] == 1
            paid = receipt["effectiveGasPrice"]
            assert paid <= 2 * base + policy.tip_cap_wei, (number, paid, base)
            assert tx["type"] == 2, "EIP-1559 where the chain has a base fee"
            assert tx["maxPriorityFeePerGas"] <= policy.tip_cap_wei
            assert tx["maxFeePerGas"] <= policy.max_fee_cap_wei
            checked += 1
    assert checked >= 3 * ROUNDS
    # What two peers spent on 60 rounds: a bounded price costs well under 0.01 ETH each.
    for key in keys:
        spent = 10**17 - w3.eth.get_balance(load_key_file(key).address)
        assert 0 < spent < 10**16, spent


def _deployer_key(directory: Path) -> Path:
    path = directory / "deployer.key"
    if not path.exists():
        write_key_file(path, bytes.fromhex(DEPLOYER_KEY))
    return path


def test_a_dropped_transaction_leaves_no_nonce_gap(anvil: Anvil, tmp_path: Path) -> None:
    """A transaction the node dropped (never mined) does not strand the account: the next one
    takes the chain's pending nonce, the dropped one's, and is mined."""
    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.anvil import rpc
    from swarmp2p.chain.client import RetryPolicy
    from swarmp2p.chain.errors import ChainUnavailable

    w3 = Web3(HTTPProvider(anvil.url))
    abi = load_artifact().abi
    deployer = ContractClient(w3, "0x" + "00" * 20, abi, load_key_file(_deployer_key(tmp_path)))
    contract = deployer.deploy(load_artifact().bytecode, 1, 1)
    key = _key(tmp_path, "peer.key", anvil, 10**17)
    impatient = RetryPolicy(attempts=1, receipt_timeout_s=0.5)
    client = ContractClient(w3, contract, abi, load_key_file(key), retry=impatient)
    client.transact("registerPeer", "QmAlice")
    rpc(anvil.url, "evm_setAutomine", [False])
    with pytest.raises(ChainUnavailable):
        client.transact("submitReward", 0, 0, 500_000, "QmAlice")
    rpc(anvil.url, "anvil_dropAllTransactions")
    rpc(anvil.url, "evm_setAutomine", [True])
    address = client.account.address
    assert w3.eth.get_transaction_count(address, "pending") == 1  # the dropped one's nonce is free
    receipt = client.transact("submitReward", 0, 0, 500_000, "QmAlice")
    assert receipt["status"] == 1
    assert w3.eth.get_transaction_count(address) == 2
    # A restarted process (a fresh client) on the same key goes on from the chain's nonce.
    again = ContractClient(w3, contract, abi, load_key_file(key))
    assert again.transact("registerPeer", "QmAlice2")["status"] == 1
