"""`swarmp2p chain devnet`: one command starts a local chain (anvil, or the embedded py-evm chain
served over HTTP), deploys the contract, writes funded keys, advances rounds and prints each
node's command. The test runs the printed commands
as printed (plus a config file that makes the tiny model fast on 2 cores), checks that both
nodes find each other through the contract's bootnode list alone (no --bootstrap) and put their
rewards on the contract, and stops everything cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swarmp2p.chain.anvil import rpc
from tests.helpers.devnet import REPO, STAGE_SECONDS, Devnet  # noqa: F401
from tests.helpers.devnet_checks import check_devnet_stopped, check_printed_devnet
from tests.helpers.fast_config import write_fast_node_config
from tests.helpers.nodes import NodeProcess
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.slow


# The anvil backend's devnet runs in tests/chain/test_chain_long_swarm.py, with the same checks
# of what it printed (tests/helpers/devnet_checks.py) and many chain rounds after them.
@pytest.mark.parametrize("backend", ["embedded"])
def test_devnet_and_its_printed_node_commands(tmp_path: Path, backend: str) -> None:
    directory = tmp_path / "devnet"
    devnet = Devnet(directory, nodes=2, backend=backend)
    nodes: list[NodeProcess] = []
    try:
        printed = check_printed_devnet(devnet.until("state: "), directory, nodes=2)
        coordinator, identities = printed.coordinator, printed.identities

        # The printed commands, as printed; the config only makes the tiny model fast here.
        config = write_fast_node_config(tmp_path / "fast.toml")
        for words in printed.commands:
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
