"""Chain client throughput and latency: the embedded py-evm chain vs a real node (anvil).

    python bench/bench_chain.py [--n 100]

For each backend: view-call latency, transactions per second for registerPeer and
submitReward with our explicit gas, the same through the trio ChainCoordinator (one worker
thread), and registerPeer with web3's default gas estimation for comparison. Ratios are
against "embedded, registerPeer, explicit gas", measured in the same run.
anvil comes from `npm install --prefix tools/anvil` (or SWARMP2P_ANVIL, or PATH).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from swarmp2p.chain.client import ContractClient
from swarmp2p.chain.coordinator import ChainCoordinator
from swarmp2p.chain.embedded import EmbeddedChain
from swarmp2p.chain.schedule import StageSchedule

REPO = Path(__file__).resolve().parents[1]
ANVIL_DEPLOYER_KEY = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"


@attrs.frozen
class Row:
    backend: str
    operation: str
    latencies_s: tuple[float, ...]

    @property
    def per_second(self) -> float:
        return len(self.latencies_s) / sum(self.latencies_s)

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(int(q * len(ordered)), len(ordered) - 1)] * 1000


def timed(n: int, action: Callable[[int], Any], progress: Progress, label: str) -> tuple[float, ...]:
    task = progress.add_task(label, total=n)
    latencies = []
    for i in range(n):
        start = time.perf_counter()
        action(i)
        latencies.append(time.perf_counter() - start)
        progress.advance(task)
    return tuple(latencies)


def estimated_gas_register(client: ContractClient, peer_id: str) -> None:
    """registerPeer the way web3 does it by default: gas and fees estimated by the node."""
    tx = client.contract.functions.registerPeer(peer_id).build_transaction(
        {"from": client.account.address, "nonce": client.w3.eth.get_transaction_count(client.account.address)}
    )
    signed = client.account.sign_transaction(tx)
    client.w3.eth.wait_for_transaction_receipt(client.w3.eth.send_raw_transaction(signed.raw_transaction))
    client._next_nonce = None


def bench_backend(
    name: str, make_client: Callable[[], ContractClient], n: int, progress: Progress
) -> list[Row]:
    client = make_client()
    tag = secrets.token_hex(3)
    rows = [
        Row(
            name,
            "view call (roundInfo)",
            timed(n, lambda i: client.call("roundInfo"), progress, f"{name}: call"),
        ),
        Row(
            name,
            "registerPeer, explicit gas",
            timed(
                n, lambda i: client.transact("registerPeer", f"Qm{tag}r{i}"), progress, f"{name}: register"
            ),
        ),
        Row(
            name,
            "submitReward, explicit gas",
            timed(
                n,
                lambda i: client.transact("submitReward", 0, 0, 500_000, f"Qm{tag}r{i}"),
                progress,
                f"{name}: reward",
            ),
        ),
        Row(
            name,
            "registerPeer, gas estimated",
            timed(
                n, lambda i: estimated_gas_register(client, f"Qm{tag}e{i}"), progress, f"{name}: estimated"
            ),
        ),
    ]
    coordinator = ChainCoordinator(client, clock=WallClockMs())

    async def through_trio() -> tuple[float, ...]:
        task = progress.add_task(f"{name}: trio register", total=n)
        latencies = []
        for i in range(n):
            start = time.perf_counter()
            await coordinator.register(f"Qm{tag}t{i}")
            latencies.append(time.perf_counter() - start)
            progress.advance(task)
        return tuple(latencies)

    coordinator._code_checked = True
    rows.append(Row(name, "register via ChainCoordinator (trio)", trio.run(through_trio)))
    return rows


class WallClockMs:
    def now_ms(self) -> int:
        return int(time.time() * 1000)


def find_anvil() -> str | None:
    for candidate in (os.environ.get("SWARMP2P_ANVIL"), str(REPO / "tools/anvil/node_modules/.bin/anvil")):
        if candidate and Path(candidate).is_file():
            return candidate
    return shutil.which("anvil")


def start_anvil(binary: str) -> tuple[subprocess.Popen[bytes], str]:
    from web3 import HTTPProvider, Web3

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [binary, "--host", "127.0.0.1", "--port", str(port), "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    w3 = Web3(HTTPProvider(url))
    deadline = time.monotonic() + 30
    while True:
        try:
            assert w3.eth.chain_id > 0
            return process, url
        except Exception:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("anvil did not start") from None
            time.sleep(0.1)


def anvil_client(url: str) -> ContractClient:
    from eth_account import Account
    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.artifact import load_artifact

    artifact = load_artifact()
    w3 = Web3(HTTPProvider(url))
    account = Account.from_key(bytes.fromhex(ANVIL_DEPLOYER_KEY))
    deployer = ContractClient(w3, "0x" + "00" * 20, artifact.abi, account)
    address = deployer.deploy(artifact.bytecode, 2, 30)
    return ContractClient(w3, address, artifact.abi, account)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100, help="operations per measurement")
    args = parser.parse_args()
    console = Console(width=120)
    rows: list[Row] = []
    notes: list[str] = []
    with Progress(console=console, transient=True) as progress:
        chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=10**9, stage_count=2))
        rows += bench_backend("embedded", lambda: chain.client(chain.account_for("bench")), args.n, progress)
        binary = find_anvil()
        if binary is None:
            notes.append("anvil not installed (npm install --prefix tools/anvil): anvil rows skipped")
        else:
            process, url = start_anvil(binary)
            try:
                rows += bench_backend("anvil", lambda: anvil_client(url), args.n, progress)
            finally:
                process.terminate()
                process.wait(timeout=10)

    baseline = next(
        r for r in rows if r.backend == "embedded" and r.operation == "registerPeer, explicit gas"
    )
    table = Table(title=f"chain client, {args.n} operations each (ratio: ops/s vs embedded registerPeer)")
    for column in ("backend", "operation", "ops/s", "mean ms", "p50 ms", "p95 ms", "ratio"):
        table.add_column(column, justify="left" if column in ("backend", "operation") else "right")
    for row in rows:
        table.add_row(
            row.backend,
            row.operation,
            f"{row.per_second:.1f}",
            f"{statistics.fmean(row.latencies_s) * 1000:.2f}",
            f"{row.percentile_ms(0.5):.2f}",
            f"{row.percentile_ms(0.95):.2f}",
            f"{row.per_second / baseline.per_second:.2f}x",
        )
    console.print(table)
    for note in notes:
        console.print(note)


if __name__ == "__main__":
    main()
