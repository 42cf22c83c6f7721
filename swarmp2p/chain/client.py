"""A synchronous client for one deployed SwarmCoordinator, over one web3 connection.

Synchronous on purpose: web3's async providers need asyncio and fail under trio, and the
in-process chain is not thread-safe. The trio side (`swarmp2p.chain.coordinator`) runs every
call of one client on one serialized worker thread.

Transactions are signed locally with explicit gas, nonce, fees and chain id, so sending one
costs no estimation round trips (estimating made the in-process chain 2-4x slower).

Fees come from the chain and never from what we paid before (`FeePolicy`): where the latest
block has a base fee, an EIP-1559 transaction with `maxPriorityFeePerGas` = the node's suggested
tip capped at `tip_cap_wei` and `maxFeePerGas` = 2 x base fee + tip, capped at
`max_fee_cap_wei`; elsewhere a legacy `gasPrice` = `eth_gasPrice`, capped the same. (The first
version paid 2 x `eth_gasPrice` as a legacy price; anvil's `eth_gasPrice` is the base fee plus
the tips recent transactions paid, so each price doubled the next one until every submission
failed for funds: tests/chain/test_chain_fees.py.)

Nonces come from the chain: each transaction takes the account's pending nonce, raised to one
past our last MINED transaction (a load-balanced node may lag behind its own receipt), so a
restart, a transaction the node dropped, or another process on the key never strands us.

Failure mapping (everything leaves as a `ChainError` subclass with a one-line reason):
- a revert, whether eth_tester's `TransactionFailed` on a call, `ContractLogicError` /
  `ContractCustomError` from a real node, or a mined receipt with status 0 (whose reason we
  recover by replaying the call against the block before) -> `ChainRevert(reason)`;
- connection errors, timeouts, HTTP 429/5xx, a receipt that does not show up -> retried with
  exponential backoff, then `ChainUnavailable`;
- anything else the node or library says -> `ChainError`.

A transaction is signed once and, on a transient failure, the SAME signed bytes are sent
again: a node that already has it answers "already known" / "nonce too low", and we go on
waiting for its receipt, so a retry can never submit twice.

Over 400 lines: every contract call and transaction with its fee, nonce and revert
handling in one place, so the rules for sending a transaction are read once.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import attrs

from swarmp2p.chain.errors import ChainError, ChainRevert, ChainUnavailable

log = logging.getLogger(__name__)

# Gas limit per contract function. Each is the measured worst case (longest peer ids, full
# leaderboards, most winners: see tests/chain/test_chain_contract.py::test_gas_limits_cover_worst_case)
# plus headroom. A limit that is too low shows up as a revert "out of gas", never as a silent loss.
GAS_LIMITS: dict[str, int] = {
    "constructor": 3_300_000,  # measured 2.67M
    "registerPeer": 300_000,  # 128-byte peer id, first for its owner: 226k
    "updateStageAndRound": 80_000,  # round change: 57k
    "submitReward": 330_000,  # new peer entering a full leaderboard: 257k
    "submitWinners": 2_400_000,  # 32 first-time winners: 1.94M
    "addBootnodes": 4_400_000,  # 16 addresses of 256 bytes: 3.32M
    "removeBootnode": 120_000,  # moving a 256-byte address: 70k
    "clearBootnodes": 60_000,
    "transferOwnership": 60_000,
    "setStageManager": 60_000,
    "setBootnodeManager": 60_000,
    "setStageDuration": 60_000,
}
TRANSFER_GAS = 21_000
GWEI = 10**9

_REVERT_PREFIXES = (
    "execution reverted: ",
    "execution reverted:",
    "VM Exception while processing transaction: ",
)


@attrs.frozen
class RetryPolicy:
    """How hard to try before reporting `ChainUnavailable`. Backoff doubles from
    `initial_backoff_s` up to `max_backoff_s`; `attempts` counts the first try."""

    attempts: int = 5
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 3.0
    receipt_timeout_s: float = 30.0
    receipt_poll_s: float = 0.05


@attrs.frozen
class FeePolicy:
    """How much a transaction may pay per gas. The tip is the node's suggestion
    (`eth_maxPriorityFeePerGas`, or `default_tip_wei` where it has none), never above
    `tip_cap_wei`; `maxFeePerGas` is `base_fee_multiplier` x the latest base fee + the tip
    (headroom for six full blocks of rising base fee), never above `max_fee_cap_wei`. A chain
    whose base fee (or legacy gas price) is above the cap gets no transaction: a one-line
    `ChainError` says so. Fees are re-read every `refresh_s` seconds and after a fee error."""

    tip_cap_wei: int = 2 * GWEI
    max_fee_cap_wei: int = 500 * GWEI
    default_tip_wei: int = GWEI
    base_fee_multiplier: int = 2
    refresh_s: float = 5.0

    @classmethod
    def from_gwei(cls, max_fee_gwei: float, tip_cap_gwei: float) -> FeePolicy:
        return cls(tip_cap_wei=int(tip_cap_gwei * GWEI), max_fee_cap_wei=int(max_fee_gwei * GWEI))


def _gwei(wei: int) -> str:
    return f"{wei / GWEI:.4g} gwei"


def revert_reason(error: BaseException) -> str | None:
    """The contract's revert string if `error` is a revert, else None."""
    from web3.exceptions import ContractCustomError, ContractLogicError

    # Only the embedded chain raises eth_tester's TransactionFailed, and it has imported
    # eth_tester by then: a node on an RPC endpoint must not load py-evm (~15 MiB) to learn that
    # its error is not one.
    tester_errors = sys.modules.get("eth_tester.exceptions")
    if tester_errors is not None and isinstance(error, tester_errors.TransactionFailed):
        raw = error.args[0] if error.args else ""
        # eth_tester gives a str for a reason string and raw bytes otherwise (b"" for a bare revert).
        message = f"revert data 0x{raw.hex()}" if isinstance(raw, bytes) and raw else str(raw or "")
    elif isinstance(error, ContractCustomError):
        return f"custom error {error.data!r}" if getattr(error, "data", None) else "custom error"
    elif isinstance(error, ContractLogicError):
        message = getattr(error, "message", None) or str(error)
    else:
        return None
    for prefix in _REVERT_PREFIXES:
        if message.startswith(prefix):
            message = message[len(prefix) :]
            break
    message = message.strip()
    if message in ("", "b''", 'b""', "0x"):  # eth_tester writes an empty revert as "b''"
        return "execution reverted (no reason)"
    return message


def is_transient(error: BaseException) -> bool:
    """True for failures worth retrying: the endpoint, not the request, is at fault."""
    import requests
    from web3.exceptions import (
        ProviderConnectionError,
        RequestTimedOut,
        TimeExhausted,
        TooManyRequests,
        Web3RPCError,
    )

    if isinstance(error, (ProviderConnectionError, RequestTimedOut, TimeExhausted, TooManyRequests)):
        return True
    if isinstance(error, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
        return True
    if isinstance(error, requests.HTTPError):
        status = error.response.status_code if error.response is not None else 0
        return status == 429 or status >= 500
    if isinstance(error, Web3RPCError):
        message = str(error).lower()
        return "rate limit" in message or "timeout" in message or "try again" in message
    return False


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text[:300]}"


@attrs.define
class _SignedTx:
    raw: bytes
    hash: bytes
    nonce: int
    call: dict[str, Any]  # from/to/data/gas: what to replay to recover a revert reason
    send_attempts: int = 0


class ContractClient:
    """Calls and transactions against one SwarmCoordinator as one account.

    Not thread-safe: use it from one thread at a time (the coordinator adapter guarantees it).
    The account must be used by this client only, since nonces are tracked locally
    (re-read from the chain after any failure that may have desynchronised them).
    """

    def __init__(
        self,
        w3: Any,
        address: str,
        abi: list[dict[str, Any]],
        account: Any,
        *,
        retry: RetryPolicy | None = None,
        fees: FeePolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.w3 = w3
        self.contract = w3.eth.contract(address=w3.to_checksum_address(address), abi=abi)
        self.account = account
        self.retry = retry or RetryPolicy()
        self.fees = fees or FeePolicy()
        self._sleep = sleep
        self._chain_id: int | None = None
        self._fee_fields: dict[str, int] | None = None
        self._fees_read_at = 0.0
        # One past our last mined transaction's nonce (None: nothing mined by this client yet).
        self._next_nonce: int | None = None

    @property
    def address(self) -> str:
        return self.contract.address

    # ------------------------------------------------------------------ retry plumbing

    def _with_retries(self, what: str, operation: Callable[[], Any]) -> Any:
        backoff = self.retry.initial_backoff_s
        for attempt in range(1, self.retry.attempts + 1):
            try:
                return operation()
            except ChainError:
                raise
            except Exception as error:
                reason = revert_reason(error)
                if reason is not None:
                    raise ChainRevert(reason) from None
                if not is_transient(error):
                    raise ChainError(f"{what} failed: {_one_line(error)}") from None
                if attempt == self.retry.attempts:
                    raise ChainUnavailable(
                        f"{what} failed after {attempt} attempts: {_one_line(error)}"
                    ) from None
                log.debug("%s: transient error (attempt %d): %s", what, attempt, _one_line(error))
                self._sleep(backoff)
                backoff = min(backoff * 2, self.retry.max_backoff_s)
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ reads

    def call(self, function: str, *args: Any, block: int | str = "latest") -> Any:
        """Run a view function; a revert becomes `ChainRevert`."""
        bound = self.contract.functions[function](*args)
        return self._with_retries(
            f"call {function}",
            lambda: bound.call({"from": self.account.address}, block_identifier=block),
        )

    def chain_id(self) -> int:
        if self._chain_id is None:
            self._chain_id = self._with_retries("eth_chainId", lambda: self.w3.eth.chain_id)
        return self._chain_id

    def fee_fields(self) -> dict[str, int]:
        """The fee fields of the next transaction (see `FeePolicy`); cached `refresh_s` seconds."""
        if self._fee_fields is None or time.monotonic() - self._fees_read_at > self.fees.refresh_s:
            self._fee_fields = self._read_fees()
            self._fees_read_at = time.monotonic()
        return dict(self._fee_fields)

    def _read_fees(self) -> dict[str, int]:
        policy = self.fees
        block = self._with_retries("eth_getBlockByNumber", lambda: self.w3.eth.get_block("latest"))
        base = block.get("baseFeePerGas")
        if base is None:  # a chain without EIP-1559: the node's legacy price, capped
            price = int(self._with_retries("eth_gasPrice", lambda: self.w3.eth.gas_price))
            if price > policy.max_fee_cap_wei:
                raise ChainError(
                    f"the chain's gas price {_gwei(price)} is above the fee cap "
                    f"{_gwei(policy.max_fee_cap_wei)} (raise chain_max_fee_gwei to pay it)"
                )
            return {"gasPrice": price}
        base = int(base)
        if base >= policy.max_fee_cap_wei:
            raise ChainError(
                f"the chain's base fee {_gwei(base)} is at or above the fee cap "
                f"{_gwei(policy.max_fee_cap_wei)} (raise chain_max_fee_gwei to pay it)"
            )
        try:
            suggested = int(self.w3.eth.max_priority_fee)
        except Exception as error:  # not every node implements eth_maxPriorityFeePerGas
            log.debug("eth_maxPriorityFeePerGas unavailable (%s): tip %d wei", error, policy.default_tip_wei)
            suggested = policy.default_tip_wei
        tip = max(0, min(suggested, policy.tip_cap_wei))
        max_fee = min(policy.base_fee_multiplier * base + tip, policy.max_fee_cap_wei)
        return {"maxFeePerGas": max_fee, "maxPriorityFeePerGas": min(tip, max_fee)}

    def _nonce(self) -> int:
        pending = int(
            self._with_retries(
                "eth_getTransactionCount",
                lambda: self.w3.eth.get_transaction_count(self.account.address, "pending"),
            )
        )
        if self._next_nonce is not None and pending < self._next_nonce:
            # The node has not caught up with a receipt it already gave us (load-balanced RPC).
            return self._next_nonce
        return pending

    # ------------------------------------------------------------------ writes

    def transact(self, function: str, *args: Any, gas: int | None = None) -> Any:
        """Sign and send one transaction calling `function`, wait for its receipt.

        Returns the receipt. Raises `ChainRevert` with the contract's reason when it reverts."""
        bound = self.contract.functions[function](*args)
        return self._send_and_confirm(function, bound, gas or GAS_LIMITS[function])

    def deploy(self, bytecode: str, *args: Any, abi: list[dict[str, Any]] | None = None) -> str:
        factory = self.w3.eth.contract(abi=abi or self.contract.abi, bytecode=bytecode)
        receipt = self._send_and_confirm("constructor", factory.constructor(*args), GAS_LIMITS["constructor"])
        return receipt["contractAddress"]

    def transfer(self, to: str, value_wei: int) -> Any:
        """Plain value transfer (used to fund accounts on the embedded chain)."""
        fields = {
            "to": self.w3.to_checksum_address(to),
            "value": value_wei,
            "data": b"",
        }
        return self._confirm("transfer", self._sign(fields, TRANSFER_GAS))

    def _send_and_confirm(self, what: str, bound: Any, gas: int) -> Any:
        fields = bound.build_transaction(
            {
                "from": self.account.address,
                "gas": gas,
                **self.fee_fields(),
                "chainId": self.chain_id(),
                "nonce": self._nonce(),
            }
        )
        signed = self._sign(fields, gas)
        return self._confirm(what, signed)

    def _sign(self, fields: dict[str, Any], gas: int) -> _SignedTx:
        tx = dict(fields)
        tx.setdefault("from", self.account.address)
        if "gasPrice" not in tx and "maxFeePerGas" not in tx:
            tx.update(self.fee_fields())
        tx.setdefault("chainId", self.chain_id())
        tx.setdefault("nonce", self._nonce())
        tx["gas"] = gas
        signed = self.account.sign_transaction({k: v for k, v in tx.items() if k != "from"})
        call = {"from": self.account.address, "to": tx.get("to"), "data": tx.get("data", b""), "gas": gas}
        if tx.get("value"):
            call["value"] = tx["value"]
        return _SignedTx(
            raw=bytes(signed.raw_transaction), hash=bytes(signed.hash), nonce=tx["nonce"], call=call
        )

    def _confirm(self, what: str, signed: _SignedTx) -> Any:
        try:
            self._with_retries(f"{what}: send", lambda: self._send_raw(signed))
            receipt = self._with_retries(f"{what}: receipt", lambda: self._wait_receipt(signed))
        except ChainError:
            # The transaction may or may not have been accepted: the chain's pending nonce
            # decides the next one (a dropped transaction's nonce is used again).
            self._next_nonce = None
            raise
        self._next_nonce = signed.nonce + 1
        if receipt["status"] != 1:
            raise ChainRevert(self._replay_reason(what, signed, receipt))
        return receipt

    def _send_raw(self, signed: _SignedTx) -> None:
        from web3.exceptions import Web3RPCError

        signed.send_attempts += 1
        # A send whose answer was lost may still have reached the node: if the transaction is
        # already mined, do not send it again (nodes answer a duplicate with assorted errors).
        if signed.send_attempts > 1 and self._receipt_or_none(signed) is not None:
            return
        try:
            self.w3.eth.send_raw_transaction(signed.raw)
        except Web3RPCError as error:
            message = str(error).lower()
            if "already known" in message or "already imported" in message:
                return  # an earlier attempt got through and is pending
            if "nonce too low" in message:
                if self._receipt_or_none(signed) is not None:
                    return  # it was ours, and it is mined
                raise ChainError(f"nonce {signed.nonce} already used by another transaction") from None
            if "insufficient funds" in message:
                balance = self.w3.eth.get_balance(self.account.address)
                raise ChainError(
                    f"account {self.account.address} cannot pay for gas: balance "
                    f"{balance / 10**18:.6g} ETH; fund it"
                ) from None
            if "underpriced" in message or "fee" in message:
                self._fee_fields = None
            raise

    def _receipt_or_none(self, signed: _SignedTx) -> Any:
        from web3.exceptions import TransactionNotFound

        try:
            return self.w3.eth.get_transaction_receipt(signed.hash)
        except TransactionNotFound:
            return None

    def _wait_receipt(self, signed: _SignedTx) -> Any:
        from web3.exceptions import TimeExhausted

        deadline = time.monotonic() + self.retry.receipt_timeout_s
        while True:
            receipt = self._receipt_or_none(signed)
            if receipt is not None:
                return receipt
            if time.monotonic() >= deadline:
                # Re-broadcast before the next wait: a node that dropped the transaction
                # gets it back, one that has it says "already known".
                self._send_raw(signed)
                raise TimeExhausted(f"transaction {signed.hash.hex()} not mined in time")
            time.sleep(self.retry.receipt_poll_s)

    def _replay_reason(self, what: str, signed: _SignedTx, receipt: Any) -> str:
        """Recover why a mined transaction failed: run the same call against the state
        just before its block (exact under automine: one transaction per block)."""
        block = max(int(receipt["blockNumber"]) - 1, 0)
        try:
            self.w3.eth.call(signed.call, block_identifier=block)
        except Exception as error:
            reason = revert_reason(error)
            if reason is not None:
                return reason
            return f"{what} reverted (replay failed: {_one_line(error)})"
        if int(receipt["gasUsed"]) >= int(signed.call["gas"]):
            return f"{what} ran out of gas (limit {signed.call['gas']})"
        return f"{what} reverted (reason unavailable)"
