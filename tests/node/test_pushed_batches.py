"""Eager push (swarmp2p/pushed.py): a small batch rides in its announcement's gossip message.

What must hold: peers that push take each other's batches without a single fetch stream and
accept exactly what they would have fetched; a pushed batch is judged like a fetched one (a
swapped batch is refused and blamed, never accepted); what a receiver keeps is bounded; the
gossip check refuses to relay a push whose batch is not the one announced."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from protocol import codec
from protocol.envelope import peer_id_from_seed, seal
from protocol.errors import ProtocolError
from protocol.messages import PushedAnnouncement, RolloutAnnouncement, RolloutBatch, SwarmSchedule
from simulator.network import LinkModel, SimWorld
from simulator.policy import CheckpointStore, SimPolicy
from simulator.registry import SimTaskRegistry
from swarmp2p.clocks import TrioClock
from swarmp2p.net.checks import announcement_check
from swarmp2p.net.settings import NetworkSettings
from swarmp2p.peer import Peer, PeerSettings
from swarmp2p.pushed import PUSHED_PREFIX, PushedBatches, unwrap, wrap
from swarmp2p.schedule import ScheduleCoordinator

ROUND_MS = 10_000
SWARM = "t"


def seed_of(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def sealed_pair(seed: bytes, round_number: int = 3) -> tuple[bytes, bytes]:
    """(sealed announcement, sealed batch) as a publisher makes them."""
    author = peer_id_from_seed(seed)
    batch = RolloutBatch(swarm_id=SWARM, round=round_number, stage=0, peer_id=author, groups=())
    envelope = seal(batch, seed)
    announcement = RolloutAnnouncement(
        swarm_id=SWARM,
        round=round_number,
        stage=0,
        peer_id=author,
        batch_digest=hashlib.sha256(envelope).digest(),
        group_count=0,
        size_bytes=len(envelope),
    )
    return seal(announcement, seed), envelope


# ---- the wire wrapper -----------------------------------------------------------------------


def test_a_push_unwraps_to_the_announcement_and_its_batch() -> None:
    announcement, envelope = sealed_pair(seed_of("a"))
    assert unwrap(wrap(announcement, envelope)) == (announcement, envelope)


def test_a_plain_announcement_passes_through_undecoded() -> None:
    announcement, _ = sealed_pair(seed_of("a"))
    assert unwrap(announcement) == (announcement, None)
    assert not announcement.startswith(PUSHED_PREFIX)


def test_a_truncated_or_garbled_push_is_a_protocol_error() -> None:
    data = wrap(*sealed_pair(seed_of("a")))
    with pytest.raises(ProtocolError):
        unwrap(data[: len(data) // 2])
    with pytest.raises(ProtocolError):
        unwrap(PUSHED_PREFIX + b"\xc1" * 40)


def test_kept_pushes_are_bounded_and_evictions_counted() -> None:
    counters: Counter[str] = Counter()
    kept = PushedBatches(max_entries=2, counters=counters)
    for i in range(3):
        kept.keep("p", bytes([i]) * 32, b"batch %d" % i)
    assert len(kept) == 2 and counters["pushed_evicted"] == 1
    assert kept.take("p", bytes([0]) * 32) is None  # the oldest went
    assert kept.take("p", bytes([2]) * 32) == b"batch 2"
    assert kept.take("p", bytes([2]) * 32) is None  # taken once


# ---- the relay check ------------------------------------------------------------------------


def test_the_gossip_check_relays_a_true_push_and_refuses_a_swapped_batch() -> None:
    seed = seed_of("author")
    author = peer_id_from_seed(seed)
    check = announcement_check(SWARM, lambda: 3, max_bytes=1280)
    announcement, envelope = sealed_pair(seed)
    assert check(author, wrap(announcement, envelope)) is None
    _, other_envelope = sealed_pair(seed, round_number=4)
    assert check(author, wrap(announcement, other_envelope)) == "digest_mismatch"
    assert check(author, PUSHED_PREFIX + b"junk") is not None
    stranger = peer_id_from_seed(seed_of("someone else"))
    assert check(stranger, wrap(announcement, envelope)) == "sender_mismatch"


def test_push_limits_are_checked_against_the_protocol_and_gossip_limits() -> None:
    assert NetworkSettings().push_max_bytes == 64 * 1024
    NetworkSettings(push_max_bytes=0)
    with pytest.raises(ValueError, match="push_max_bytes"):
        NetworkSettings(push_max_bytes=600 * 1024)
    with pytest.raises(ValueError, match="push_max_bytes"):
        NetworkSettings(push_max_bytes=100 * 1024, max_gossip_bytes=100 * 1024)


# ---- real Peers on the simulator's network --------------------------------------------------


class PushingPort:
    """A simulator port that pushes batches up to `push_max_bytes`, counts fetch requests, and
    can swap the batch inside its own pushes (a lying author)."""

    def __init__(self, inner: Any, push_max_bytes: int) -> None:
        self._inner = inner
        self.push_max_bytes = push_max_bytes
        self.requests = 0
        self.swap_pushed_batch = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        self.requests += 1
        return await self._inner.request(peer_id, data, timeout_s)

    async def publish(self, topic: str, data: bytes) -> None:
        if self.swap_pushed_batch and data.startswith(PUSHED_PREFIX):
            pushed = codec.decode(data)
            assert isinstance(pushed, PushedAnnouncement)
            data = codec.encode(PushedAnnouncement(pushed.announcement, pushed.envelope + b" "))
        await self._inner.publish(topic, data)


def run_swarm(count: int, push_max_bytes: int, rounds: int = 3, liar: int | None = None) -> list[Any]:
    clock = TrioClock(0)
    coordinator = ScheduleCoordinator(SwarmSchedule(SWARM, 0, ROUND_MS, 1, 5), clock)
    world = SimWorld(LinkModel(), seed=1, now_ms=clock.now_ms, round_of=lambda now: now // ROUND_MS)
    registry = SimTaskRegistry()
    settings = PeerSettings(swarm_id=SWARM, seed=5, tasks=registry.task_names())
    store = CheckpointStore()
    made: list[tuple[Peer, PushingPort]] = []
    for index in range(count):
        seed = seed_of(f"peer-{index}")
        port = PushingPort(world.attach(peer_id_from_seed(seed)), push_max_bytes)
        port.swap_pushed_batch = index == liar
        policy = SimPolicy(port.local_peer_id, registry, seed=5, store=store)

        async def offload(fn, *args, policy=policy):  # type: ignore[no-untyped-def]
            result = fn(*args)
            await trio.sleep(policy.take_cost())
            return result

        peer = Peer(settings, seed, port, coordinator, policy, registry, clock, offload=offload)
        made.append((peer, port))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(world.run_deliveries)
            for peer, _ in made:
                await nursery.start(peer.run)
            await trio.sleep(rounds * ROUND_MS / 1000)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return made


def accepted(peer: Peer) -> list[tuple[int, tuple[str, ...]]]:
    return [(record.round, tuple(sorted(record.accepted_peers))) for record in peer.history]


def test_pushing_peers_take_every_batch_without_a_fetch_and_accept_the_same_as_fetching() -> None:
    pushing = run_swarm(3, push_max_bytes=64 * 1024)
    fetching = run_swarm(3, push_max_bytes=0)
    for (peer, port), (control, control_port) in zip(pushing, fetching, strict=True):
        assert port.requests == 0
        assert control_port.requests > 0
        assert peer.counters["pushed"] == len(peer.history)
        assert control.counters["pushed"] == 0
        # Every other peer's batch, every round, taken from its push.
        assert peer.counters["pushed_used"] == sum(len(r.accepted_peers) for r in peer.history) > 0
        assert accepted(peer) == accepted(control)
        assert all(len(peers) == 2 for _, peers in accepted(peer))


def test_a_swapped_pushed_batch_is_refused_and_blamed_never_accepted() -> None:
    made = run_swarm(3, push_max_bytes=64 * 1024, liar=0)
    liar = made[0][0].peer_id
    for peer, _ in made[1:]:
        assert peer.rejections["digest_mismatch"] >= 1, dict(peer.rejections)
        assert all(liar not in peers for _, peers in accepted(peer))
        assert peer.inbox.scores.reasons_by_peer[liar]["digest_mismatch"] >= 1


@given(
    st.lists(
        st.tuples(st.sampled_from(["keep", "take", "discard"]), st.integers(0, 5), st.integers(0, 3)),
        max_size=60,
    ),
    st.integers(1, 4),
)
def test_kept_pushes_behave_like_a_bounded_oldest_first_map(
    ops: list[tuple[str, int, int]], cap: int
) -> None:
    counters: Counter[str] = Counter()
    kept = PushedBatches(max_entries=cap, counters=counters)
    model: dict[tuple[str, bytes], bytes] = {}  # insertion order = age
    evicted = 0
    for op, who, what in ops:
        key = (f"peer{who}", bytes([what]) * 32)
        if op == "keep":
            value = b"%d-%d-%d" % (who, what, len(model))
            model.pop(key, None)
            if len(model) >= cap:
                del model[next(iter(model))]
                evicted += 1
            model[key] = value
            kept.keep(*key, value)
        elif op == "take":
            assert kept.take(*key) == model.pop(key, None)
        else:
            kept.discard(*key)
            model.pop(key, None)
        assert len(kept) == len(model) <= cap
    assert counters["pushed_evicted"] == evicted
