"""The round driver (swarmp2p/peer.py) carries out what the core decides: it trains only on the
inbox's training pool, releases announcements heard early, wakes on a Hold and records a
skipped round. Each test fails when the driver drops that duty.

A Peer on stub ports; events are fed by hand, so no round loop and no network run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from protocol import codec
from protocol.admission import Accept, Fetch, job_for
from protocol.messages import (
    Completion,
    FetchRequest,
    FetchResponse,
    QuestionGroup,
    QuestionRef,
    RolloutAnnouncement,
)
from protocol.rounds import CoordinatorSaid, Phase, RolloutsReady, Tick
from swarmp2p.peer import Peer, PeerSettings
from swarmp2p.ports import InboundMessage, RoundInfo
from tests.helpers.inbox import (
    ALICE,
    BOB,
    ME,
    SEED,
    SWARM,
    EchoRegistry,
    announce,
    batch_envelope,
    groups_for,
    pid,
)


class StubNetwork:
    bounds_waits = True
    push_max_bytes = 0

    def __init__(self, peer_id: str) -> None:
        self.local_peer_id = peer_id

    def connected_peers(self) -> Sequence[str]:
        return ()

    def subscribe_inline(self, topic: str, handler: Callable[[InboundMessage], None]) -> bool:
        return True


class StubClock:
    def __init__(self) -> None:
        self.now = 0

    def now_ms(self) -> int:
        return self.now

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Callable[[], None]], None]) -> None:
        await trio.lowlevel.checkpoint()


class RecordingPolicy:
    def __init__(self) -> None:
        self.trained: list[QuestionGroup] = []

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        return [QuestionGroup(q, (Completion(str(q.index), 1.0), Completion("no", 0.0))) for q in questions]

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        self.trained.extend(groups)
        return {}

    def save(self) -> None:
        pass

    def load(self) -> bool:
        return False


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def make_peer(**settings: Any) -> tuple[Peer, RecordingPolicy, StubClock]:
    policy, clock = RecordingPolicy(), StubClock()
    peer = Peer(
        PeerSettings(
            swarm_id=SWARM,
            seed=SEED,
            tasks=("echo",),
            questions_per_round=2,
            n_local=0,
            n_external=8,
            max_groups_per_peer=2,
            **settings,
        ),
        ME,
        StubNetwork(pid(ME)),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # never polled here
        policy,
        EchoRegistry(),
        clock,  # type: ignore[arg-type]
        offload=inline,
    )
    return peer, policy, clock


def open_round(peer: Peer, clock: StubClock, round_number: int) -> None:
    clock.now = round_number * 10_000 + 100
    info = RoundInfo(round_number, 0, 1, (round_number + 1) * 10_000)
    peer._feed(CoordinatorSaid(info.round, info.stage, info.stage_count, info.stage_ends_ms))


def accept(peer: Peer, signer: bytes, round_number: int) -> None:
    envelope = batch_envelope(signer, round_number)
    decision = peer.inbox.heard(pid(signer), announce(signer, envelope, round_number=round_number))
    assert isinstance(decision, Fetch)
    peer.inbox.queued(decision.job)
    assert isinstance(peer.inbox.fetched(decision.job, envelope, direct=True), Accept)


def test_the_driver_trains_only_on_the_pool_without_peers_banned_since() -> None:
    peer, policy, clock = make_peer()
    open_round(peer, clock, 5)
    accept(peer, ALICE, 5)
    accept(peer, BOB, 5)
    peer.scores.ban(pid(ALICE), "equivocation")
    peer.machine.handle(clock.now, RolloutsReady(5))
    peer.machine.handle(clock.now + 10_000, Tick())
    assert peer.machine.phase is Phase.TRAINING
    trio.run(peer._train, 5)
    assert set(policy.trained) == set(groups_for(pid(BOB), 5))


def test_announcements_heard_before_the_round_opened_are_fetched_when_it_does() -> None:
    peer, _, clock = make_peer()
    jobs: list[Any] = []
    peer.fetcher.enqueue = jobs.append  # type: ignore[method-assign]
    open_round(peer, clock, 5)
    envelope = batch_envelope(ALICE, 6)
    peer._on_announcement(InboundMessage("t", pid(ALICE), announce(ALICE, envelope, round_number=6)))
    assert peer.idle._woken  # the swarm moved on: the idle wait ends at once
    assert jobs == []
    open_round(peer, clock, 6)
    trio.run(peer._generate, 6)
    assert [job.sender for job in jobs] == [pid(ALICE)]


def test_a_skipped_round_is_recorded_once() -> None:
    peer, _, clock = make_peer(min_round_remaining=0.5)
    open_round(peer, clock, 0)
    open_round(peer, clock, 1)  # learns the stage length
    clock.now = 2 * 10_000 + 8_000  # 2 s of round 2 left
    for _ in range(2):
        peer._feed(CoordinatorSaid(2, 0, 1, 3 * 10_000))
    assert [(r.round, r.skipped) for r in peer.history if r.skipped] == [(2, True)]
    assert peer.counters["rounds_skipped"] == 1


class LoopClock(StubClock):
    """Virtual time that jumps by each idle wait (the loop never really sleeps)."""

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Callable[[], None]], None]) -> None:
        self.now += max(1, round(seconds * 1000))
        await trio.lowlevel.checkpoint()


class ScheduleStub:
    """Round r runs from r * 10 s to (r + 1) * 10 s; reports are recorded."""

    def __init__(self, clock: StubClock) -> None:
        self.clock = clock
        self.rewards: list[int] = []

    async def current(self) -> RoundInfo:
        r = self.clock.now // 10_000
        return RoundInfo(r, 0, 1, (r + 1) * 10_000)

    async def register(self, peer_id: str) -> None:
        pass

    async def submit_reward(self, round: int, stage: int, reward: float, peer_id: str) -> None:
        self.rewards.append(round)

    async def submit_winners(self, round: int, winners: Sequence[str], peer_id: str) -> None:
        pass


class SlowTrainer(RecordingPolicy):
    def __init__(self, clock: StubClock, train_ms: int) -> None:
        super().__init__()
        self.clock, self.train_ms = clock, train_ms

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        self.clock.now += self.train_ms
        return {}


class QuietNetwork(StubNetwork):
    async def publish(self, topic: str, data: bytes) -> None:
        await trio.lowlevel.checkpoint()

    async def dht_put(self, key: str, value: bytes) -> None:
        await trio.lowlevel.checkpoint()


def test_work_that_outlasts_its_round_is_abandoned_for_the_next_round_not_reported_late() -> None:
    clock = LoopClock()
    coordinator = ScheduleStub(clock)
    policy = SlowTrainer(clock, train_ms=9_000)  # training from 6 s to 15 s: past the round's end
    peer = Peer(
        PeerSettings(
            swarm_id=SWARM, seed=SEED, tasks=("echo",), questions_per_round=2, n_local=2, n_external=0
        ),
        ME,
        QuietNetwork(pid(ME)),  # type: ignore[arg-type]
        coordinator,  # type: ignore[arg-type]
        policy,
        EchoRegistry(),
        clock,  # type: ignore[arg-type]
        offload=inline,
    )

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer._round_loop)
            while clock.now < 12_000:
                await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()

    trio.run(main)
    first = peer.history[0]
    assert (first.round, first.completed) == (0, False)  # abandoned at once when training ended
    assert 0 not in coordinator.rewards  # no late report for a round that is over
    assert peer.machine.round == 1


class FailingNetwork(StubNetwork):
    """Every fetch fails (no answer, no DHT record); records whom it was asked for."""

    def __init__(self, peer_id: str) -> None:
        super().__init__(peer_id)
        self.asked: list[str] = []

    def connected_peers(self) -> Sequence[str]:
        return [f"peer-{i}" for i in range(1000)]

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        from swarmp2p.ports import NetworkError

        self.asked.append(peer_id)
        await trio.lowlevel.checkpoint()
        raise NetworkError("unreachable (test)")

    async def dht_get(self, key: str) -> bytes | None:
        await trio.lowlevel.checkpoint()
        return None


def test_a_failed_sampled_fetch_is_topped_up_from_the_deferred() -> None:
    clock = StubClock()
    network = FailingNetwork(pid(ME))
    peer = Peer(
        PeerSettings(swarm_id=SWARM, seed=SEED, tasks=("echo",), questions_per_round=2, fetch_sample=1),
        ME,
        network,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        RecordingPolicy(),
        EchoRegistry(),
        clock,  # type: ignore[arg-type]
        offload=inline,
    )
    open_round(peer, clock, 5)
    assert peer.inbox.current is not None and peer.inbox.current.fetch_probability == 0.001
    for signer in (ALICE, BOB):
        peer._on_announcement(InboundMessage("t", pid(signer), announce(signer, batch_envelope(signer, 5))))
    assert set(peer.inbox.current.deferred) == {pid(ALICE), pid(BOB)}

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            peer.fetcher.start(nursery)
            peer.fetcher.enqueue(job_for(RolloutAnnouncement(SWARM, 5, 0, "chosen", b"\1" * 32, 2, 100)))
            for _ in range(200):
                await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert network.asked[0] == "chosen"
    assert sorted(network.asked[1:]) == sorted([pid(ALICE), pid(BOB)])  # each failure tops up one


def test_a_request_for_another_peers_batch_is_not_served_ours() -> None:
    peer, _, clock = make_peer()
    open_round(peer, clock, 5)
    envelope = batch_envelope(ME, 5)
    peer.publisher.keep(5, 0, envelope)
    ours = trio.run(peer._serve_fetch, "x", codec.encode(FetchRequest(SWARM, 5, 0, pid(ME))))
    assert codec.decode(ours) == FetchResponse(found=True, envelope=envelope)
    theirs = trio.run(peer._serve_fetch, "x", codec.encode(FetchRequest(SWARM, 5, 0, pid(ALICE))))
    assert codec.decode(theirs) == FetchResponse(found=False, envelope=b"")


def test_only_an_abandoned_rounds_work_is_kept_when_the_next_round_opens() -> None:
    """The work of a round in progress is parked for its record (AbandonRound); a finished
    round's is let go: it holds the round's inbox, O(peers) per peer in a big simulation."""
    peer, _, clock = make_peer()
    open_round(peer, clock, 5)
    fifth = peer._work
    open_round(peer, clock, 6)  # round 5 still generating: abandoned, kept for its record
    assert fifth is not None and peer._abandoned is fifth
    peer._abandon(5)
    assert [(r.round, r.completed) for r in peer.history] == [(5, False)]
    peer.machine.phase = Phase.IDLE  # round 6 finished (reported)
    open_round(peer, clock, 7)
    assert peer._abandoned is None
