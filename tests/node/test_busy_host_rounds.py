"""Rounds on a busy host, on a virtual clock: a round whose training step ran but whose report
missed the round's end is recorded and printed as trained (not abandoned), and a peer whose
generate + train keeps overrunning the round does less of its own work until rounds fit again.

A Peer runs its real round loop on stub ports; the policy advances the clock by the time its
work would take, so a busy host is a policy that takes longer per question and per group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import trio

from protocol.messages import Completion, QuestionGroup, QuestionRef
from swarmp2p.peer import Peer, PeerSettings
from swarmp2p.ports import InboundMessage, RoundInfo
from swarmp2p.round_log import RoundLog
from tests.helpers.inbox import ME, SEED, SWARM, EchoRegistry, pid

ROUND_MS = 10_000


class LoopClock:
    """Virtual time: it moves by each idle wait and by the policy's work (never really sleeps)."""

    def __init__(self) -> None:
        self.now = 0

    def now_ms(self) -> int:
        return self.now

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Callable[[], None]], None]) -> None:
        self.now += max(1, round(seconds * 1000))
        await trio.lowlevel.checkpoint()


class Schedule:
    """Round r runs from r * ROUND_MS to (r + 1) * ROUND_MS; reported rounds are kept."""

    def __init__(self, clock: LoopClock) -> None:
        self.clock = clock
        self.reported: list[int] = []

    async def current(self) -> RoundInfo:
        r = self.clock.now // ROUND_MS
        return RoundInfo(r, 0, 1, (r + 1) * ROUND_MS)

    async def register(self, peer_id: str) -> None:
        pass

    async def submit_reward(self, round: int, stage: int, reward: float, peer_id: str) -> None:
        self.reported.append(round)

    async def submit_winners(self, round: int, winners: Sequence[str], peer_id: str) -> None:
        pass


class TimedWork:
    """A policy whose generation takes `generate_ms` per question and whose training step takes
    `train_ms` per group, on the virtual clock (what a busy host stretches)."""

    def __init__(self, clock: LoopClock, generate_ms: int, train_ms: int) -> None:
        self.clock, self.generate_ms, self.train_ms = clock, generate_ms, train_ms
        self.asked: list[int] = []  # questions per generate call
        self.trained: list[int] = []  # groups per train call

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        self.clock.now += self.generate_ms * len(questions)
        self.asked.append(len(questions))
        return [QuestionGroup(q, (Completion(str(q.index), 1.0), Completion("no", 0.0))) for q in questions]

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        self.clock.now += self.train_ms * len(groups)
        self.trained.append(len(groups))
        return {"updated": 1.0}

    def save(self) -> None:
        pass

    def load(self) -> bool:
        return False


class QuietNetwork:
    bounds_waits = True
    push_max_bytes = 0

    def __init__(self, peer_id: str) -> None:
        self.local_peer_id = peer_id

    def connected_peers(self) -> Sequence[str]:
        return ()

    def subscribe_inline(self, topic: str, handler: Callable[[InboundMessage], None]) -> bool:
        return True

    async def publish(self, topic: str, data: bytes) -> None:
        await trio.lowlevel.checkpoint()

    async def dht_put(self, key: str, value: bytes) -> None:
        await trio.lowlevel.checkpoint()


async def inline(fn: Callable[..., object], *args: object) -> object:
    return fn(*args)


def make_peer(policy: TimedWork, clock: LoopClock, **settings: object) -> tuple[Peer, Schedule]:
    schedule = Schedule(clock)
    peer = Peer(
        PeerSettings(swarm_id=SWARM, seed=SEED, tasks=("echo",), **settings),  # type: ignore[arg-type]
        ME,
        QuietNetwork(pid(ME)),  # type: ignore[arg-type]
        schedule,  # type: ignore[arg-type]
        policy,  # type: ignore[arg-type]
        EchoRegistry(),
        clock,  # type: ignore[arg-type]
        offload=inline,
    )
    return peer, schedule


def run_until(peer: Peer, clock: LoopClock, until_ms: int, *, then: Callable[[], None] | None = None) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer._round_loop)
            while clock.now < until_ms:
                await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_round_trained_after_its_end_is_recorded_and_printed_as_trained_report_late(tmp_path: Path) -> None:
    clock = LoopClock()
    policy = TimedWork(clock, generate_ms=0, train_ms=4_500)  # 2 groups from 6 s: ends at 15 s
    peer, schedule = make_peer(policy, clock, questions_per_round=2, n_local=2, n_external=0)
    run_until(peer, clock, 12_000)
    first = peer.history[0]
    assert first.round == 0 and policy.trained[0] == 2
    assert not first.completed and 0 not in schedule.reported  # the report did miss the round
    assert first.fate == "trained_report_late"
    lines: list[str] = []
    RoundLog(tmp_path / "rounds.jsonl", "me", lambda: (), lines.append)(first)
    assert lines[0].startswith("round 0 (trained, report late: not sent) |")


def test_a_round_reported_after_its_end_says_how_late(tmp_path: Path) -> None:
    clock = LoopClock()
    policy = TimedWork(clock, generate_ms=0, train_ms=100)
    peer, schedule = make_peer(policy, clock, questions_per_round=2, n_local=2, n_external=0)
    run_until(peer, clock, 20_500)  # two rounds on time: the stage length is learned
    policy.train_ms = 5_500  # round 2 trains from 26 s to 37 s: round 3 has too little left
    run_until(peer, clock, 41_000)
    fates = {r.round: r.fate for r in peer.history}
    assert (fates[0], fates[1], fates[2], fates[3]) == ("completed", "completed", "reported_late", "skipped")
    assert 2 in schedule.reported  # the work in hand finished while round 3 was skipped
    lines: list[str] = []
    RoundLog(tmp_path / "rounds.jsonl", "me", lambda: (), lines.append)(peer.history[-1])
    late = next(r for r in peer.history if r.round == 2)
    RoundLog(tmp_path / "rounds.jsonl", "me", lambda: (), lines.append)(late)
    assert lines[-1].startswith("round 2 (reported 7 s late) |")


def test_a_round_overrun_before_training_is_still_abandoned() -> None:
    clock = LoopClock()
    policy = TimedWork(clock, generate_ms=6_000, train_ms=0)  # generation alone outlasts the round
    peer, _ = make_peer(policy, clock, questions_per_round=2, n_local=2, n_external=0)
    run_until(peer, clock, 13_000)
    first = peer.history[0]
    assert (first.round, first.fate, policy.trained) == (0, "abandoned", [])


def test_a_peer_that_keeps_overrunning_does_less_of_its_own_work_and_goes_back_when_rounds_fit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = LoopClock()
    # 4 groups at 1.5 s from the collect deadline (6 s): 12 s, past the 10 s round; half of
    # them (3 s) fits.
    policy = TimedWork(clock, generate_ms=200, train_ms=1_500)
    peer, schedule = make_peer(policy, clock, questions_per_round=4, n_local=4, n_external=0)
    with caplog.at_level(logging.INFO, logger="swarmp2p.peer"):
        run_until(peer, clock, 12 * ROUND_MS)
    busy = [r for r in caplog.messages if r.startswith("busy host:")]
    assert len(busy) == 1  # said once, not every round
    assert "answering 2 of 4 questions and training on 2 local + 0 external groups" in busy[0]
    assert peer.status()["pace"]["level"] == 1 and peer.status()["pace"]["questions"] == 2
    late = [r.round for r in peer.history if r.fate == "trained_report_late"]
    assert late and max(late) < 5  # overruns stop once the peer does half
    settled = [r for r in peer.history if r.round >= 6]
    assert settled and all(r.fate == "completed" for r in settled)
    assert policy.asked[-1] == 2 and policy.trained[-1] == 2
    assert {r.round for r in settled} <= set(schedule.reported)

    policy.generate_ms, policy.train_ms = 50, 200  # the host is idle again
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="swarmp2p.peer"):
        run_until(peer, clock, 20 * ROUND_MS)
    assert [m for m in caplog.messages if m.startswith("rounds fit again")] == [
        "rounds fit again: back to answering 4 of 4 questions and training on 4 local + 0 external groups"
    ]
    assert peer.status()["pace"] == {**peer.status()["pace"], "level": 0, "questions": 4, "since_round": None}
    assert policy.asked[-1] == 4 and policy.trained[-1] == 4
    assert all(r.fate == "completed" for r in peer.history if r.round >= 13)


def test_a_round_that_fits_changes_nothing() -> None:
    clock = LoopClock()
    policy = TimedWork(clock, generate_ms=200, train_ms=500)
    peer, _ = make_peer(policy, clock, questions_per_round=4, n_local=4, n_external=0)
    run_until(peer, clock, 8 * ROUND_MS)
    assert peer.pace.level == 0 and peer.counters["pace_changes"] == 0
    assert set(policy.asked) == {4} and set(policy.trained) == {4}
    assert all(r.fate == "completed" for r in peer.history)


class Oversubscribed(TimedWork):
    """A policy on a host with more runnable threads than cores: on more than one thread its
    work takes `slowdown` times longer (OpenMP threads waiting for each other)."""

    def __init__(self, clock: LoopClock, generate_ms: int, train_ms: int, slowdown: int) -> None:
        super().__init__(clock, generate_ms, train_ms)
        self.base = (generate_ms, train_ms)
        self.slowdown = slowdown
        self.threads = 2
        self.thread_history: list[int] = []

    def compute_threads(self) -> int:
        return self.threads

    def set_compute_threads(self, threads: int) -> None:
        self.threads = threads
        self.thread_history.append(threads)
        factor = self.slowdown if threads > 1 else 1
        self.generate_ms, self.train_ms = self.base[0] * factor, self.base[1] * factor


def test_on_a_busy_host_a_peer_computes_on_one_thread_first_and_keeps_its_full_share(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = LoopClock()
    policy = Oversubscribed(clock, generate_ms=100, train_ms=200, slowdown=10)
    policy.set_compute_threads(2)  # two threads, ten times slower: 8 s of training from 6 s
    peer, _ = make_peer(policy, clock, questions_per_round=4, n_local=4, n_external=0)
    with caplog.at_level(logging.INFO, logger="swarmp2p.peer"):
        run_until(peer, clock, 40 * ROUND_MS)
    busy = [m for m in caplog.messages if m.startswith("busy host:")]
    assert busy[0].startswith("busy host: generate + train overran 2 rounds in a row: from round ")
    assert "computing on 1 of 2 threads, answering 4 of 4 questions" in busy[0]
    assert set(policy.asked) == {4}  # one thread was enough: the share of work never dropped
    # Trying two threads again costs a couple of late rounds, and is tried ever more rarely.
    recent = [r for r in peer.history if r.round >= 20]
    assert sum(r.fate == "completed" for r in recent) >= 0.8 * len(recent)
    assert peer.pace.relapses >= 1 and policy.threads == 1

    policy.slowdown = 1  # the host is idle again: two threads are as fast as one
    policy.set_compute_threads(policy.threads)
    run_until(peer, clock, 80 * ROUND_MS)
    assert peer.pace.level == 0 and policy.threads == 2
    assert all(r.fate == "completed" for r in peer.history if r.round >= 70)


def test_the_node_policy_computes_on_the_threads_asked_for_in_a_worker_that_already_ran() -> None:
    import queue
    import threading

    import torch

    from swarmp2p.round_log import TimedPolicy

    class ThreadsSeen:
        def generate(self, questions: object) -> int:
            return int(torch.get_num_threads())

    started = torch.get_num_threads()
    policy = TimedPolicy(ThreadsSeen())
    jobs: queue.Queue[tuple[Callable[[], object], queue.Queue[object]] | None] = queue.Queue()

    def worker() -> None:  # one long-lived thread, as trio's cached worker thread is
        while (job := jobs.get()) is not None:
            job[1].put(job[0]())

    def in_worker(fn: Callable[[], object]) -> object:
        answer: queue.Queue[object] = queue.Queue()
        jobs.put((fn, answer))
        return answer.get(timeout=10)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        in_worker(lambda: torch.set_num_threads(2))  # the worker computed on 2 threads
        assert in_worker(lambda: policy.generate(())) == 2
        policy.set_compute_threads(1)  # asked from the trio thread
        assert in_worker(lambda: policy.generate(())) == 1
        policy.set_compute_threads(2)
        assert in_worker(lambda: policy.generate(())) == 2
    finally:
        jobs.put(None)
        thread.join()
        torch.set_num_threads(started)


def test_rounds_that_pass_while_the_worker_is_busy_are_recorded_as_missed(tmp_path: Path) -> None:
    """A training step longer than two whole rounds: the rounds it spans are never opened, yet
    each has a record (fate "missed", counted), so that no round is lost without a word."""
    clock = LoopClock()
    policy = TimedWork(clock, generate_ms=0, train_ms=100)
    peer, _ = make_peer(policy, clock, questions_per_round=2, n_local=2, n_external=0)
    run_until(peer, clock, 20_500)  # two rounds on time: the stage length is learned
    policy.train_ms = 13_000  # round 2's step runs from ~26 s to ~52 s: rounds 3 and 4 pass by
    run_until(peer, clock, 72_000)
    fates = {r.round: r.fate for r in peer.history}
    assert all(n in fates for n in range(0, max(fates) + 1)), fates
    assert fates[3] == fates[4] == "missed", fates
    assert peer.counters["rounds_missed"] >= 2
    lines: list[str] = []
    missed = next(r for r in peer.history if r.round == 3)
    RoundLog(tmp_path / "rounds.jsonl", "me", lambda: (), lines.append)(missed)
    assert lines[0].startswith("round 3 (missed: the worker was busy with an earlier round) |"), lines
