"""The on-chain coordinator: the SwarmCoordinator contract over web3.

- `open_coordinator(...)` -> `ChainCoordinator`, the CoordinatorPort adapter (trio).
- `EmbeddedChain`: an in-process py-evm chain with the contract and a scheduled stage manager.
- `ContractClient`: the synchronous web3 client under both.
- Errors: every failure is a `swarmp2p.ports.CoordinatorError` subclass (`errors.py`).

Rewards are stored on-chain as integers scaled by REWARD_SCALE = 10**6 (1.0 == 1_000_000).

Names are loaded lazily so that importing this package does not import web3 (~1 s).
"""

from __future__ import annotations

from typing import Any

from swarmp2p.chain.errors import (
    ChainConfigError,
    ChainError,
    ChainInputError,
    ChainRevert,
    ChainUnavailable,
)

REWARD_SCALE = 10**6

_LAZY = {
    "open_coordinator": "swarmp2p.chain.coordinator",
    "ChainCoordinator": "swarmp2p.chain.coordinator",
    "Leaderboard": "swarmp2p.chain.coordinator",
    "Standing": "swarmp2p.chain.coordinator",
    "EmbeddedChain": "swarmp2p.chain.embedded",
    "run_stage_manager": "swarmp2p.chain.embedded",
    "StageSchedule": "protocol.stage_schedule",
    "ContractClient": "swarmp2p.chain.client",
    "RetryPolicy": "swarmp2p.chain.client",
}

__all__ = [
    "REWARD_SCALE",
    "ChainConfigError",
    "ChainError",
    "ChainInputError",
    "ChainRevert",
    "ChainUnavailable",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'swarmp2p.chain' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)
