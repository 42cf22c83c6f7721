"""The Peer's round timing: announce and DHT put run together, and a peer that falls behind
mid-run skips a round it could only start too late instead of publishing after everyone's
collect deadline. Real Peers on the simulator's in-memory network, on virtual time."""

from __future__ import annotations

import hashlib
from typing import Any

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from protocol.envelope import open_envelope, peer_id_from_seed
from protocol.messages import RolloutAnnouncement, SwarmSchedule
from simulator.network import LinkModel, SimWorld
from simulator.policy import CheckpointStore, SimPolicy
from simulator.registry import SimTaskRegistry
from swarmp2p.clocks import TrioClock
from swarmp2p.peer import Peer, PeerSettings, learn_stage_ms, too_late_to_start
from swarmp2p.ports import NetworkError, RoundInfo
from swarmp2p.round_pace import GENERATIONS_KEPT
from swarmp2p.schedule import ScheduleCoordinator

ROUND_MS = 10_000
SWARM = "t"
COLLECT_FRACTION = 0.6  # PeerSettings' default: on-time peers stop collecting 6 s into a round


def seed_of(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


class WatchedPort:
    """A simulator network port that records announcements and DHT puts (virtual ms), with
    optional extra latency or failure on either."""

    def __init__(self, inner: Any, now_ms: Any) -> None:
        self._inner = inner
        self._now_ms = now_ms
        self.events: list[tuple[str, int, int]] = []  # (what, round, virtual ms)
        self.publish_delay_s = 0.0
        self.put_delay_s = 0.0
        self.fail_publish = False
        self.fail_put = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def publish(self, topic: str, data: bytes) -> None:
        message = open_envelope(data).message
        assert isinstance(message, RolloutAnnouncement)
        self.events.append(("announce_start", message.round, self._now_ms()))
        await trio.sleep(self.publish_delay_s)
        if self.fail_publish:
            raise NetworkError("publish refused (test)")
        await self._inner.publish(topic, data)
        self.events.append(("announce_end", message.round, self._now_ms()))

    async def dht_put(self, key: str, value: bytes) -> None:
        round_number = int(key.split("/")[3])
        self.events.append(("put_start", round_number, self._now_ms()))
        await trio.sleep(self.put_delay_s)
        if self.fail_put:
            raise NetworkError("DHT unreachable (test)")
        await self._inner.dht_put(key, value)
        self.events.append(("put_end", round_number, self._now_ms()))


class Swarm:
    """`count` honest peers; `extra_train_s[i]` (`extra_generate_s[i]`) virtual seconds added
    to peer i's training (generation): to every one, or a list of them, one per call in turn
    (none once the list is used up)."""

    def __init__(
        self,
        count: int,
        extra_train_s: dict[int, float] | None = None,
        extra_generate_s: dict[int, float | list[float]] | None = None,
    ) -> None:
        self.clock = TrioClock(0)
        self.coordinator = ScheduleCoordinator(SwarmSchedule(SWARM, 0, ROUND_MS, 1, 5), self.clock)
        self.world = SimWorld(
            LinkModel(), seed=1, now_ms=self.clock.now_ms, round_of=lambda now: now // ROUND_MS
        )
        self.registry = SimTaskRegistry()
        self.settings = PeerSettings(swarm_id=SWARM, seed=5, tasks=self.registry.task_names())
        assert self.settings.collect_fraction == COLLECT_FRACTION
        self.store = CheckpointStore()
        self.ports: list[WatchedPort] = []
        train, generate = extra_train_s or {}, extra_generate_s or {}
        self.peers = [self._make_peer(i, train.get(i, 0.0), generate.get(i, 0.0)) for i in range(count)]

    def _make_peer(self, index: int, extra_train_s: float, extra_generate_s: float | list[float]) -> Peer:
        seed = seed_of(f"peer-{index}")
        port = WatchedPort(self.world.attach(peer_id_from_seed(seed)), self.clock.now_ms)
        self.ports.append(port)
        policy = SimPolicy(port.local_peer_id, self.registry, seed=5, store=self.store)

        async def offload(fn, *args):  # type: ignore[no-untyped-def]
            result = fn(*args)  # inline, then the policy's virtual compute time
            name = getattr(fn, "__name__", "")
            slow = {"train": extra_train_s, "generate": extra_generate_s}.get(name, 0.0)
            if isinstance(slow, list):
                slow = slow.pop(0) if slow else 0.0
            await trio.sleep(policy.take_cost() + slow)
            return result

        return Peer(
            self.settings, seed, port, self.coordinator, policy, self.registry, self.clock, offload=offload
        )

    def run(self, rounds: int) -> None:
        async def main() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.world.run_deliveries)
                for peer in self.peers:
                    await nursery.start(peer.run)
                await trio.sleep(rounds * ROUND_MS / 1000)
                nursery.cancel_scope.cancel()

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def first(events: list[tuple[str, int, int]], what: str, round_number: int) -> int:
    return next(ms for kind, r, ms in events if kind == what and r == round_number)


def test_announcement_and_dht_put_run_concurrently() -> None:
    swarm = Swarm(2)
    port = swarm.ports[0]
    port.publish_delay_s = 0.5  # a slow gossip send must not hold the DHT put back, nor the reverse
    port.put_delay_s = 1.5
    swarm.run(rounds=3)
    for round_number in range(3):
        announce_start = first(port.events, "announce_start", round_number)
        put_start = first(port.events, "put_start", round_number)
        announce_end = first(port.events, "announce_end", round_number)
        assert put_start == announce_start  # started together: one-after-the-other would wait 0.5 s
        assert announce_end - announce_start == 500  # not after the 1.5 s put
        assert first(port.events, "put_end", round_number) - put_start >= 1500  # + the sim latency
    assert swarm.peers[0].counters["published"] == 3
    assert swarm.peers[1].counters["published"] == 3


def test_a_failing_dht_put_or_announcement_is_counted_and_the_other_still_happens() -> None:
    swarm = Swarm(3)
    swarm.ports[0].fail_put = True
    swarm.ports[0].put_delay_s = 0.2
    swarm.ports[1].fail_publish = True
    swarm.run(rounds=3)
    failing_put, failing_publish, healthy = swarm.peers
    assert failing_put.counters["dht_put_failed"] == 3
    assert failing_put.counters["published"] == 3
    assert failing_publish.counters["publish_failed"] == 3
    assert failing_publish.counters["published"] == 0
    assert sum(1 for kind, _, _ in swarm.ports[1].events if kind == "put_end") == 3
    # The failed put did not cost the announcement: the healthy peer got peer 0's batches.
    trained = [r for r in healthy.history if r.completed]
    assert len(trained) == 3
    assert all(failing_put.peer_id in r.accepted_peers for r in trained)
    for peer in swarm.peers:
        assert peer.counters["internal_error"] == 0


def test_a_peer_that_falls_behind_skips_the_round_instead_of_publishing_late() -> None:
    # Peer 0's training step takes 10 s instead of 2 s: it starts at the collect deadline (6 s
    # into round r) and ends 6 s into round r + 1, with 4 s of that round left (< half).
    # With the busy-host pace (swarmp2p/round_pace.py): after two overrun rounds it halves its
    # own work, so its generation ends sooner, but the fixed 8 s still end its training just
    # over half into the next round (5 s left in round 5): its measured generation would then
    # publish at the swarm's collect deadline, so that round is skipped too.
    swarm = Swarm(3, extra_train_s={0: 8.0})
    rounds = 8
    swarm.run(rounds=rounds)
    slow, *on_time = swarm.peers
    announced = [(r, ms) for kind, r, ms in swarm.ports[0].events if kind == "announce_start"]
    assert announced, "the slow peer never published"
    for round_number, at_ms in announced:
        deadline = round_number * ROUND_MS + int(COLLECT_FRACTION * ROUND_MS)
        assert at_ms < deadline, (
            f"round {round_number} announced at {at_ms} ms, after the deadline {deadline}"
        )
    skipped = [r.round for r in slow.history if r.skipped]
    assert skipped == [1, 3, 5, 7]  # every round its previous training step ran into
    assert slow.counters["rounds_skipped"] == len(skipped)
    completed = [r.round for r in slow.history if r.completed]
    assert completed == [0, 2, 4, 6]
    assert not set(skipped) & set(completed)
    # On time in the rounds it plays: everyone else used its batch every time.
    for peer in on_time:
        for record in peer.history:
            if record.completed and record.round in completed:
                assert slow.peer_id in record.accepted_peers, (peer.peer_id, record.round)
        assert peer.counters["rounds_skipped"] == 0
    for peer in swarm.peers:
        assert peer.counters["internal_error"] == 0
    assert slow.pace.level == 2 and slow.counters["pace_changes"] == 2  # 2 of 4 questions, then 1
    # Round 5 was skipped for its expected generation alone: the slowest one (round 0's, 4
    # questions at 0.5 s) was forgotten, the next slowest sets the estimate (2 questions).
    assert slow.machine.expected_generate_ms == 1_000


def test_a_peer_whose_generation_outlasts_the_collect_window_still_plays_its_rounds() -> None:
    # Peer 0 generates for 9 s (2 s + 7 s extra; 8 s once its pace halves its questions), past
    # the swarm's 6 s collect deadline from any start: skipping by its measured generation would
    # never let it play again (nor measure a faster one), so only the share of the round left
    # decides, and it plays every round, late.
    swarm = Swarm(3, extra_generate_s={0: 7.0})
    swarm.run(rounds=5)
    slow = swarm.peers[0]
    assert slow.machine.expected_generate_ms >= 6_000  # the whole collect window
    assert slow.counters["rounds_skipped"] == 0
    assert sorted(r.round for r in slow.history) == list(range(5))  # a record for every round
    assert not [r for r in slow.history if r.fate in ("skipped", "missed")]
    assert len([r for r in slow.history if r.completed]) >= 3  # once its pace halved the work


class LateClock:
    """A clock `lag_ms` behind: a coordinator that reads it moves to each round that late, as a
    chain whose stage manager falls behind does (its stage ends stay the schedule's)."""

    def __init__(self, clock: TrioClock, lag_ms: int) -> None:
        self.clock = clock
        self.lag_ms = lag_ms

    def now_ms(self) -> int:
        return self.clock.now_ms() - self.lag_ms


def test_a_peer_late_into_every_round_is_not_kept_out_by_one_slow_generation() -> None:
    # Peer 0 learns of each round 3 s after it began (7 s of 10 left: enough by the share), and
    # its first generation took 4 s, 2 s more than usual (a loaded moment). By that one
    # generation it would publish after the 6 s collect deadline from a 3 s start, so it skips
    # round 1; a
    # skipped round measures no generation, so by that estimate it skipped every round after
    # (a devnet node did, 17 rounds in a row to the end of a chain soak). A round skipped for the
    # estimate forgets its slowest generation: within GENERATIONS_KEPT rounds the peer plays
    # again, measures a generation of today, and publishes on time from then on.
    swarm = Swarm(3, extra_generate_s={0: [2.0]})
    late = swarm.peers[0]
    late.coordinator = ScheduleCoordinator(swarm.coordinator.schedule, LateClock(swarm.clock, 3_000))
    rounds = 7
    swarm.run(rounds=rounds)
    fates = {r.round: r.fate for r in late.history}
    skipped = sorted(r for r, fate in fates.items() if fate == "skipped")
    assert skipped, fates  # the guard did keep it out of a round it would have published late
    assert len(skipped) <= GENERATIONS_KEPT, fates
    announced = sorted(r for kind, r, _ in swarm.ports[0].events if kind == "announce_start")
    assert [r for r in range(max(skipped) + 1, rounds - 1) if r not in announced] == [], (fates, announced)
    for round_number in range(max(skipped) + 1, rounds - 1):
        at_ms = first(swarm.ports[0].events, "announce_start", round_number)
        assert at_ms < round_number * ROUND_MS + int(COLLECT_FRACTION * ROUND_MS), (round_number, at_ms)
        assert fates[round_number] == "completed", fates
    for peer in swarm.peers:
        assert peer.counters["internal_error"] == 0


def test_without_the_guard_the_slow_peer_publishes_after_the_deadline() -> None:
    # What the guard prevents (the behaviour before it): the same slow peer with skipping off.
    swarm = Swarm(3, extra_train_s={0: 8.0})
    slow = swarm.peers[0]
    slow.settings = PeerSettings(
        swarm_id=SWARM, seed=5, tasks=swarm.registry.task_names(), min_round_remaining=0.0
    )
    swarm.run(rounds=4)
    assert slow.counters["rounds_skipped"] == 0
    assert not [r for r in slow.history if r.skipped]
    late = [
        r
        for kind, r, ms in swarm.ports[0].events
        if kind == "announce_start" and ms >= r * ROUND_MS + int(COLLECT_FRACTION * ROUND_MS)
    ]
    assert late  # e.g. round 1 announced 8 s in, 2 s after everyone else stopped collecting


@given(
    stage_ms=st.integers(1, 10**7),
    stages=st.integers(1, 5),
    first_ms=st.integers(0, 10**9),
    gap_ms=st.integers(0, 10**9),
)
def test_the_stage_length_is_learned_exactly_from_a_schedule(
    stage_ms: int, stages: int, first_ms: int, gap_ms: int
) -> None:
    schedule = SwarmSchedule("s", 0, stage_ms * stages, stages, 1)
    coordinator = ScheduleCoordinator(schedule, TrioClock(0))
    earlier = coordinator.info_at(first_ms)
    later = coordinator.info_at(first_ms + gap_ms)
    learned = learn_stage_ms(None, earlier, later)
    if (later.round, later.stage) == (earlier.round, earlier.stage):
        assert learned is None  # nothing to learn inside one stage
    else:
        assert learned == stage_ms
    assert learn_stage_ms(stage_ms + 7, earlier, later) == (stage_ms if learned else stage_ms + 7)


def test_learning_ignores_nonsense_and_too_late_needs_a_stage_length() -> None:
    a = RoundInfo(round=3, stage=0, stage_count=1, stage_ends_ms=40_000)
    backwards = RoundInfo(round=2, stage=0, stage_count=1, stage_ends_ms=30_000)
    other_shape = RoundInfo(round=4, stage=0, stage_count=2, stage_ends_ms=45_000)
    assert learn_stage_ms(None, a, backwards) is None
    assert learn_stage_ms(9_000, a, other_shape) == 9_000
    assert learn_stage_ms(None, a, RoundInfo(4, 0, 1, 40_000)) is None  # same end: no estimate
    assert not too_late_to_start(39_000, 40_000, None, 0.5)  # unknown length: never skip
    assert too_late_to_start(36_000, 40_000, 10_000, 0.5)
    assert not too_late_to_start(35_000, 40_000, 10_000, 0.5)
    assert not too_late_to_start(39_999, 40_000, 10_000, 0.0)
