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


def join_command(config: NodeConfig, data_dir: Path, addr: str, config_file: Path | None = None) -> str:
    """The exact shell command that joins this node's swarm from another terminal: a real data
    dir (never a placeholder the shell would read as a redirection), this node's config file and
    model, every argument quoted for a POSIX shell; no sudo."""
    new_dir = free_sibling_dir(data_dir)
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
    args += ["--bootstrap", addr]
    return shlex.join(args)
