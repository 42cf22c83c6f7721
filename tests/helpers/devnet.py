"""A devnet for tests: `swarmp2p chain devnet` started as a user starts it (netlab/devnet.py,
which the benches drive too), with the tests' stage length."""

from __future__ import annotations

from pathlib import Path

from netlab.devnet import REPO, DevnetSilent
from netlab.devnet import Devnet as _Devnet

__all__ = ["REPO", "STAGE_SECONDS", "Devnet", "DevnetSilent"]

STAGE_SECONDS = 6


class Devnet(_Devnet):
    """netlab's Devnet started from the repository root with the tests' stage length."""

    def __init__(
        self, directory: Path, nodes: int, backend: str, stage_seconds: float = STAGE_SECONDS
    ) -> None:
        super().__init__(directory, nodes, backend, stage_seconds, cwd=REPO)
