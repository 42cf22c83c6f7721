"""A local anvil chain for tests (the `anvil_rpc` fixture), a stage manager that deploys the
contract and advances its stages, and a node config for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ANVIL = ROOT / "tools" / "anvil" / "node_modules" / ".bin" / "anvil"

STAGE_SECONDS = 6


def running_anvil() -> Iterator[str]:
    """A local anvil for one test (tests/conftest.py serves it as `anvil_rpc`): its RPC URL."""
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
