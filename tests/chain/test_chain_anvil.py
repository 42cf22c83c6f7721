"""Integration test against a real JSON-RPC node: anvil (npm `@foundry-rs/anvil`) on 127.0.0.1.

Deploys with the CLI, registers peers, runs rounds, reads the leaderboard, checks that a
real node's reverts (mined receipts with status 0, `ContractLogicError` on calls) map to the
same `ChainRevert` reasons as the in-process chain. If anvil is not installed this FAILS:
install it with `npm install --prefix tools/anvil`.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from swarmp2p.chain.client import ContractClient
from swarmp2p.chain.coordinator import open_coordinator
from swarmp2p.chain.errors import ChainRevert
from swarmp2p.chain.keys import load_key_file, write_key_file
from tests.helpers.waiting import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
# The first account of anvil's default mnemonic ("test test ... junk"), funded with 10k ETH.
# The other accounts are fresh keys funded through anvil_setBalance.
DEPLOYER_KEY = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"


def find_anvil() -> str:
    """SWARMP2P_ANVIL, then tools/anvil's npm install, then PATH."""
    candidates = [os.environ.get("SWARMP2P_ANVIL"), str(REPO / "tools/anvil/node_modules/.bin/anvil")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    on_path = shutil.which("anvil")
    if on_path:
        return on_path
    pytest.fail("anvil is not installed: run `npm install --prefix tools/anvil` (or set SWARMP2P_ANVIL)")


def rpc_ready(url: str) -> bool:
    request = urllib.request.Request(
        url,
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def anvil() -> Iterator[str]:
    binary = find_anvil()
    port = free_port()
    process = subprocess.Popen(
        [binary, "--host", "127.0.0.1", "--port", str(port), "--silent"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not rpc_ready(url):
            if process.poll() is not None:
                pytest.fail(
                    f"anvil exited with {process.returncode}: {process.stderr.read().decode()[-500:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail("anvil did not answer on its RPC port within 30 s")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def keys(anvil: str, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(anvil))
    directory = tmp_path_factory.mktemp("keys")
    paths = []
    for i in range(3):
        path = directory / f"account{i}.key"
        write_key_file(path, bytes.fromhex(DEPLOYER_KEY) if i == 0 else secrets.token_bytes(32))
        if i > 0:
            w3.provider.make_request("anvil_setBalance", [load_key_file(path).address, hex(10**20)])
        paths.append(path)
    return paths


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "chain", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_deploy_register_rounds_leaderboard(anvil: str, keys: list[Path]) -> None:
    deployed = cli(
        "deploy", "--rpc", anvil, "--key", str(keys[0]), "--stage-count", "2", "--stage-seconds", "5"
    )
    assert deployed.returncode == 0, deployed.stderr
    contract = deployed.stdout.strip().splitlines()[-1]
    assert contract.startswith("0x") and len(contract) == 42

    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.artifact import load_artifact

    w3 = Web3(HTTPProvider(anvil))
    manager = ContractClient(w3, contract, load_artifact().abi, load_key_file(keys[0]))
    alice = open_coordinator(anvil, contract, keys[1])
    bob = open_coordinator(anvil, contract, keys[2])
    rounds = 3

    async def main() -> None:
        await alice.register("QmAlice")
        await alice.register("QmAlice")  # already ours: fine
        await bob.register("QmBob")
        with pytest.raises(ChainRevert, match="peer id owned by another address"):
            await bob.register("QmAlice")
        for round_ in range(rounds):
            for stage in range(2):
                info = await alice.current()
                assert (info.round, info.stage, info.stage_count) == (round_, stage, 2)
                started = manager.call("stageStartedAt")
                assert info.stage_ends_ms == (started + 5) * 1000
                await alice.submit_reward(round_, stage, 0.5 + 0.1 * stage, "QmAlice")
                await bob.submit_reward(round_, stage, 0.25, "QmBob")
                await bob.submit_reward(round_, stage, 0.25, "QmBob")  # a retry: no-op
                await trio.to_thread.run_sync(manager.transact, "updateStageAndRound")
            await alice.submit_winners(round_, ["QmAlice", "QmBob"], "QmAlice")
            await bob.submit_winners(round_, ["QmAlice"], "QmBob")
        # Reverts from a real node: a mined transaction with status 0...
        with pytest.raises(ChainRevert, match="reward already submitted with a different value"):
            await alice.submit_reward(0, 0, 0.9, "QmAlice")
        with pytest.raises(ChainRevert, match="round in the future"):
            await alice.submit_reward(rounds + 1, 0, 0.9, "QmAlice")

    trio.run(main)
    # ... and a call (ContractLogicError), mapped the same way.
    with pytest.raises(ChainRevert, match="index out of range"):
        manager.call("peerAt", 5)
    with pytest.raises(ChainRevert, match="only stage manager"):
        alice.client.transact("updateStageAndRound")

    board = trio.run(alice.leaderboard)
    assert [(s.peer_id, round(s.score, 6)) for s in board.by_reward] == [
        ("QmAlice", round(rounds * (0.5 + 0.6), 6)),
        ("QmBob", rounds * 0.5),
    ]
    assert [(s.peer_id, s.score) for s in board.by_wins] == [
        ("QmAlice", 2.0 * rounds),
        ("QmBob", 1.0 * rounds),
    ]

    shown = cli("status", "--rpc", anvil, "--contract", contract)
    assert shown.returncode == 0, shown.stderr
    assert f"round {rounds}, stage 0 of 2" in shown.stdout
    assert "QmAlice" in shown.stdout and "3.300000" in shown.stdout


def test_cli_errors_are_one_line(anvil: str, keys: list[Path], tmp_path: Path) -> None:
    loose = tmp_path / "loose.key"
    loose.write_text(DEPLOYER_KEY)
    loose.chmod(0o644)
    result = cli("deploy", "--rpc", anvil, "--key", str(loose))
    assert result.returncode == 1
    assert result.stderr.strip().startswith("error: key file") and "chmod 600" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = cli("status", "--rpc", anvil, "--contract", "0x" + "12" * 20)
    assert result.returncode == 1
    assert result.stderr.startswith("error: ")


def test_cli_operator_commands(anvil: str, keys: list[Path], tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.key"
    made = cli("new-key", str(fresh))
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == load_key_file(fresh).address
    assert fresh.stat().st_mode & 0o777 == 0o600
    assert cli("new-key", str(fresh)).returncode == 1  # never overwrites a key

    deployed = cli("deploy", "--rpc", anvil, "--key", str(keys[0]), "--stage-count", "3")
    assert deployed.returncode == 0, deployed.stderr
    contract = deployed.stdout.strip().splitlines()[-1]
    common = ("--rpc", anvil, "--contract", contract)
    added = cli("add-bootnodes", "/ip4/127.0.0.1/tcp/4001/p2p/QmBoot", *common, "--key", str(keys[0]))
    assert added.returncode == 0, added.stderr
    refused = cli("add-bootnodes", "/ip4/127.0.0.1/tcp/4002", *common, "--key", str(keys[1]))
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: only bootnode manager"
    managed = cli("stage-manager", *common, "--key", str(keys[0]), "--stage-seconds", "0.2", "--stages", "4")
    assert managed.returncode == 0, managed.stderr
    advances = [line.split(" (")[0] for line in managed.stdout.strip().splitlines()]
    assert advances == ["round 0 stage 1", "round 0 stage 2", "round 1 stage 0", "round 1 stage 1"]
    shown = cli("status", *common)
    assert shown.returncode == 0, shown.stderr
    assert "round 1, stage 1 of 3" in shown.stdout
    assert "bootnode /ip4/127.0.0.1/tcp/4001/p2p/QmBoot" in shown.stdout
