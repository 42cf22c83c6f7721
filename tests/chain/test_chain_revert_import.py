"""Reading a revert from an RPC endpoint must not load the embedded chain's EVM: on a node
talking to a real chain, `revert_reason` imported eth_tester (and with it py-evm) on its first
revert, ~15 MiB of modules for a type check that cannot match (a chain soak's node RSS stepped up
by that at its first reverted call)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from web3.exceptions import ContractLogicError
from swarmp2p.chain.client import revert_reason
assert revert_reason(ContractLogicError("execution reverted: round closed")) == "round closed"
assert revert_reason(ValueError("not a revert")) is None
print("eth_tester" in sys.modules, "eth" in sys.modules)
"""


def test_a_revert_from_an_rpc_endpoint_loads_no_evm() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"], done.stdout


def test_the_embedded_chains_revert_is_still_read() -> None:
    from eth_tester.exceptions import TransactionFailed

    from swarmp2p.chain.client import revert_reason

    assert revert_reason(TransactionFailed("execution reverted: not registered")) == "not registered"
    assert revert_reason(TransactionFailed(b"")) == "execution reverted (no reason)"
