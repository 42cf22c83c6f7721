"""The join command a chain node prints carries the chain flags and a key of the joiner's own
(without them the pasted joiner starts a chain-less swarm of its own),
and the key step it prints works as pasted."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from swarmp2p.join_command import join_lines
from swarmp2p.node_config import NodeConfig

ADDR = "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWabc"
CONTRACT = "0x5FbDB2315678afecb367f032d93F642f64180aa3"


def test_a_chain_nodes_join_lines_name_the_chain_and_a_new_key(tmp_path: Path) -> None:
    own = tmp_path / "node1"
    config = NodeConfig(
        data_dir=str(own), chain_rpc="http://127.0.0.1:8545", contract=CONTRACT, eth_key=str(own / "eth.key")
    )
    key_step, node_step = join_lines(config, own, ADDR)
    new_dir = tmp_path / "node1-2"
    key_words = shlex.split(key_step.split("  #", 1)[0])
    assert key_words == ["swarmp2p", "chain", "new-key", str(new_dir / "eth.key")]
    assert "fund" in key_step
    words = shlex.split(node_step)
    flags = dict(zip(words[2::2], words[3::2], strict=True))
    assert flags["--chain-rpc"] == "http://127.0.0.1:8545" and flags["--contract"] == CONTRACT
    assert flags["--eth-key"] == str(new_dir / "eth.key")  # its own: never this node's key
    assert flags["--data-dir"] == str(new_dir) and flags["--bootstrap"] == ADDR


def test_a_chain_less_node_prints_one_line(tmp_path: Path) -> None:
    lines = join_lines(NodeConfig(data_dir=str(tmp_path / "n")), tmp_path / "n", ADDR)
    assert len(lines) == 1 and "--chain-rpc" not in lines[0]


def test_the_printed_key_step_works_as_pasted(tmp_path: Path) -> None:
    own = tmp_path / "node1"
    config = NodeConfig(data_dir=str(own), chain_rpc="http://127.0.0.1:8545", contract=CONTRACT)
    key_step = join_lines(config, own, ADDR)[0]
    words = shlex.split(key_step.split("  #", 1)[0])
    done = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", *words[1:]], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    key = Path(words[-1])
    assert key.stat().st_mode & 0o777 == 0o600 and done.stdout.strip().startswith("0x")
