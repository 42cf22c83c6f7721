"""The one exception family the chain client raises.

Every failure a caller of `swarmp2p.chain` can see is a `swarmp2p.ports.CoordinatorError`
subclass carrying a one-line `reason`, so the node can log it and retry without knowing
whether the chain is the in-process tester or a real JSON-RPC node.
"""

from __future__ import annotations

from swarmp2p.ports import CoordinatorError


class ChainError(CoordinatorError):
    """Base class of every chain client failure."""


class ChainRevert(ChainError):
    """The contract rejected the call; `reason` is the contract's revert string
    (for example "reward already submitted"). Retrying the same call will fail the same way."""


class ChainUnavailable(ChainError):
    """The RPC endpoint failed transiently and kept failing after the client's retries
    (connection refused, timeout, HTTP 5xx, receipt not mined in time). Safe to retry later."""


class ChainInputError(ChainError):
    """The call was refused before reaching the chain: an argument the contract would reject
    or cannot encode (reward outside [0, 1], peer id too long, too many winners)."""


class ChainConfigError(ChainError):
    """The client cannot be set up: missing or unsafe key file, bad contract address,
    no contract code at the address, RPC URL without a contract."""
