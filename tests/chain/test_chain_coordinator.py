"""ChainCoordinator (the CoordinatorPort over the contract) on the embedded chain, plus the
client's error mapping, retries, key files and configuration errors."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import trio
from eth_tester.exceptions import TransactionFailed
from web3 import EthereumTesterProvider, Web3
from web3.exceptions import ContractCustomError, ContractLogicError, TimeExhausted, Web3RPCError

from protocol.stage_schedule import StageSchedule
from swarmp2p.chain.client import ContractClient, RetryPolicy, is_transient, revert_reason
from swarmp2p.chain.coordinator import ChainCoordinator, open_coordinator, reward_to_fixed
from swarmp2p.chain.embedded import EmbeddedChain, run_stage_manager
from swarmp2p.chain.errors import (
    ChainConfigError,
    ChainError,
    ChainInputError,
    ChainRevert,
    ChainUnavailable,
)
from swarmp2p.chain.keys import load_key_file, write_key_file
from swarmp2p.ports import CoordinatorError, RoundInfo

STAGE_MS = 10_000


class FakeClock:
    def __init__(self) -> None:
        self.ms = 0

    def now_ms(self) -> int:
        return self.ms


@pytest.fixture(scope="module")
def base() -> Iterator[tuple[EmbeddedChain, Any]]:
    chain = EmbeddedChain(StageSchedule(genesis_ms=0, stage_ms=STAGE_MS, stage_count=2))
    for name in ("a", "b"):
        chain.account_for(name)
    yield chain, chain.take_snapshot()


@pytest.fixture
def chain(base: tuple[EmbeddedChain, Any]) -> EmbeddedChain:
    embedded, snapshot = base
    embedded.revert_to_snapshot(snapshot)
    return embedded


def coordinators(chain: EmbeddedChain, clock: FakeClock) -> tuple[ChainCoordinator, ChainCoordinator]:
    return (
        open_coordinator(embedded=chain, account_name="a", clock=clock),
        open_coordinator(embedded=chain, account_name="b", clock=clock),
    )


def test_current_follows_the_schedule(chain: EmbeddedChain) -> None:
    clock = FakeClock()
    a, _ = coordinators(chain, clock)

    async def main() -> list[RoundInfo]:
        seen = [await a.current()]
        clock.ms = 3 * STAGE_MS + 5  # three stages later: round 1, stage 1
        seen.append(await a.current())
        clock.ms = 3 * STAGE_MS + 9  # same stage: no transaction
        seen.append(await a.current())
        return seen

    before = chain.stage_advances
    seen = trio.run(main)
    assert seen == [
        RoundInfo(round=0, stage=0, stage_count=2, stage_ends_ms=STAGE_MS, stage_ms=STAGE_MS),
        RoundInfo(round=1, stage=1, stage_count=2, stage_ends_ms=4 * STAGE_MS, stage_ms=STAGE_MS),
        RoundInfo(round=1, stage=1, stage_count=2, stage_ends_ms=4 * STAGE_MS, stage_ms=STAGE_MS),
    ]
    assert chain.stage_advances - before == 3  # one transaction per stage, never skipped


def test_register_is_idempotent_and_exclusive(chain: EmbeddedChain) -> None:
    a, b = coordinators(chain, FakeClock())

    async def main() -> None:
        await a.register("QmA")
        await a.register("QmA")  # ours already: fine
        with pytest.raises(ChainRevert, match="peer id owned by another address"):
            await b.register("QmA")

    trio.run(main)
    assert a.client.call("peerCount") == 1


def test_submit_reward_fixed_point_and_retry_safety(chain: EmbeddedChain) -> None:
    a, b = coordinators(chain, FakeClock())

    async def main() -> float:
        await a.register("QmA")
        await a.submit_reward(0, 0, 0.1234567, "QmA")
        await a.submit_reward(0, 0, 0.1234567, "QmA")  # a retry of the same call: no-op
        with pytest.raises(ChainRevert, match="different value"):
            await a.submit_reward(0, 0, 0.5, "QmA")
        with pytest.raises(ChainRevert, match="sender does not own peer id"):
            await b.submit_reward(0, 0, 0.5, "QmA")
        with pytest.raises(ChainRevert, match="round in the future"):
            await a.submit_reward(1, 0, 0.5, "QmA")
        return await a.total_reward("QmA")

    assert trio.run(main) == 0.123457  # stored as round(0.1234567 * 10**6) = 123457
    assert a.client.call("submissionCount", 0, 0) == 1


@pytest.mark.parametrize("reward", [math.nan, math.inf, -0.01, 1.0001, True, "0.5"])
def test_bad_rewards_are_refused_before_the_chain(chain: EmbeddedChain, reward: Any) -> None:
    a, _ = coordinators(chain, FakeClock())
    block = chain.w3.eth.block_number
    with pytest.raises(ChainInputError):
        trio.run(a.submit_reward, 0, 0, reward, "QmA")
    assert chain.w3.eth.block_number == block


@pytest.mark.parametrize(
    ("call", "args"),
    [
        ("register", ("",)),
        ("register", ("Q" * 129,)),
        ("register", ("é" * 65,)),  # 130 bytes of UTF-8: String[128] counts bytes
        ("submit_reward", (-1, 0, 0.5, "QmA")),
        ("submit_winners", (0, ["QmB", "QmB"], "QmA")),
        ("submit_winners", (0, [f"Qm{i}" for i in range(33)], "QmA")),
        ("submit_winners", (0, ["QmB"], "Q" * 129)),
    ],
)
def test_bad_arguments_are_refused(chain: EmbeddedChain, call: str, args: tuple[Any, ...]) -> None:
    a, _ = coordinators(chain, FakeClock())
    with pytest.raises(ChainInputError):
        trio.run(getattr(a, call), *args)


def test_submit_winners_drops_unregistered_and_is_retry_safe(chain: EmbeddedChain) -> None:
    a, b = coordinators(chain, FakeClock())

    async def main() -> None:
        await a.register("QmA")
        await b.register("QmB")
        await a.submit_winners(0, ["QmB", "QmGhost", "QmA"], "QmA")
        await a.submit_winners(0, ["QmB", "QmGhost", "QmA"], "QmA")  # retry: same vote, no-op
        with pytest.raises(ChainRevert, match="different list"):
            await a.submit_winners(0, ["QmA", "QmB"], "QmA")
        await b.submit_winners(0, ["QmGhost"], "QmB")  # nobody registered: nothing sent

    trio.run(main)
    assert a.client.call("roundVotes", 0, "QmB") == 1
    assert a.client.call("totalWins", "QmA") == 1
    assert a.client.call("hasSubmittedWinners", 0, "QmB") is False
    board = trio.run(a.leaderboard)
    assert [(s.peer_id, s.score) for s in board.by_wins] == [("QmB", 1.0), ("QmA", 1.0)]


def test_leaderboard_and_bootnodes_views(chain: EmbeddedChain) -> None:
    a, b = coordinators(chain, FakeClock())
    chain.manager.transact("addBootnodes", ["/ip4/127.0.0.1/tcp/4001"])

    async def main() -> Any:
        await a.register("QmA")
        await b.register("QmB")
        await a.submit_reward(0, 0, 0.25, "QmA")
        await b.submit_reward(0, 0, 0.75, "QmB")
        return await a.leaderboard(), await b.bootnodes()

    board, bootnodes = trio.run(main)
    assert [(s.peer_id, s.score) for s in board.by_reward] == [("QmB", 0.75), ("QmA", 0.25)]
    assert bootnodes == ["/ip4/127.0.0.1/tcp/4001"]


def test_many_coordinators_share_one_serialized_chain(chain: EmbeddedChain) -> None:
    """Concurrent trio tasks on one embedded chain: the shared limiter serializes them."""
    clock = FakeClock()
    peers = [open_coordinator(embedded=chain, account_name=f"p{i}", clock=clock) for i in range(4)]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i, peer in enumerate(peers):
                nursery.start_soon(peer.register, f"QmP{i}")
        async with trio.open_nursery() as nursery:
            for i, peer in enumerate(peers):
                nursery.start_soon(peer.submit_reward, 0, 0, i / 4, f"QmP{i}")

    trio.run(main)
    assert chain.manager.call("submissionCount", 0, 0) == 4


def test_stage_manager_advances_on_schedule_in_real_time() -> None:
    clock = type("Wall", (), {"now_ms": staticmethod(lambda: int(time.time() * 1000))})()
    chain = EmbeddedChain(StageSchedule(genesis_ms=clock.now_ms(), stage_ms=150, stage_count=2))

    async def main() -> tuple[int, int]:
        with trio.move_on_after(1.0):
            await run_stage_manager(chain, clock)
        return chain.schedule.position(clock.now_ms())

    expected = trio.run(main)
    round_, stage, *_ = chain.manager.call("roundInfo")
    behind = chain.schedule.stages_between((round_, stage), expected)
    assert expected >= (2, 0)  # ~6 stages of 150 ms went by
    assert behind <= 1  # at most the boundary that passed while we were cancelling


# ---------------------------------------------------------------- error mapping and retries


def test_revert_reason_mapping() -> None:
    assert revert_reason(TransactionFailed("execution reverted: only owner")) == "only owner"
    assert revert_reason(TransactionFailed("execution reverted: b''")) == "execution reverted (no reason)"
    assert revert_reason(ContractLogicError("execution reverted: invalid stage")) == "invalid stage"
    assert revert_reason(ContractCustomError("0x12345678", data="0x12345678")).startswith("custom error")
    assert revert_reason(ValueError("nope")) is None


def test_transient_classification() -> None:
    assert is_transient(requests.ConnectionError("refused"))
    assert is_transient(TimeExhausted("slow"))
    response = requests.Response()
    response.status_code = 503
    assert is_transient(requests.HTTPError(response=response))
    response.status_code = 400
    assert not is_transient(requests.HTTPError(response=response))
    assert not is_transient(Web3RPCError("insufficient funds for gas"))
    assert not is_transient(ValueError("bug"))


class FlakyProvider(EthereumTesterProvider):
    """Fails the next `failures[method]` requests of a method, before or after executing it."""

    def __init__(self, tester: Any, *, after: bool = False) -> None:
        super().__init__(tester)
        self.failures: dict[str, int] = {}
        self.after = after

    def make_request(self, method: Any, params: Any) -> Any:
        if self.failures.get(method, 0) > 0:
            self.failures[method] -= 1
            if self.after:
                super().make_request(method, params)  # it happened, but the answer is lost
            raise requests.ConnectionError(f"injected failure of {method}")
        return super().make_request(method, params)


@pytest.mark.parametrize("after", [False, True])
def test_transient_send_failures_are_retried_without_double_sending(
    chain: EmbeddedChain, after: bool
) -> None:
    provider = FlakyProvider(chain.tester, after=after)
    w3 = Web3(provider)
    sleeps: list[float] = []
    client = ContractClient(
        w3,
        chain.address,
        chain.artifact.abi,
        chain.account_for("a"),
        retry=RetryPolicy(attempts=4, initial_backoff_s=0.1),
        sleep=sleeps.append,
    )
    provider.failures["eth_sendRawTransaction"] = 2
    client.transact("registerPeer", "QmFlaky")
    # A send that got through (answer lost) is found by its receipt and not sent again.
    assert sleeps == ([0.1] if after else [0.1, 0.2])
    assert client.call("peerCount") == 1
    client.transact("registerPeer", "QmNext")  # the nonce stayed in step
    assert client.call("peerCount") == 2


def test_persistent_failure_becomes_chain_unavailable(chain: EmbeddedChain) -> None:
    provider = FlakyProvider(chain.tester)
    sleeps: list[float] = []
    client = ContractClient(
        Web3(provider),
        chain.address,
        chain.artifact.abi,
        chain.account_for("a"),
        retry=RetryPolicy(attempts=3, initial_backoff_s=1.0, max_backoff_s=1.5),
        sleep=sleeps.append,
    )
    provider.failures["eth_call"] = 10
    with pytest.raises(ChainUnavailable, match="after 3 attempts"):
        client.call("peerCount")
    assert sleeps == [1.0, 1.5]
    provider.failures.clear()
    assert client.call("peerCount") == 0


def test_unreachable_rpc_is_a_retryable_error_not_a_crash(tmp_path: Path) -> None:
    key = tmp_path / "eth.key"
    write_key_file(key, b"\x11" * 32)
    with trio_socket_port() as port:
        coordinator = open_coordinator(
            f"http://127.0.0.1:{port}",
            "0x" + "ab" * 20,
            key,
            retry=RetryPolicy(attempts=2, initial_backoff_s=0.01),
        )
        with pytest.raises(ChainUnavailable) as caught:
            trio.run(coordinator.current)
    assert isinstance(caught.value, CoordinatorError)
    assert "\n" not in caught.value.reason


class trio_socket_port:
    """A loopback port that nothing listens on (bound, never listening)."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return self.sock.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def test_unexpected_errors_are_wrapped(chain: EmbeddedChain) -> None:
    a, _ = coordinators(chain, FakeClock())

    def boom() -> None:
        raise KeyError("surprise")

    with pytest.raises(ChainError, match="unexpected KeyError"):
        trio.run(a._run, boom)


# ---------------------------------------------------------------- key files and configuration


def test_key_files(tmp_path: Path) -> None:
    path = tmp_path / "eth.key"
    write_key_file(path, bytes(range(1, 33)))
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert load_key_file(path).key == bytes(range(1, 33))
    with pytest.raises(FileExistsError):
        write_key_file(path, b"\x01" * 32)
    os.chmod(path, 0o644)
    with pytest.raises(ChainConfigError, match="chmod 600"):
        load_key_file(path)
    with pytest.raises(ChainConfigError, match="not found"):
        load_key_file(tmp_path / "missing.key")
    bad = tmp_path / "bad.key"
    bad.write_text("0x" + "zz" * 32)
    bad.chmod(0o600)
    with pytest.raises(ChainConfigError, match="valid hex"):
        load_key_file(bad)
    bad.write_text("0x1234")
    with pytest.raises(ChainConfigError, match="32-byte"):
        load_key_file(bad)


def test_open_coordinator_configuration_errors(tmp_path: Path) -> None:
    key = tmp_path / "eth.key"
    write_key_file(key, b"\x22" * 32)
    address = "0x" + "ab" * 20
    cases = [
        (dict(rpc_url=None, contract=address), "needs an RPC URL"),
        (dict(rpc_url="http://127.0.0.1:1", contract=None, key_file=key), "needs a contract"),
        (dict(rpc_url="http://127.0.0.1:1", contract=address, key_file=None), "key file"),
        (dict(rpc_url="ftp://x", contract=address, key_file=key), "http"),
        (dict(rpc_url="http://127.0.0.1:1", contract="0x1234", key_file=key), "not an Ethereum address"),
        (dict(rpc_url="http://127.0.0.1:1", contract=address, key_file=tmp_path / "no.key"), "not found"),
        (dict(rpc_url=None, stage_seconds=0), "stage_ms"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ChainConfigError, match=message):
            open_coordinator(**kwargs)


def test_embedded_coordinator_with_a_key_file(tmp_path: Path, chain: EmbeddedChain) -> None:
    key = tmp_path / "eth.key"
    write_key_file(key, b"\x33" * 32)
    coordinator = open_coordinator(key_file=key, embedded=chain, clock=FakeClock())
    trio.run(coordinator.register, "QmKeyed")
    assert chain.manager.call("peerOwner", "QmKeyed") == load_key_file(key).address


def test_reward_fixed_point() -> None:
    assert reward_to_fixed(0.0) == 0
    assert reward_to_fixed(1.0) == 10**6
    assert reward_to_fixed(0.5) == 500_000
    assert reward_to_fixed(1e-7) == 0
