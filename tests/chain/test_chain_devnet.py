"""`swarmp2p chain devnet`: one command starts a local chain (anvil, or the embedded py-evm chain
served over HTTP), deploys the contract, writes funded keys, advances rounds and prints each
node's command. The test runs the printed commands
as printed (plus a config file that makes the tiny model fast on 2 cores), checks that both
nodes find each other through the contract's bootnode list alone (no --bootstrap) and put their
rewards on the contract, and stops everything cleanly."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmp2p.chain.anvil import find_anvil, rpc, rpc_ready
from tests.helpers.devnet import REPO, STAGE_SECONDS, Devnet  # noqa: F401
from tests.helpers.fast_config import write_fast_node_config
from tests.helpers.nodes import NodeProcess
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["anvil", "embedded"])
def test_devnet_and_its_printed_node_commands(tmp_path: Path, backend: str) -> None:
    if backend == "anvil" and find_anvil() is None:
        pytest.fail("anvil is not installed: run `npm install --prefix tools/anvil`")
    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.artifact import load_artifact
    from swarmp2p.chain.keys import load_key_file
    from swarmp2p.identity import load_identity

    directory = tmp_path / "devnet"
    devnet = Devnet(directory, nodes=2, backend=backend)
    nodes: list[NodeProcess] = []
    try:
        printed = devnet.until("state: ")
        commands = [shlex.split(line.strip()) for line in printed if line.strip().startswith("swarmp2p node")]
        assert len(commands) == 2, printed
        saved = json.loads((directory / "devnet.json").read_text())
        url, contract = saved["rpc"], saved["contract"]
        assert url.startswith("http://127.0.0.1:") and rpc_ready(url)
        w3 = Web3(HTTPProvider(url))
        coordinator = w3.eth.contract(address=contract, abi=load_artifact().abi)
        identities = []
        for words in commands:
            flags = dict(zip(words[2::2], words[3::2], strict=False))
            assert flags["--chain-rpc"] == url and flags["--contract"] == contract
            key = Path(flags["--eth-key"])
            assert key.is_absolute() and key.stat().st_mode & 0o777 == 0o600
            assert w3.eth.get_balance(load_key_file(key).address) == 100 * 10**18
            data_dir = Path(flags["--data-dir"])
            assert data_dir.is_absolute() and data_dir.parent == directory.resolve()
            identities.append(load_identity(data_dir / "identity.key").peer_id)
            assert "--bootstrap" not in words  # they meet through the contract's bootnode list
        first_listen = commands[0][commands[0].index("--listen") + 1]
        assert coordinator.functions.getBootnodes().call() == [f"{first_listen}/p2p/{identities[0]}"]
        assert len(w3.eth.get_code(contract)) > 0
        status = shlex.split(printed[-1].removeprefix("state: "))
        shown = subprocess.run(
            [sys.executable, "-m", "swarmp2p.cli", *status[1:]], capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0 and "bootnode /ip4/127.0.0.1/" in shown.stdout, shown.stderr

        # The printed commands, as printed; the config only makes the tiny model fast here.
        config = write_fast_node_config(tmp_path / "fast.toml")
        for words in commands:
            data_dir = Path(words[words.index("--data-dir") + 1])
            node = NodeProcess(data_dir, config, Path("tiny"), [])
            node.args = [sys.executable, "-m", "swarmp2p.cli", *words[1:], "--config", str(config)]
            nodes.append(node)
            node.start()
        infos = [node.info() for node in nodes]
        assert [info["peer_id"] for info in infos] == identities

        def rewarded() -> bool:
            return all(
                any(
                    r["completed"] and coordinator.functions.hasSubmittedReward(r["round"], 0, p).call()
                    for r in node.rounds()
                )
                for node, p in zip(nodes, identities, strict=True)
            )

        wait_for(rewarded, 90, "both nodes' rewards on the devnet contract")
        assert all(any(r["peers"] >= 1 for r in node.rounds()) for node in nodes), "the nodes never met"
        for node in nodes:
            assert node.stop(signal.SIGTERM) == 0, node.output()
        assert devnet.stop() == 0
        assert not rpc_ready(url), "the devnet's chain still answers after it stopped"
        assert "devnet stopped" in "\n".join(devnet.seen + list(devnet.lines.queue))
    except BaseException:
        for node in nodes:
            print(f"===== {node.data_dir.name}\n{node.output()}")
        print("===== devnet\n" + "\n".join(devnet.seen))
        raise
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL, timeout_s=5)
        devnet.stop()


def test_devnet_refuses_a_used_directory(tmp_path: Path) -> None:
    (tmp_path / "old.key").write_text("x")
    done = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "chain", "devnet", "--dir", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: ") and "not empty" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_rpc_helper_names_errors() -> None:
    with pytest.raises(OSError):
        rpc("http://127.0.0.1:9", "eth_chainId", timeout=0.5)


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.6, 1.2])
def test_devnet_stops_cleanly_on_ctrl_c_at_any_moment(tmp_path: Path, delay_s: float) -> None:
    """A Ctrl-C right after the ready lines, while the stage manager sleeps, or while it advances
    (1 s stages) stops the chain and exits 0. Under trio, one landing inside the nursery surfaced
    as an ExceptionGroup (exit 1), and one in full-suite CI runs hung for over 120 s."""
    process = subprocess.Popen(
        [sys.executable, "-m", "swarmp2p.cli", "chain", "devnet", "--dir", str(tmp_path / "dn"),
         "--port", "0", "--nodes", "1", "--stage-seconds", "1", "--backend", "embedded"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith("all of it: "):
            break
    time.sleep(delay_s)
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=60)
    output = "".join(seen) + rest
    assert process.returncode == 0, output
    assert output.rstrip().endswith("devnet stopped"), output
    assert "Traceback" not in output, output
