"""The shell command a node prints so that a second node on this machine joins its swarm."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from swarmp2p.node_config import NodeConfig


def free_sibling_dir(data_dir: Path) -> Path:
    """An absolute path next to `data_dir` that does not exist yet: `<name>-2`, `<name>-3`, ..."""
    base = data_dir.resolve()
    index = 2
    while (candidate := base.with_name(f"{base.name}-{index}")).exists():
        index += 1
    return candidate


def join_lines(config: NodeConfig, data_dir: Path, addr: str, config_file: Path | None = None) -> list[str]:
    """What to paste in another terminal to join this node's swarm: `join_command`, preceded on
    a chain by the step that makes the joiner's own Ethereum key (a key shared by two nodes
    races on nonces, and a peer id belongs to the account that registered it)."""
    new_dir = free_sibling_dir(data_dir)
    command = join_command(config, data_dir, addr, config_file, new_dir=new_dir)
    if not config.chain_rpc:
        return [command]
    key = shlex.join(["swarmp2p", "chain", "new-key", str(new_dir / "eth.key")])
    return [f"{key}  # prints its address: fund it (gas), then", command]


def join_command(
    config: NodeConfig,
    data_dir: Path,
    addr: str,
    config_file: Path | None = None,
    *,
    new_dir: Path | None = None,
) -> str:
    """The exact shell command that joins this node's swarm from another terminal: a real data
    dir (never a placeholder the shell would read as a redirection), this node's config file and
    model, on a chain its RPC and contract with a key of the joiner's own, every argument quoted
    for a POSIX shell; no sudo."""
    new_dir = new_dir or free_sibling_dir(data_dir)
    args = ["swarmp2p", "node", "--data-dir", str(new_dir)]
    if config_file is not None:
        args += ["--config", str(Path(config_file).resolve())]
        # What the shared file may fix that two nodes on one machine cannot share: the identity
        # (one peer id), a fixed listen port, a dashboard port.
        if config.identity:
            args += ["--identity", str(new_dir / "identity.key")]
        if any(re.search(r"/tcp/[1-9]", addr) for addr in config.listen):
            for addr in config.listen:
                args += ["--listen", re.sub(r"/tcp/\d+", "/tcp/0", addr)]
        if config.dashboard_port:
            args += ["--dashboard-port", "0"]
    if config.model != NodeConfig().model:
        model = config.model
        if Path(model).exists():
            model = str(Path(model).resolve())
        args += ["--model", model]
    if config.chain_rpc:  # without these the joiner would start a chain-less swarm of its own
        args += ["--chain-rpc", config.chain_rpc, "--contract", config.contract]
        args += ["--eth-key", str(new_dir / "eth.key")]
    args += ["--bootstrap", addr]
    return shlex.join(args)
