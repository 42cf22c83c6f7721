"""Pinned fetch rules. The queue (swarmp2p/fetch_queue.py): which configurations it accepts,
that a job put without a lane is an established sender's, that a waiting job goes to the worker
that has waited longest, and that a limited lane never has more jobs in the workers' hands than
its limit however often workers finish. The fetcher (swarmp2p/fetcher.py): a later stage's
inputs are fetched depth first, a sweep reads the DHT under the batch's key, an oversized DHT
value is not taken, and without a port timeout a fetch still ends. Written against the
survivors of scripts/mutation.sh on those modules.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import pytest
import trio
import trio.testing

from protocol.decisions import Accept, Fetch, FetchJob, NeedInputs
from protocol.errors import ProtocolError
from protocol.messages import FetchResponse
from swarmp2p.fetch_queue import LaneQueue
from swarmp2p.fetcher import Fetcher
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.peer_settings import PeerSettings, batch_dht_key
from swarmp2p.ports import InboundMessage, InlineHandler, NetworkError
from swarmp2p.pushed import PUSHED_PREFIX, unwrap

T = TypeVar("T")

CAPACITY_MESSAGE = "^" + re.escape("need capacity >= 1 and lanes >= 1") + "$"


@pytest.mark.parametrize(("capacity", "lanes"), [(0, 2), (1, 0), (0, 0)])
def test_a_queue_without_room_or_lanes_is_refused(capacity: int, lanes: int) -> None:
    with pytest.raises(ValueError, match=CAPACITY_MESSAGE):
        LaneQueue[str](capacity, lanes)


def test_one_lane_and_one_slot_are_a_valid_queue() -> None:
    async def main() -> str:
        queue = LaneQueue[str](capacity=1, lanes=1)
        queue.put_nowait("only")
        with pytest.raises(trio.WouldBlock):
            queue.put_nowait("more")
        return await queue.get()

    assert trio.run(main) == "only"


def test_lane_limits_name_existing_lanes_and_allow_at_least_one_job() -> None:
    LaneQueue[str](4, lanes=2, lane_limits={0: 1, 1: 1})  # lane 0 may be limited too
    with pytest.raises(ValueError, match=re.escape("lanes in 0..1")):
        LaneQueue[str](4, lane_limits={2: 1})  # two lanes unless told otherwise
    message = "^" + re.escape("lane limits need lanes in 0..1 and limits >= 1: ")
    for limits in ({2: 1}, {-1: 1}, {1: 0}, {0: 0}):
        with pytest.raises(ValueError, match=message):
            LaneQueue[str](4, lanes=2, lane_limits=limits)


def test_a_job_put_without_a_lane_is_an_established_senders() -> None:
    async def main() -> list[str]:
        queue = LaneQueue[str](capacity=4)
        queue.put_nowait("unknown", lane=1)
        queue.put_nowait("default")
        return [await queue.get(), await queue.get()]

    assert trio.run(main) == ["default", "unknown"]


def test_a_job_goes_to_the_worker_that_has_waited_longest() -> None:
    async def main() -> list[tuple[str, str]]:
        queue = LaneQueue[str](capacity=4)
        got: list[tuple[str, str]] = []

        async def worker(name: str) -> None:
            got.append((name, await queue.get()))

        async with trio.open_nursery() as nursery:
            for name in ("first", "second", "third"):
                nursery.start_soon(worker, name)
                await trio.testing.wait_all_tasks_blocked()  # they start waiting in this order
            for job in ("j1", "j2", "j3"):
                queue.put_nowait(job)
        return got

    assert sorted(trio.run(main)) == [("first", "j1"), ("second", "j2"), ("third", "j3")]


def test_a_finished_limited_job_hands_its_slot_to_the_longest_waiting_worker() -> None:
    async def main() -> list[tuple[str, str]]:
        queue = LaneQueue[str](capacity=4, lane_limits={1: 1})
        got: list[tuple[str, str]] = []
        release = trio.Event()

        async def holder() -> None:
            await queue.get()
            await release.wait()
            queue.done()

        async def worker(name: str) -> None:
            got.append((name, await queue.get()))

        async with trio.open_nursery() as nursery:
            queue.put_nowait("held", lane=1)
            nursery.start_soon(holder)
            await trio.testing.wait_all_tasks_blocked()
            for name in ("first", "second"):
                nursery.start_soon(worker, name)
                await trio.testing.wait_all_tasks_blocked()
            queue.put_nowait("s", lane=1)  # lane 1 at its limit: buffered, both workers wait
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            release.set()  # the held job ends: its slot goes to "first"
            await trio.testing.wait_all_tasks_blocked()
            assert got == [("first", "s")]
            queue.put_nowait("h")
        return got

    assert trio.run(main) == [("first", "s"), ("second", "h")]


def test_a_limited_lane_never_exceeds_its_limit_as_workers_finish() -> None:
    """Three of lane 1's jobs in the workers' hands at most, with five workers and a stream of
    jobs: each `done()` frees exactly one slot."""

    async def main() -> tuple[int, int]:
        queue = LaneQueue[int](capacity=64, lane_limits={1: 3})
        in_hand = [0]
        most = [0]
        finished = [0]

        async def worker(hold_s: float) -> None:
            async with queue.worker():
                while True:
                    await queue.get()
                    in_hand[0] += 1
                    most[0] = max(most[0], in_hand[0])
                    try:
                        await trio.sleep(hold_s)
                    finally:
                        in_hand[0] -= 1
                        finished[0] += 1
                        queue.done()

        async with trio.open_nursery() as nursery:
            for i in range(5):
                nursery.start_soon(worker, 1.0 + i / 10)
            await trio.testing.wait_all_tasks_blocked()
            for job in range(30):
                queue.put_nowait(job, lane=1)
            await trio.sleep(30)
            nursery.cancel_scope.cancel()
        return most[0], finished[0]

    most, finished = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert most == 3
    assert finished == 30  # and the limit never stalls the lane


def test_done_from_a_worker_that_holds_no_job_is_harmless() -> None:
    async def main() -> list[str]:
        queue = LaneQueue[str](capacity=4, lane_limits={1: 1})
        queue.done()  # this task was never given a job
        queue.put_nowait("a", lane=1)
        queue.put_nowait("b", lane=1)
        first = await queue.get()
        queue.done()
        queue.done()  # a second done for the same job frees nothing more
        return [first, await queue.get()]

    assert trio.run(main) == ["a", "b"]


# ---- the fetcher's IO (swarmp2p/fetcher.py): inputs of later stages, the DHT, its deadline ----

SWARM_ID = "pinned-fetch"
TIMEOUT_S = 1.0


class ServingNetwork:
    """Peers in `serving` answer a fetch with b"env:<peer>"; any other request fails. The DHT
    holds `dht`. `hang` makes every request and lookup wait forever (a port without its own
    timeout: `bounds_waits` False)."""

    def __init__(self, serving: set[str], dht: dict[str, bytes], *, hang: bool = False) -> None:
        self.serving = serving
        self.dht = dht
        self.hang = hang
        self.bounds_waits = not hang
        self.connected: list[str] = []
        self.dht_keys: list[str] = []
        self.requests: list[object] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.cache = VerifyCache()

    def connected_peers(self) -> Sequence[str]:
        return self.connected

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        self.requests.append(self.cache.decode(data))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.hang:
                await trio.sleep_forever()
        finally:
            self.in_flight -= 1
        if peer_id not in self.serving:
            raise NetworkError("no answer")
        return self.cache.encode(FetchResponse(found=True, envelope=b"env:" + peer_id.encode()))

    async def dht_get(self, key: str) -> bytes | None:
        self.dht_keys.append(key)
        if self.hang:
            await trio.sleep_forever()
        return self.dht.get(key)


class RecordingInbox:
    """The admission inbox's side of the fetcher, scripted: `needs` maps a sender to the inputs
    its batch (or input) references; every call is recorded."""

    def __init__(self, needs: dict[str, tuple[FetchJob, ...]] | None = None) -> None:
        self.counters: Counter[str] = Counter()
        self.needs = dict(needs or {})
        self.calls: list[tuple[object, ...]] = []
        self.top_ups: list[object] = []

    broken: frozenset[str] = frozenset()  # senders whose fetch raises (an inbox bug)

    def may_fetch(self, job: FetchJob) -> bool:
        if job.sender in self.broken:
            raise RuntimeError("inbox bug")
        return True

    def fetched(
        self, job: FetchJob, envelope: bytes | None, direct: bool, inputs_fetched: bool = False
    ) -> object:
        self.calls.append(("fetched", job.sender, envelope, direct, inputs_fetched))
        if job.sender in self.needs and not inputs_fetched:
            return NeedInputs(self.needs[job.sender])
        return Accept(job.sender, ()) if envelope is not None else None

    def input_fetched(self, job: FetchJob, envelope: bytes | None, last: bool) -> object:
        self.calls.append(("input", job.sender, envelope, last))
        jobs = self.needs.pop(job.sender, None)
        return NeedInputs(jobs) if jobs else None

    budget_full = False
    known: frozenset[str] = frozenset()
    decision: object = None
    lane = 0

    def unknown_budget_full(self) -> bool:
        return self.budget_full

    def established(self, sender: str) -> bool:
        return sender in self.known

    def peers_connected(self, peers: Sequence[str]) -> None:
        self.calls.append(("connected", tuple(peers)))

    def heard(self, sender: str, data: bytes, shared: object) -> object:
        self.calls.append(("heard", sender, data))
        self.shared = shared
        if isinstance(self.decision, Exception):
            raise self.decision
        return self.decision

    def reject(self, reason: str, blame: str | None) -> None:
        self.calls.append(("reject", reason, blame))

    def fetch_lane(self, sender: str) -> int:
        return self.lane

    def queued(self, job: FetchJob) -> None:
        pass

    def top_up(self, round_number: int) -> object:
        self.calls.append(("top_up", round_number))
        return self.top_ups.pop(0) if self.top_ups else None


def job(sender: str, stage: int = 0, *, dht_only: bool = False) -> FetchJob:
    return FetchJob(round=7, stage=stage, sender=sender, digest=b"", group_count=-1, dht_only=dht_only)


def fetcher(inbox: RecordingInbox, network: ServingNetwork) -> Fetcher:
    settings = PeerSettings(swarm_id=SWARM_ID, seed=1, tasks=("echo",), fetch_timeout_s=TIMEOUT_S)
    return Fetcher(settings, "me", network, inbox, VerifyCache(), on_hold=lambda: None)  # type: ignore[arg-type]


def run_virtual(main: Callable[[], Awaitable[T]]) -> T:
    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_later_stage_batch_gets_its_inputs_and_theirs_before_it_is_judged_again() -> None:
    """Stage 2's batch needs a and b (stage 1); a needs c (stage 0). Each input comes from its
    author, else the DHT (b and d are served by nobody: judged missing); an input's own inputs are
    fetched before it is handed over as the last word on it."""
    inbox = RecordingInbox({"top": (job("a", 2), job("b", 2)), "a": (job("c", 1),), "c": (job("d"),)})
    network = ServingNetwork({"top", "a", "c"}, {})
    accepted = run_virtual(lambda: fetcher(inbox, network)._fetch_and_verify(job("top", 3)))
    assert accepted
    assert inbox.calls == [
        ("fetched", "top", b"env:top", True, False),
        ("input", "a", b"env:a", False),
        ("input", "c", b"env:c", False),
        ("input", "d", None, True),
        ("input", "c", b"env:c", True),
        ("input", "a", b"env:a", True),
        ("input", "b", None, False),
        ("fetched", "top", b"env:top", True, True),
    ]
    # every fetch asked its author for the batch of its round and stage; d and b fell back to the DHT
    assert [(r.peer_id, r.round, r.stage, r.swarm_id) for r in network.requests] == [  # type: ignore[attr-defined]
        ("top", 7, 3, SWARM_ID), ("a", 7, 2, SWARM_ID), ("c", 7, 1, SWARM_ID), ("d", 7, 0, SWARM_ID),
        ("b", 7, 2, SWARM_ID),
    ]  # fmt: skip
    assert inbox.counters["fetches"] == 5 and inbox.counters["dht_fallbacks"] == 2


def test_a_sweep_of_a_peer_not_connected_reads_its_batch_key_in_the_dht() -> None:
    key = batch_dht_key(SWARM_ID, 7, 1, "gone")
    network = ServingNetwork(set(), {key: b"from the dht"})
    inbox = RecordingInbox()
    assert run_virtual(lambda: fetcher(inbox, network)._fetch_and_verify(job("gone", 1, dht_only=True)))
    assert network.dht_keys == [key]
    assert inbox.calls == [("fetched", "gone", b"from the dht", False, False)]


def test_a_dht_value_larger_than_a_batch_is_not_taken() -> None:
    settings_limit = PeerSettings(swarm_id=SWARM_ID, seed=1, tasks=("echo",)).max_batch_bytes
    key = batch_dht_key(SWARM_ID, 7, 0, "gone")
    for size, found in ((settings_limit, True), (settings_limit + 1, False)):
        network = ServingNetwork(set(), {key: b"x" * size})
        got = run_virtual(lambda network=network: fetcher(RecordingInbox(), network)._from_dht(job("gone")))
        assert (got is not None) == found


def test_without_a_port_timeout_a_fetch_gives_up_on_the_peer_then_on_the_dht() -> None:
    """A port whose waits are not bounded: the announcer is given twice the fetch timeout, then
    the DHT the fetch timeout, and the fetch ends with nothing found (the worker is free)."""
    network = ServingNetwork({"slow"}, {}, hang=True)

    async def main() -> tuple[object, float, list[str]]:
        got = await fetcher(RecordingInbox(), network)._fetch(job("slow"))
        return got, trio.current_time(), network.dht_keys

    got, ended_at, dht_keys = run_virtual(main)
    assert got is None and ended_at == pytest.approx(3 * TIMEOUT_S)
    assert [(r.peer_id, r.round, r.stage) for r in network.requests] == [("slow", 7, 0)]  # type: ignore[attr-defined]
    assert dht_keys == [batch_dht_key(SWARM_ID, 7, 0, "slow")]


def test_one_instants_deliveries_reach_each_fetcher_in_order() -> None:
    inboxes = [RecordingInbox(), RecordingInbox()]
    fetchers = [fetcher(inbox, ServingNetwork(set(), {})) for inbox in inboxes]
    deliveries = [
        (fetchers[0], [InboundMessage("t", "p1", b"one"), InboundMessage("t", "p2", b"two")]),
        (fetchers[1], [InboundMessage("t", "p3", b"three")]),
    ]
    Fetcher.handle_announcement_many(deliveries)
    assert inboxes[0].calls == [("heard", "p1", b"one"), ("heard", "p2", b"two")]
    assert inboxes[1].calls == [("heard", "p3", b"three")]


@pytest.mark.parametrize(("workers", "unknown_workers", "expected"), [(4, 1, 1), (3, 4, 2)])
def test_unknown_senders_get_the_workers_asked_for_but_always_leave_one_free(
    workers: int, unknown_workers: int, expected: int
) -> None:
    inbox = RecordingInbox()
    inbox.lane = 1  # every sender unknown
    network = ServingNetwork(set(), {}, hang=True)
    settings = PeerSettings(
        swarm_id=SWARM_ID, seed=1, tasks=("echo",), fetch_timeout_s=TIMEOUT_S,
        fetch_concurrency=workers, unknown_fetch_concurrency=unknown_workers,
    )  # fmt: skip
    worker = Fetcher(settings, "me", network, inbox, VerifyCache(), on_hold=lambda: None)  # type: ignore[arg-type]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            worker.start(nursery)
            for i in range(4):
                worker.enqueue(job(f"stranger{i}"))
            await trio.sleep(20 * TIMEOUT_S)
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert network.most_in_flight == expected and len(network.requests) == 4


def test_a_failing_announcement_is_logged_with_the_peer_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    inbox = RecordingInbox()
    inbox.decision = RuntimeError("inbox bug")
    subject = fetcher(inbox, ServingNetwork(set(), {}))
    with caplog.at_level("ERROR", logger="swarmp2p.peer"):
        subject.handle_announcement(InboundMessage("t", "p1", b"plain"))
    assert [r.getMessage() for r in caplog.records] == ["me: handling an announcement failed"]
    assert inbox.calls[-1] == ("reject", "internal_error", None)


def test_the_inline_handler_is_the_fetchers_own() -> None:
    subject = fetcher(RecordingInbox(), ServingNetwork(set(), {}))
    handler = subject.inline_handler()
    assert isinstance(handler, InlineHandler)
    assert handler.one == subject.handle_announcement
    assert handler.many is Fetcher.handle_announcement_many and handler.receiver is subject


def test_a_garbled_push_is_rejected_for_its_reason_and_blamed_on_its_sender() -> None:
    inbox = RecordingInbox()
    data = PUSHED_PREFIX + b"garbage"
    with pytest.raises(ProtocolError) as error:
        unwrap(data)
    fetcher(inbox, ServingNetwork(set(), {})).on_announcement(InboundMessage("t", "p1", data))
    assert inbox.calls == [("reject", error.value.reason, "p1")]


def test_only_an_unknown_sender_past_the_budget_refreshes_the_connected_peers() -> None:
    inbox = RecordingInbox()
    inbox.budget_full, inbox.known = True, frozenset({"known"})
    network = ServingNetwork(set(), {})
    network.connected = ["known", "other"]
    subject = fetcher(inbox, network)
    shared = object()
    subject.announced("known", b"a1", shared)
    assert inbox.shared is shared
    subject.announced("stranger", b"a2", None)
    assert inbox.calls == [
        ("heard", "known", b"a1"),
        ("connected", ("known", "other")),
        ("heard", "stranger", b"a2"),
    ]


def test_a_pushed_batch_is_kept_for_its_job_and_dropped_when_the_queue_is_full() -> None:
    inbox = RecordingInbox()
    settings = PeerSettings(swarm_id=SWARM_ID, seed=1, tasks=("echo",), max_fetch_per_round=1)
    subject = Fetcher(settings, "me", ServingNetwork(set(), {}), inbox, VerifyCache(), on_hold=lambda: None)  # type: ignore[arg-type]
    first = FetchJob(round=7, stage=0, sender="p1", digest=b"d1", group_count=1)
    second = FetchJob(round=7, stage=0, sender="p2", digest=b"d2", group_count=1)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            subject.start(nursery)  # the workers have not run yet: the one slot fills
            inbox.decision = Fetch(first)
            subject.announced("p1", b"a1", None, b"batch1")
            inbox.decision = Fetch(second)
            subject.announced("p2", b"a2", None, b"batch2")
            inbox.decision = Fetch(second)
            subject.announced("p2", b"a2", None)  # not pushed: nothing kept
            assert subject.pushed.take("p2", b"d2") is None
            assert subject.pushed.take("p1", b"d1") == b"batch1"
            nursery.cancel_scope.cancel()

    run_virtual(main)
    assert ("reject", "fetch_queue_full", None) in inbox.calls


def test_a_fetch_that_raised_is_logged_rejected_and_followed_by_a_top_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failed announced fetch asks the inbox for a top-up and queues it; an accepted one asks
    for none."""
    inbox = RecordingInbox()
    inbox.broken = frozenset({"p1"})
    inbox.top_ups = [Fetch(job("p2"))]
    subject = fetcher(inbox, ServingNetwork({"p2"}, {}))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            subject.start(nursery)
            subject.enqueue(job("p1"))
            await trio.sleep(10 * TIMEOUT_S)
            nursery.cancel_scope.cancel()

    with caplog.at_level("ERROR", logger="swarmp2p.peer"):
        run_virtual(main)
    assert [r.getMessage() for r in caplog.records] == ["me: fetching from p1 failed unexpectedly"]
    assert inbox.calls == [
        ("reject", "internal_error", None),
        ("top_up", 7),
        ("fetched", "p2", b"env:p2", True, False),
    ]
