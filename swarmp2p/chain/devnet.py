"""`swarmp2p chain devnet`: a local chain for trying a chain swarm in one command.

Starts a chain on 127.0.0.1 (anvil when it is installed, else the embedded py-evm chain served
over HTTP by swarmp2p/chain/serve.py), deploys the SwarmCoordinator from the chain's first
account (which holds every role and advances the rounds), writes a funded key (0600) and a
libp2p identity for each of N nodes, publishes the first node's address as the contract's
bootnode (the nodes find each other through it: no --bootstrap), and returns the exact
`swarmp2p node` command of every node (absolute paths, quoted for a POSIX shell). The caller
(the CLI) then runs the stage manager until stopped.
"""

from __future__ import annotations

import json
import secrets
import shlex
from pathlib import Path
from typing import Any

import attrs

from swarmp2p.chain.anvil import DEPLOYER_KEY, Anvil, find_anvil, free_port
from swarmp2p.chain.errors import ChainConfigError

FUNDING_WEI = 100 * 10**18
DEVNET_FILE = "devnet.json"


@attrs.frozen
class DevnetNode:
    data_dir: Path
    eth_key: Path
    address: str
    peer_id: str
    listen: str
    command: str


@attrs.frozen
class Devnet:
    rpc: str
    contract: str
    manager_key: Path
    stage_seconds: float
    stage_count: int
    nodes: tuple[DevnetNode, ...]

    def to_json(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            return str(value) if isinstance(value, Path) else value

        return attrs.asdict(self, value_serializer=lambda _i, _a, v: plain(v))


def _fresh_dir(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()):
        raise ChainConfigError(
            f"{directory} is not empty (keys of an earlier devnet?); remove it or pick another --dir"
        )
    directory.mkdir(parents=True, exist_ok=True)


class EmbeddedBackend:
    """The embedded chain behind an HTTP JSON-RPC server: the devnet without anvil."""

    def __init__(self, stage_seconds: float, stage_count: int, port: int) -> None:
        import time

        from protocol.stage_schedule import StageSchedule
        from swarmp2p.chain.embedded import EmbeddedChain
        from swarmp2p.chain.serve import EmbeddedRpc, EmbeddedRpcServer

        schedule = StageSchedule(int(time.time() * 1000), int(stage_seconds * 1000), stage_count)
        self.chain = EmbeddedChain(schedule)
        try:
            self.server = EmbeddedRpcServer(EmbeddedRpc(self.chain.tester, self.chain.w3.eth.chain_id), port)
        except OSError as error:
            raise ChainConfigError(f"cannot serve on 127.0.0.1:{port}: {error.strerror}") from None
        self.server.start()
        self.url = self.server.url

    def set_balance(self, address: str, wei: int) -> None:
        self.chain.fund(address)  # FUNDING_WEI, the same 100 ETH

    def stop(self) -> None:
        self.server.stop()


def start_devnet(
    directory: Path,
    nodes: int,
    *,
    stage_seconds: float,
    stage_count: int = 1,
    port: int = 8545,
    backend: str = "auto",
    anvil: Anvil | None = None,
) -> tuple[Any, Devnet]:
    """Start the chain (`backend`: "anvil", "embedded", or "auto": anvil when installed; or the
    given `anvil`, already running), deploy, write keys; see the module doc. The caller stops
    the returned chain (`.stop()`). Raises ChainConfigError / ChainUnavailable."""
    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.artifact import load_artifact
    from swarmp2p.chain.client import ContractClient
    from swarmp2p.chain.keys import load_key_file, write_key_file
    from swarmp2p.identity import create_identity

    directory = directory.resolve()
    _fresh_dir(directory)
    if backend not in ("auto", "anvil", "embedded"):
        raise ChainConfigError(f"unknown devnet backend {backend!r}: auto, anvil or embedded")
    started = anvil is None
    chain: Any = anvil
    if chain is None:
        if backend == "embedded" or (backend == "auto" and find_anvil() is None):
            chain = EmbeddedBackend(stage_seconds, stage_count, port)
        else:
            chain = Anvil(port=port or free_port())
            chain.start()
    try:
        manager_key = directory / "manager.key"
        w3 = Web3(HTTPProvider(chain.url, request_kwargs={"timeout": 10}))
        artifact = load_artifact()
        if isinstance(chain, EmbeddedBackend):  # deployed already, by the tester's first account
            write_key_file(manager_key, bytes(chain.chain.manager_account.key))
            contract = chain.chain.address
            manager = ContractClient(w3, contract, artifact.abi, chain.chain.manager_account)
        else:
            write_key_file(manager_key, bytes.fromhex(DEPLOYER_KEY))
            deployer = ContractClient(w3, "0x" + "00" * 20, artifact.abi, load_key_file(manager_key))
            contract = deployer.deploy(artifact.bytecode, stage_count, max(1, round(stage_seconds)))
            manager = ContractClient(w3, contract, artifact.abi, deployer.account)
        made: list[DevnetNode] = []
        round_seconds = stage_seconds * stage_count
        for index in range(1, nodes + 1):
            data_dir = directory / f"node{index}"
            data_dir.mkdir()
            eth_key = data_dir / "eth.key"
            write_key_file(eth_key, secrets.token_bytes(32))
            address = load_key_file(eth_key).address
            chain.set_balance(address, FUNDING_WEI)
            identity = create_identity(data_dir / "identity.key")
            listen = f"/ip4/127.0.0.1/tcp/{free_port()}"
            args = [
                "swarmp2p",
                "node",
                "--data-dir",
                str(data_dir),
                "--chain-rpc",
                chain.url,
                "--contract",
                contract,
                "--eth-key",
                str(eth_key),
                "--round-seconds",
                f"{round_seconds:g}",
                "--listen",
                listen,
            ]
            made.append(DevnetNode(data_dir, eth_key, address, identity.peer_id, listen, shlex.join(args)))
        if made:  # no --bootstrap: every node dials the contract's bootnodes (the first node)
            manager.transact("addBootnodes", [f"{made[0].listen}/p2p/{made[0].peer_id}"])
        devnet = Devnet(chain.url, contract, manager_key, stage_seconds, stage_count, tuple(made))
        (directory / DEVNET_FILE).write_text(json.dumps(devnet.to_json(), indent=2) + "\n")
        return chain, devnet
    except BaseException:
        if started:
            chain.stop()
        raise
