"""`ChainCoordinator`: the CoordinatorPort over the SwarmCoordinator contract, for trio code.

Every operation runs the synchronous `ContractClient` on one serialized worker thread
(`trio.to_thread.run_sync` under a `trio.CapacityLimiter(1)`; coordinators sharing an embedded
chain share its limiter, since py-evm is not thread-safe). Threads are never abandoned on
cancellation: an abandoned thread would keep touching the chain after the limiter was
released. Each operation is bounded by the client's retry policy instead.

Methods raise only `CoordinatorError` subclasses (see `swarmp2p.chain.errors`) and are safe
to retry: registering a peer id we already own, or re-submitting the same reward or the same
winners, succeeds without a second transaction taking effect.

Rewards cross the port as floats in [0, 1] and are stored on-chain as integers scaled by
REWARD_SCALE = 10**6 (round half to even of reward * 10**6).

Submissions are counted (`status()`): submitted, already on chain (a retry of our own), late
(the endpoint failed and by the time we knew, the chain's stage had moved on: a counted skip,
not an error) and failed. A run of `failing_after` failures in a row is said ONCE, in one
ERROR line naming the last reason; the first success after it says so once too. With
`tolerant=True` (what the node uses) failed submissions are only counted and logged that way,
not raised, so the round loop does not log a warning every round.

Over 400 lines: the CoordinatorPort, its error mapping and the stage manager that
advances the contract share the one serialized worker and its retry policy.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from protocol.limits import MAX_WINNERS
from swarmp2p.chain import REWARD_SCALE
from swarmp2p.chain.client import ContractClient, FeePolicy, RetryPolicy
from swarmp2p.chain.errors import (
    ChainConfigError,
    ChainError,
    ChainInputError,
    ChainRevert,
    ChainUnavailable,
)
from swarmp2p.clocks import RealClock
from swarmp2p.ports import Clock, CoordinatorError, RoundInfo

log = logging.getLogger(__name__)

MAX_PEER_ID_BYTES = 128

T = TypeVar("T")


@attrs.frozen
class Standing:
    peer_id: str
    score: float  # reward leaderboard: total reward as a float; wins leaderboard: vote count


@attrs.frozen
class Leaderboard:
    by_reward: tuple[Standing, ...]
    by_wins: tuple[Standing, ...]


def reward_to_fixed(reward: float) -> int:
    if not isinstance(reward, (int, float)) or isinstance(reward, bool) or not math.isfinite(reward):
        raise ChainInputError(f"reward must be a finite number, got {reward!r}")
    if not 0.0 <= reward <= 1.0:
        raise ChainInputError(f"reward must be in [0, 1], got {reward}")
    return round(reward * REWARD_SCALE)


def fixed_to_reward(value: int) -> float:
    return value / REWARD_SCALE


def check_peer_id(peer_id: str) -> str:
    if not isinstance(peer_id, str) or not peer_id:
        raise ChainInputError(f"peer id must be a non-empty string, got {peer_id!r}")
    if len(peer_id.encode()) > MAX_PEER_ID_BYTES:
        raise ChainInputError(f"peer id longer than {MAX_PEER_ID_BYTES} bytes: {peer_id[:20]}...")
    return peer_id


def check_round(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**256:
        raise ChainInputError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def vote_digest(winners: Sequence[str]) -> bytes:
    """What the contract stores for a vote: keccak256(abi_encode(bytes32[] of keccak256(winner)))."""
    from eth_abi import encode
    from eth_utils import keccak

    return keccak(encode(["bytes32[]"], [[keccak(text=w) for w in winners]]))


_OWN_EARLIER = ("reward already submitted with a different", "winners already submitted with a different")


@attrs.define
class SubmissionHealth:
    """What happened to this node's reward and winner submissions (shown in the node status)."""

    submitted: int = 0
    already_on_chain: int = 0  # our own earlier submission was there (a retry, or before a restart)
    late_skipped: int = 0  # failed transiently after the chain's stage had moved on
    failed: int = 0
    failing_in_a_row: int = 0
    last_error: str = ""

    def counters(self) -> dict[str, int]:
        return {
            f"chain_{name}": value for name, value in attrs.asdict(self).items() if isinstance(value, int)
        }


class ChainCoordinator:
    """CoordinatorPort backed by the contract. Build it with `open_coordinator`."""

    def __init__(
        self,
        client: ContractClient,
        *,
        clock: Clock,
        limiter: trio.CapacityLimiter | None = None,
        embedded: Any = None,
        default_stage_seconds: float = 30.0,
        tolerant: bool = False,
        failing_after: int = 3,
    ) -> None:
        self.client = client
        self.clock = clock
        self.embedded = embedded
        self.tolerant = tolerant
        self.failing_after = failing_after
        self.health = SubmissionHealth()
        self._limiter = limiter
        self._default_stage_ms = int(default_stage_seconds * 1000)
        self._code_checked = embedded is not None

    def status(self) -> dict[str, Any]:
        """Submission counts and the chain this node transacts on, for the node's status."""
        return {
            "rpc": getattr(getattr(self.client.w3, "provider", None), "endpoint_uri", None) or "embedded",
            "contract": self.contract_address,
            "account": self.address,
            **attrs.asdict(self.health),
        }

    async def _submission(
        self, round: int, stage: int | None, operation: Callable[..., Any], *args: Any
    ) -> None:
        """Run one submission with the accounting described in the module docstring."""
        health = self.health
        try:
            already = await self._run(operation, *args)
        except ChainInputError:
            raise  # our own bug, not the chain's
        except ChainError as error:
            if isinstance(error, ChainRevert) and error.reason.startswith(_OWN_EARLIER):
                # Only we own the peer id: this is our own earlier submission (made before a
                # restart, say) with another value. The chain keeps the first; not a failure.
                health.already_on_chain += 1
                log.info("chain: round %d: %s; the chain keeps the first", round, error.reason)
                if self.tolerant:
                    return
                raise
            if isinstance(error, ChainUnavailable) and await self._moved_on(round, stage):
                health.late_skipped += 1
                log.info("chain: round %d submission skipped, the stage moved on: %s", round, error.reason)
                return
            health.failed += 1
            health.failing_in_a_row += 1
            health.last_error = error.reason
            if health.failing_in_a_row == self.failing_after:
                log.error(
                    "chain: %d submissions in a row failed (last: %s); this node keeps training, but "
                    "its rewards and votes are not on the contract until that is fixed (status: chain)",
                    health.failing_in_a_row,
                    error.reason,
                )
            else:
                log.debug("chain: submission for round %d failed: %s", round, error.reason)
            if self.tolerant:
                return
            raise
        if health.failing_in_a_row >= self.failing_after:
            log.warning("chain: submissions work again after %d failures", health.failing_in_a_row)
        health.failing_in_a_row = 0
        if already:
            health.already_on_chain += 1
        else:
            health.submitted += 1

    async def _moved_on(self, round: int, stage: int | None) -> bool:
        try:
            info = await self.current()
        except CoordinatorError:
            return False
        if stage is None:
            return info.round > round
        return (info.round, info.stage) > (round, stage)

    @property
    def address(self) -> str:
        """The Ethereum address this coordinator transacts from."""
        return self.client.account.address

    @property
    def contract_address(self) -> str:
        return self.client.address

    async def _run(self, operation: Callable[..., T], *args: Any) -> T:
        # The limiter is created lazily: a trio.CapacityLimiter must be made inside trio.run.
        if self._limiter is None:
            self._limiter = self.embedded.limiter if self.embedded is not None else trio.CapacityLimiter(1)
        now_ms = self.clock.now_ms()
        try:
            return await trio.to_thread.run_sync(
                self._in_worker, now_ms, operation, *args, limiter=self._limiter
            )
        except CoordinatorError:
            raise
        except Exception as error:  # a bug or library surprise must not kill the node's training
            raise ChainError(f"unexpected {type(error).__name__}: {error}") from error

    def _in_worker(self, now_ms: int, operation: Callable[..., T], *args: Any) -> T:
        if not self._code_checked:
            code = self.client._with_retries(
                "eth_getCode", lambda: self.client.w3.eth.get_code(self.client.address)
            )
            if len(code) == 0:
                raise ChainConfigError(f"no contract deployed at {self.client.address}")
            self._code_checked = True
        if self.embedded is not None:
            self.embedded.catch_up(now_ms)
        return operation(*args)

    # ------------------------------------------------------------------ CoordinatorPort

    async def current(self) -> RoundInfo:
        return await self._run(self._current)

    def _current(self) -> RoundInfo:
        round_, stage, stage_count, started_at_s, duration_s = self.client.call("roundInfo")
        if self.embedded is not None:
            ends_ms = self.embedded.schedule.stage_ends_ms(round_, stage)
            stage_ms = self.embedded.schedule.stage_ms
        else:
            stage_ms = duration_s * 1000  # the operator's hint: 0 when it published none
            ends_ms = started_at_s * 1000 + (stage_ms or self._default_stage_ms)
        return RoundInfo(round_, stage, stage_count, ends_ms, stage_ms)

    async def register(self, peer_id: str) -> None:
        await self._run(self._register, check_peer_id(peer_id))

    def _register(self, peer_id: str) -> None:
        try:
            self.client.transact("registerPeer", peer_id)
        except ChainRevert as error:
            if error.reason != "peer id already registered":
                raise

    async def submit_reward(self, round: int, stage: int, reward: float, peer_id: str) -> None:
        fixed = reward_to_fixed(reward)
        await self._submission(
            round,
            stage,
            self._submit_reward,
            check_round(round, "round"),
            check_round(stage, "stage"),
            fixed,
            check_peer_id(peer_id),
        )

    def _submit_reward(self, round: int, stage: int, fixed: int, peer_id: str) -> bool:
        """True when the same reward was already on the chain (nothing new sent)."""
        try:
            self.client.transact("submitReward", round, stage, fixed, peer_id)
            return False
        except ChainRevert as error:
            if error.reason != "reward already submitted":
                raise
            # Only the owner of the peer id (us) can have submitted it: an earlier attempt
            # of this very call got through. Same value: done. Different value: a real conflict.
            stored = self.client.call("stageReward", round, stage, peer_id)
            if stored != fixed:
                raise ChainRevert(
                    f"reward already submitted with a different value ({fixed_to_reward(stored)})"
                ) from None
            return True

    async def submit_winners(self, round: int, winners: Sequence[str], peer_id: str) -> None:
        """Vote for `winners` of `round`. Winners the contract does not know (unregistered
        peer ids) are dropped with a log line rather than failing the whole vote; if none
        remain, nothing is sent."""
        winners = [check_peer_id(w) for w in winners]
        if len(set(winners)) != len(winners):
            raise ChainInputError("duplicate winner")
        if len(winners) > MAX_WINNERS:
            raise ChainInputError(f"at most {MAX_WINNERS} winners, got {len(winners)}")
        await self._submission(
            round, None, self._submit_winners, check_round(round, "round"), winners, check_peer_id(peer_id)
        )

    def _submit_winners(self, round: int, winners: list[str], peer_id: str) -> bool:
        if not winners:
            return True
        registered = self.client.call("areRegistered", winners)
        known = [w for w, ok in zip(winners, registered, strict=True) if ok]
        if len(known) != len(winners):
            log.info(
                "dropping %d unregistered winner(s) from the round %d vote", len(winners) - len(known), round
            )
        if not known:
            return True
        try:
            self.client.transact("submitWinners", round, known, peer_id)
            return False
        except ChainRevert as error:
            if error.reason != "winners already submitted":
                raise
            if bytes(self.client.call("voteDigest", round, peer_id)) != vote_digest(known):
                raise ChainRevert("winners already submitted with a different list") from None
            return True

    # ------------------------------------------------------------------ reads beyond the port

    async def leaderboard(self) -> Leaderboard:
        return await self._run(self._leaderboard)

    def _leaderboard(self) -> Leaderboard:
        by_reward = tuple(Standing(p, fixed_to_reward(s)) for p, s in self.client.call("rewardLeaderboard"))
        by_wins = tuple(Standing(p, float(s)) for p, s in self.client.call("winnerLeaderboard"))
        return Leaderboard(by_reward=by_reward, by_wins=by_wins)

    async def total_reward(self, peer_id: str) -> float:
        value = await self._run(self.client.call, "totalReward", check_peer_id(peer_id))
        return fixed_to_reward(value)

    async def bootnodes(self) -> list[str]:
        return list(await self._run(self.client.call, "getBootnodes"))

    async def in_worker(self, operation: Callable[..., T], *args: Any) -> T:
        """Run a synchronous `operation` (given `self.client`, say) on the serialized worker,
        with the same error mapping: for reads and transactions beyond the port."""
        return await self._run(operation, *args)


def open_coordinator(
    rpc_url: str | None = None,
    contract: str | None = None,
    key_file: Path | str | None = None,
    *,
    clock: Clock | None = None,
    stage_count: int = 2,
    stage_seconds: float = 30.0,
    embedded: Any = None,
    account_name: str | None = None,
    retry: RetryPolicy | None = None,
    fees: FeePolicy | None = None,
    tolerant: bool = False,
) -> ChainCoordinator:
    """Build a ChainCoordinator.

    - `rpc_url` given: a real chain. `contract` (address) and `key_file` (hex private key,
      mode 0600) are required. No network I/O happens here: the first call checks that the
      contract exists, so a node down at startup is a retryable error, not a crash.
      `stage_seconds` is used for `stage_ends_ms` only if the contract publishes no duration.
    - `rpc_url` None: the embedded in-process chain. Pass `embedded` (an EmbeddedChain) to
      share one chain among many coordinators (the simulator); otherwise a fresh chain is
      made whose schedule starts now, with `stage_count` stages of `stage_seconds`. The
      account comes from `key_file` if given, else is derived from `account_name`.
    - `fees`: caps on what a transaction pays (a real chain; default `FeePolicy()`).
    - `tolerant`: count and log failed submissions instead of raising them (the node).

    Raises ChainConfigError (one-line reason) for bad configuration.
    """
    clock = clock or RealClock()
    if rpc_url is None:
        from protocol.stage_schedule import StageSchedule
        from swarmp2p.chain.embedded import EmbeddedChain

        if contract is not None:
            raise ChainConfigError("a contract address needs an RPC URL (--chain-rpc)")
        if embedded is None:
            try:
                schedule = StageSchedule(clock.now_ms(), int(stage_seconds * 1000), stage_count)
            except ValueError as error:
                raise ChainConfigError(str(error)) from None
            embedded = EmbeddedChain(schedule)
        if key_file is not None:
            from swarmp2p.chain.keys import load_key_file

            account = load_key_file(Path(key_file))
            embedded.fund(account.address)
        else:
            account = embedded.account_for(account_name or f"node-{time.time_ns()}")
        return ChainCoordinator(
            embedded.client(account),
            clock=clock,
            embedded=embedded,
            default_stage_seconds=stage_seconds,
            tolerant=tolerant,
        )

    if contract is None:
        raise ChainConfigError("--chain-rpc needs a contract address (--contract)")
    if key_file is None:
        raise ChainConfigError("--chain-rpc needs an Ethereum key file (--eth-key)")
    from web3 import HTTPProvider, Web3

    from swarmp2p.chain.artifact import load_artifact
    from swarmp2p.chain.keys import load_key_file

    if not rpc_url.startswith(("http://", "https://")):
        raise ChainConfigError(f"RPC URL must be http:// or https://, got {rpc_url!r}")
    if not Web3.is_address(contract):
        raise ChainConfigError(f"not an Ethereum address: {contract!r}")
    account = load_key_file(Path(key_file))
    w3 = Web3(HTTPProvider(rpc_url, request_kwargs={"timeout": 10}))
    client = ContractClient(w3, contract, load_artifact().abi, account, retry=retry, fees=fees)
    return ChainCoordinator(client, clock=clock, default_stage_seconds=stage_seconds, tolerant=tolerant)
