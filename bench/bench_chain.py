"""Contract gas (old vs new contract) and chain client speed (embedded py-evm vs anvil).

    python bench/bench_chain.py [--n 100] [--only gas|speed]

Gas: the leaderboard-heavy calls (submitReward, submitWinners with 1, 8 and 32 winners) on
the current contract and on the first version (bench/fixtures/SwarmCoordinator_v1.vy, whose
leaderboard was a linear search over a storage array), both compiled now and run on the same
in-process chain setup, with the ratio new/old.

Speed, for each backend: view-call latency, transactions per second for registerPeer and
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

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.client import ContractClient
from swarmp2p.chain.coordinator import ChainCoordinator
from swarmp2p.chain.embedded import EmbeddedChain
from swarmp2p.clocks import RealClock
from trainer.percentile import percentile

REPO = Path(__file__).resolve().parents[1]
V1_SOURCE = REPO / "bench/fixtures/SwarmCoordinator_v1.vy"
# 52 characters, the length of a libp2p ed25519 peer id ("12D3KooW..."): 72 peers so that
# boards of 32 fill up and some peers are left outside.
GAS_PEERS = [f"12D3KooW{i:044d}" for i in range(72)]
VOTERS = GAS_PEERS[64:]
# Gas limit for the measured transactions: v1 needs more than the client's limits, tuned for
# the current contract, allow.
MEASURE_GAS = 8_000_000
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
        return percentile(self.latencies_s, q) * 1000


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
    coordinator = ChainCoordinator(client, clock=RealClock())

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


def _fill_boards(client: ContractClient) -> None:
    """Both boards full: rewards 1..32 (distinct), and one vote for 32 winners (all tied at 1)."""
    for i, peer in enumerate(GAS_PEERS[:32]):
        client.transact("submitReward", 0, 0, i + 1, peer, gas=MEASURE_GAS)
    client.transact("submitWinners", 0, GAS_PEERS[:32], VOTERS[0], gas=MEASURE_GAS)


def _gas_cases() -> list[tuple[str, Callable[[EmbeddedChain, ContractClient], Any]]]:
    """(label, action) pairs; each action starts from registered peers and empty boards and
    returns the receipt whose gas is reported."""
    cases: list[tuple[str, Callable[[EmbeddedChain, ContractClient], Any]]] = [
        (
            "submitReward: first reward, empty board",
            lambda chain, c: c.transact("submitReward", 0, 0, 5, GAS_PEERS[0], gas=MEASURE_GAS),
        ),
    ]

    def reward_top_stays(chain: EmbeddedChain, c: ContractClient) -> Any:
        _fill_boards(c)
        chain.manager.transact("updateStageAndRound", gas=MEASURE_GAS)
        # The leader gains and stays first.
        return c.transact("submitReward", 0, 1, 7, GAS_PEERS[31], gas=MEASURE_GAS)

    def reward_enters_full_board(chain: EmbeddedChain, c: ContractClient) -> Any:
        _fill_boards(c)
        # A new peer goes from outside the board to the top.
        return c.transact("submitReward", 0, 0, 10**6, GAS_PEERS[40], gas=MEASURE_GAS)

    cases += [
        ("submitReward: leader of a full board gains", reward_top_stays),
        ("submitReward: new peer enters a full board at the top", reward_enters_full_board),
    ]
    for n in (1, 8, 32):

        def first_time(chain: EmbeddedChain, c: ContractClient, n: int = n) -> Any:
            return c.transact("submitWinners", 0, GAS_PEERS[:n], VOTERS[0], gas=MEASURE_GAS)

        def climbing(chain: EmbeddedChain, c: ContractClient, n: int = n) -> Any:
            _fill_boards(c)
            # The last n entries of a board tied at 1, each going to 2: every one climbs past
            # all the entries still at 1 (the most moves a vote of n can cause).
            return c.transact("submitWinners", 0, GAS_PEERS[32 - n : 32], VOTERS[1], gas=MEASURE_GAS)

        def outside(chain: EmbeddedChain, c: ContractClient, n: int = n) -> Any:
            _fill_boards(c)
            # Peers off a full board gaining one win: tied with the last place, so they stay out.
            return c.transact("submitWinners", 0, GAS_PEERS[32 : 32 + n], VOTERS[1], gas=MEASURE_GAS)

        winners, climb = ("winner", "climbs") if n == 1 else ("winners", "climb")
        cases += [
            (f"submitWinners: {n} first-time {winners}, empty board", first_time),
            (f"submitWinners: {n} {winners} {climb} a full board", climbing),
            (f"submitWinners: {n} {winners} outside a full board", outside),
        ]
    return cases


def measure_gas(artifact: Any, progress: Progress | None = None, label: str = "") -> dict[str, int]:
    """Gas used by each of `_gas_cases()` on a fresh chain running `artifact`."""
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=10**9, stage_count=2), artifact=artifact)
    account = chain.account_for("gas")
    client = chain.client(account)
    for peer in GAS_PEERS:
        client.transact("registerPeer", peer, gas=MEASURE_GAS)
    registered = chain.take_snapshot()
    cases = _gas_cases()
    task = progress.add_task(f"gas: {label}", total=len(cases)) if progress else None
    used: dict[str, int] = {}
    for name, action in cases:
        chain.revert_to_snapshot(registered)
        receipt = action(chain, chain.client(account))
        used[name] = int(receipt["gasUsed"])
        if progress and task is not None:
            progress.advance(task)
    return used


def gas_table(progress: Progress) -> Table:
    from swarmp2p.chain.artifact import compile_source, load_artifact

    old = measure_gas(compile_source(V1_SOURCE), progress, "v1 (linear search)")
    new = measure_gas(load_artifact(), progress, "current")
    table = Table(title="contract gas per call: first version (v1) vs current (ratio: current / v1)")
    for column in ("call", "v1 gas", "current gas", "ratio"):
        table.add_column(column, justify="left" if column == "call" else "right")
    for name, old_gas in old.items():
        table.add_row(name, f"{old_gas:,}", f"{new[name]:,}", f"{new[name] / old_gas:.2f}x")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=100, help="operations per measurement")
    parser.add_argument("--only", choices=("gas", "speed"), help="run one of the two benchmarks")
    args = parser.parse_args()
    console = Console(width=120)
    if args.only != "speed":
        with Progress(console=console, transient=True) as progress:
            table = gas_table(progress)
        console.print(table)
        if args.only == "gas":
            return
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
