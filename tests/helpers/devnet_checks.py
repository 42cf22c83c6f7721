"""What `swarmp2p chain devnet` must have printed and left behind for its node commands to work
as printed: shared by the devnet test on each backend (tests/chain/test_chain_devnet.py runs the
embedded chain, tests/chain/test_chain_long_swarm.py anvil)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs

from tests.helpers.devnet import Devnet


@attrs.frozen
class PrintedDevnet:
    """The devnet's node commands as printed, and what they point at."""

    commands: list[list[str]]
    identities: list[str]  # each command's data dir's peer id, in order
    url: str
    contract: str
    coordinator: Any  # a web3 contract on `url`


def check_printed_devnet(printed: list[str], directory: Path, nodes: int) -> PrintedDevnet:
    """The printed node commands name the devnet's chain and contract, a funded key (0600) and an
    absolute data dir under `directory`; no --bootstrap (the first node's address is on the
    contract's bootnode list); the printed `state:` command shows that bootnode."""
    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.anvil import rpc_ready
    from swarmp2p.chain.artifact import load_artifact
    from swarmp2p.chain.keys import load_key_file
    from swarmp2p.identity import load_identity

    commands = [shlex.split(line.strip()) for line in printed if line.strip().startswith("swarmp2p node")]
    assert len(commands) == nodes, printed
    saved = json.loads((directory / "devnet.json").read_text())
    url, contract = saved["rpc"], saved["contract"]
    assert url.startswith("http://127.0.0.1:") and rpc_ready(url)
    w3 = Web3(HTTPProvider(url, request_kwargs={"timeout": 10}))
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
    return PrintedDevnet(commands, identities, url, contract, coordinator)


def check_devnet_stopped(devnet: Devnet, url: str) -> None:
    """The devnet exits 0 on Ctrl-C, its chain no longer answers, and it says so."""
    from swarmp2p.chain.anvil import rpc_ready

    assert devnet.stop() == 0
    assert not rpc_ready(url), "the devnet's chain still answers after it stopped"
    assert "devnet stopped" in "\n".join(devnet.seen + list(devnet.lines.queue))
