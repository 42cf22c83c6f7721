"""The embedded chain: an in-process py-evm chain (eth-tester) with the SwarmCoordinator
deployed and a stage manager that advances it on a schedule.

Used by single-process runs, the simulator (many peers share ONE EmbeddedChain, hence
one `limiter`) and the tests. Nothing here is thread-safe: py-evm state must be touched by
one thread at a time, which `limiter` (a trio.CapacityLimiter(1)) enforces for trio callers.

The stage manager is lazy: before any coordinator reads or writes, `catch_up(now_ms)` sends
as many `updateStageAndRound` transactions as the schedule says are due. So the chain is
always current when looked at, needs no background task, and works the same under the
simulator's virtual clock. `run_stage_manager` adds an eager loop for readers (dashboards)
that want the chain to move while nobody transacts.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.artifact import Artifact, load_artifact
from swarmp2p.chain.client import ContractClient, RetryPolicy
from swarmp2p.chain.errors import ChainError
from swarmp2p.ports import Clock

log = logging.getLogger(__name__)

# Every account made by `account_for` gets this much test ether: enough for ~40k
# transactions at the tester's 1 gwei gas price and our gas limits.
FUNDING_WEI = 100 * 10**18


class EmbeddedChain:
    """One in-process chain with the contract deployed by the tester's first account, which
    holds the owner, stage manager and bootnode manager roles."""

    def __init__(self, schedule: StageSchedule, *, artifact: Artifact | None = None) -> None:
        from eth_account import Account
        from eth_tester import EthereumTester, PyEVMBackend
        from web3 import EthereumTesterProvider, Web3

        self.schedule = schedule
        self.artifact = artifact or load_artifact()
        self.tester = EthereumTester(PyEVMBackend())
        self.w3 = Web3(EthereumTesterProvider(self.tester))
        keys = self.tester.backend.account_keys
        self.manager_account = Account.from_key(keys[0].to_bytes())
        self._faucet_account = Account.from_key(keys[1].to_bytes())
        # The tester has no transient failures: fail fast instead of backing off.
        self.retry = RetryPolicy(attempts=1)
        deployer = ContractClient(
            self.w3, "0x" + "00" * 20, self.artifact.abi, self.manager_account, retry=self.retry
        )
        self.address = deployer.deploy(
            self.artifact.bytecode, schedule.stage_count, max(schedule.stage_ms // 1000, 1)
        )
        self.manager = self.client(self.manager_account)
        self._faucet = self.client(self._faucet_account)
        self._funded: set[str] = {self.manager_account.address, self._faucet_account.address}
        self.limiter = trio.CapacityLimiter(1)
        self.stage_advances = 0

    def client(self, account: Any) -> ContractClient:
        return ContractClient(self.w3, self.address, self.artifact.abi, account, retry=self.retry)

    def account_for(self, name: str) -> Any:
        """A funded account whose key is derived from `name` (deterministic across runs, so
        simulated peers keep their addresses)."""
        from eth_account import Account
        from eth_utils import keccak

        account = Account.from_key(keccak(b"swarmp2p-embedded-account:" + name.encode()))
        self.fund(account.address)
        return account

    def fund(self, address: str) -> None:
        if address not in self._funded:
            self._faucet.transfer(address, FUNDING_WEI)
            self._funded.add(address)

    def catch_up(self, now_ms: int) -> int:
        """Advance the chain to the schedule's (round, stage) at `now_ms`; returns how many
        stages it advanced. Never moves backwards and never skips: one transaction per stage,
        so every stage gets its `StageAdvanced` event."""
        target = self.schedule.position(now_ms)
        round_, stage, *_ = self.manager.call("roundInfo")
        due = self.schedule.stages_between((round_, stage), target)
        for _ in range(due):
            self.manager.transact("updateStageAndRound")
        self.stage_advances += due
        return due

    def take_snapshot(self) -> Any:
        return self.tester.take_snapshot()

    def revert_to_snapshot(self, snapshot_id: Any) -> None:
        self.tester.revert_to_snapshot(snapshot_id)
        # Nonces are tracked per client; after a revert they must be re-read from the chain.
        self.manager._next_nonce = None
        self._faucet._next_nonce = None
        self._funded = {a for a in self._funded if self.w3.eth.get_balance(a) > 0}


async def run_stage_manager(chain: EmbeddedChain, clock: Clock) -> None:
    """Eagerly advance `chain` at every stage boundary of its schedule, forever.

    Run it in a nursery; cancel it to stop. A failed advance is logged and retried at the
    next boundary (the lazy catch-up would fix it anyway)."""
    while True:
        now = clock.now_ms()
        try:
            await trio.to_thread.run_sync(chain.catch_up, now, limiter=chain.limiter)
        except ChainError as error:
            log.warning("stage manager: advance failed: %s", error.reason)
        round_, stage = chain.schedule.position(now)
        wait_ms = chain.schedule.stage_ends_ms(round_, stage) - clock.now_ms()
        await trio.sleep(max(wait_ms, 1) / 1000)
