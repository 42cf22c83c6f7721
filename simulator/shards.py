"""One simulation over several worker processes, in lockstep on virtual time (`workers = N`).

Why: a simulated round is flat work spread over every peer (docs/benchmarks.md), so the one
lever left for 1000 peers x 50 rounds is the machine's other cores. Each worker process runs
the peers whose plan index is its own modulo N, with the SAME round code as a single process
(swarmp2p.peer.Peer over simulator.network.SimWorld); the worlds tell each other what their
peers do, and this module carries it.

The lockstep. Virtual time only moves when every task of a worker waits. Then the worker's
barrier task (`ShardLink.run`) sends the hub (`run_sharded`, the parent process) everything
its peers did at this instant (publishes, DHT records, requests to other workers' peers and
answers to theirs, verdicts) and its next deadline, and waits. The hub routes the items in a
fixed order (`route`: by source worker, then as sent). After a publish, a request or an answer
all workers take what they were sent and meet again at the same instant (a request is served,
and its answer wakes its requester, at the instant it was sent, as in one process); once an
instant is quiet, all of them jump to the earliest next deadline of any worker. Nothing sent at
an instant is due at it (every link has a latency), so no worker runs past something it was
about to be sent. When the other workers' peers come online and go offline is known from their
plans (`expect_online`), not sent.

What a report depends on. A run is reproduced exactly by its scenario, `workers` included:
each world draws from its own stream (`derive_seed(seed, "network", worker)`), and a worker
sees another's publishes and DHT records at the end of the instant they happened instead of in
between its own tasks. With `workers = 1` (the default) none of this runs and every report is
byte for byte what it was.

The parent and its workers talk over pipes the parent made: msgpack for the lockstep, pickle
only for each worker's final result (the parent's own children, never the network).
"""

from __future__ import annotations

import math
import multiprocessing
import pickle
import time
import traceback
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import msgpack
import outcome
import trio
import trio.testing

from protocol.verification import Verdict

EVERYONE = -1
"""An outbox item's destination meaning every other worker."""


WAKING = ("g", "q", "r")
"""Lockstep items after which the workers meet again at the same instant: a request to serve,
an answer that wakes its requester, and a publish (its arrival slots are drawn by the receiving
world, and a world with no minimum latency may put one at this instant). DHT records ("d") and
verdicts ("v") only update state: a meeting that hands over only those is quiet."""


class SimulationWorkerError(RuntimeError):
    """A worker process failed; the message holds its traceback."""


def owner_of(index: int, workers: int) -> int:
    """The worker that runs the peer with plan index `index`: round robin, so each worker gets
    a share of every kind of peer (late joiners, slow peers and adversaries are drawn by index)."""
    return index % workers


def exact_jump_clock() -> trio.testing.MockClock:
    """trio's autojumping mock clock, but a jump lands exactly on the next deadline.

    MockClock jumps by `deadline - now`, which in floating point can land an ulp short of or
    past it; two workers jumping to the same deadline from different instants could then stand
    at times an ulp apart, and the hub would see them out of step. MockClock is final and trio's
    run loop calls `_autojump` only on one, so the instance's own is replaced."""
    clock = trio.testing.MockClock(autojump_threshold=0)

    def autojump() -> None:
        deadline = _next_deadline()
        if clock.current_time() < deadline < math.inf:
            clock._virtual_base = deadline  # at rate 0, current_time() is exactly this

    clock._autojump = autojump  # type: ignore[method-assign]
    return clock


def _next_deadline() -> float:
    # trio keeps its timers in the runner; there is no public way to read the earliest one
    # (current_statistics() gives it relative to now, which rounds).
    return trio._core._run.GLOBAL_RUN_CONTEXT.runner.deadlines.next_deadline()  # type: ignore[attr-defined]


class ShardLink:
    """A worker's side of the lockstep: SimWorld's `ShardPort`, and the barrier task."""

    def __init__(self, connection: Connection, index: int, workers: int) -> None:
        self.index = index
        self.workers = workers
        self._cache: Any = None
        self.barriers = 0  # lockstep meetings so far
        self.waited_s = 0.0  # wall seconds spent waiting there for the other workers
        self._connection = connection
        self._owners: dict[str, int] = {}  # every peer of the run -> its worker (`place`)
        self._outbox: list[tuple[int, tuple[Any, ...]]] = []
        self._calls: dict[int, trio.lowlevel.Task] = {}
        self._next_call = 0
        # (virtual s, peer, online) for the other workers' peers, from their plans, in order
        self._online_changes: list[tuple[float, int, str, bool]] = []
        self._online_done = 0

    def place(self, plans: Any) -> None:
        """Learn which worker runs each of the run's peers (`owner_of` their plan index)."""
        self._owners = {plan.peer_id: owner_of(plan.index, self.workers) for plan in plans}

    def owns(self, peer_id: str) -> bool:
        return self._owners[peer_id] == self.index

    def expect_online(self, changes: list[tuple[float, int, str, bool]]) -> None:
        """When the other workers' peers come online and go offline: (virtual seconds, plan
        index, peer, online). Their worker attaches and detaches them at exactly these times (a
        plan is decided up front), so no message needs to say so, and this world sees the change
        at the start of that instant: in one process, a peer coming online at an instant is seen
        by the tasks that run after it there; told at the meeting after the instant, the other
        workers' peers saw none of the peers that joined with them, and the first joiners of
        round 0 fetched every batch (82,610 requests in round 0 at 1000 peers against 46,788)."""
        self._online_changes = sorted(changes)
        self._online_done = 0

    def apply_online_changes(self, world: Any, until: float) -> None:
        """Those of `expect_online`'s changes due at or before virtual time `until`."""
        changes, done = self._online_changes, self._online_done
        while done < len(changes) and changes[done][0] <= until:
            _, _, peer_id, online = changes[done]
            world.set_remote_online(peer_id, online)
            done += 1
        self._online_done = done

    def share_cache(self, cache: Any) -> None:
        """This worker's VerifyCache (swarmp2p/peer_cache.py), shared with the others as one
        process's peers share theirs: the envelopes its honest peers sealed go out marked with
        their signer (the receiving worker trusts the seal, as a process trusts its own peers'),
        and every verdict it computes goes to the others. Without it, each worker checked each
        signature and re-scored each batch again (4x the cache misses of one process)."""
        self._cache = cache
        cache.track_seals()
        cache.on_verdict = self._share_verdict

    def _sealer_of(self, data: bytes) -> str | None:
        return None if self._cache is None else self._cache.sealer_of(data)

    def _share_verdict(self, digest: bytes, verdict: Any) -> None:
        if isinstance(verdict, Verdict):
            self.broadcast(("v", digest, verdict.ok, verdict.reason, verdict.groups_checked))

    # ---- ShardPort ---------------------------------------------------------------------------

    def broadcast(self, item: tuple[Any, ...]) -> None:
        if item[0] in ("g", "d"):  # a publish or a DHT record: its envelope is item[3]
            item = (*item, self._sealer_of(item[3]))
        self._outbox.append((EVERYONE, item))

    async def call(self, target: str, requester: str, data: bytes) -> tuple[int, bytes, float]:
        call_id = self._next_call
        self._next_call += 1
        self._calls[call_id] = trio.lowlevel.current_task()
        self._outbox.append((self._owners[target], ("q", call_id, self.index, target, requester, data)))

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._calls.pop(call_id, None)  # an answer that comes later finds nobody
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)  # type: ignore[no-any-return]

    # ---- the barrier -------------------------------------------------------------------------

    async def run(self, world: Any, nursery: trio.Nursery) -> None:
        """Meet the other workers each time this one has nothing left to do at this instant."""
        while True:
            await trio.testing.wait_all_tasks_blocked()
            now = trio.current_time()
            outbox, self._outbox = self._outbox, []
            self._connection.send_bytes(msgpack.packb(["b", now, _next_deadline(), outbox]))
            # Blocking is right here: every other task of this worker is waiting.
            started = time.perf_counter()
            reply = self._connection.recv_bytes()
            self.waited_s += time.perf_counter() - started
            inbox, next_at = msgpack.unpackb(reply)
            self.barriers += 1
            for item in inbox:
                self._take(item, world, nursery)
            if next_at > now:
                # Nothing runs here before next_at (it is the earliest deadline of any worker).
                self.apply_online_changes(world, next_at)
                await trio.sleep_until(next_at)

    def _take(self, item: list[Any], world: Any, nursery: trio.Nursery) -> None:
        kind = item[0]
        if kind == "g":
            _, topic, sender, data, start, now_ms, sealer = item
            self._trust(data, sealer)
            world.receive_remote_gossip(topic, sender, data, start, now_ms)
        elif kind == "d":
            _, writer, key, value, sealer = item
            self._trust(value, sealer)
            world.store_dht_record(writer, key, value)
        elif kind == "q":
            nursery.start_soon(self._serve, world, *item[1:])
        elif kind == "r":
            _, call_id, status, response, arrives, sealer = item
            task = self._calls.pop(call_id, None)
            if task is not None:
                self._trust(response, sealer)
                trio.lowlevel.reschedule(task, outcome.Value((status, response, arrives)))
        elif kind == "v":
            if self._cache is not None:
                self._cache.known_verdict(
                    item[1], Verdict(ok=item[2], reason=item[3], groups_checked=item[4])
                )
        else:
            raise SimulationWorkerError(f"unknown lockstep item {kind!r}")

    async def _serve(
        self, world: Any, call_id: int, origin: int, target: str, requester: str, data: bytes
    ) -> None:
        status, response, arrives = await world.serve(requester, target, data)
        self._outbox.append((origin, ("r", call_id, status, response, arrives, self._sealer_of(response))))

    def _trust(self, data: bytes, sealer: str | None) -> None:
        if sealer is not None and self._cache is not None:
            self._cache.sealed_elsewhere(data, sealer)


# ---- the parent --------------------------------------------------------------------------------


# A worker's part of the run: (scenario, worker index, connection to the hub, tasks=, peer_overrides=)
# -> its part of the result. simulator.runner passes its `run_shard`, so this module never imports
# the runner back (a module-level function, so spawn pickles it by name).
RunPart = Callable[..., dict[str, Any]]


def _worker_main(
    connection: Connection,
    run_part: RunPart,
    scenario: Any,
    index: int,
    tasks: Any,
    peer_overrides: dict[str, Any],
) -> None:
    try:
        part = run_part(scenario, index, connection, tasks=tasks, peer_overrides=peer_overrides)
        connection.send_bytes(msgpack.packb(["e", pickle.dumps(part)]))
    except BaseException:  # the parent reports it; nothing else would
        connection.send_bytes(msgpack.packb(["x", traceback.format_exc()]))
    finally:
        connection.close()


def run_sharded(
    scenario: Any,
    run_part: RunPart,
    *,
    on_round: Callable[[int], None] | None = None,
    tasks: Any = None,
    peer_overrides: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run `scenario` over `scenario.workers` processes, each calling `run_part`; each worker's part
    of the result, in worker order (simulator.runner merges them). `on_round(r)` as round r ends."""
    # spawn, not fork: the parent may hold threads (torch's, a test runner's) that a fork copies
    # in whatever state they were.
    context = multiprocessing.get_context("spawn")
    connections: list[Connection] = []
    processes = []
    try:
        for index in range(scenario.workers):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=_worker_main,
                args=(theirs, run_part, scenario, index, tasks, dict(peer_overrides or {})),
                name=f"swarmp2p-sim-worker-{index}",
                daemon=True,
            )
            process.start()
            theirs.close()
            connections.append(ours)
            processes.append(process)
        parts = _lockstep(connections, scenario.round_s, scenario.rounds, on_round)
        for process in processes:
            process.join()
        return parts
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        for connection in connections:
            connection.close()


def _lockstep(
    connections: list[Connection], round_s: float, rounds: int, on_round: Callable[[int], None] | None
) -> list[dict[str, Any]]:
    rounds_done = 0
    while True:
        messages = []
        for index, connection in enumerate(connections):
            try:
                messages.append(msgpack.unpackb(connection.recv_bytes()))
            except EOFError:
                raise SimulationWorkerError(
                    f"simulation worker {index} exited without a result (its error is above; a script "
                    "that runs a simulation over workers needs `if __name__ == '__main__':`)"
                ) from None
        for index, message in enumerate(messages):
            if message[0] == "x":
                raise SimulationWorkerError(f"simulation worker {index} failed:\n{message[1]}")
        kinds = {message[0] for message in messages}
        if kinds == {"e"}:
            for round_number in range(rounds_done, rounds):
                if on_round is not None:
                    on_round(round_number)
            return [pickle.loads(message[1]) for message in messages]
        if kinds != {"b"}:
            raise SimulationWorkerError(f"simulation workers out of step: {sorted(kinds)}")
        now = messages[0][1]
        inboxes, next_at = route([(message[1], message[2], message[3]) for message in messages])
        for connection, inbox in zip(connections, inboxes, strict=True):
            connection.send_bytes(msgpack.packb([inbox, next_at]))
        while rounds_done < rounds and now >= (rounds_done + 1) * round_s:
            if on_round is not None:
                on_round(rounds_done)
            rounds_done += 1


def route(reports: list[tuple[float, float, list[Any]]]) -> tuple[list[list[Any]], float]:
    """One meeting of the lockstep, decided: each worker's report is (its virtual time, its next
    deadline, its outbox of (destination, item)); returns each worker's inbox and when they all
    meet next. Items go in a fixed order (by source worker, then as sent), so that a run does
    not depend on how the processes were scheduled. Raises SimulationWorkerError when the
    workers are not at one instant."""
    now = reports[0][0]
    if any(at != now for at, _, _ in reports):
        raise SimulationWorkerError(f"simulation workers out of step: at {[at for at, _, _ in reports]}")
    workers = len(reports)
    inboxes: list[list[Any]] = [[] for _ in range(workers)]
    busy = False
    for source, (_, _, outbox) in enumerate(reports):
        for destination, item in outbox:
            busy = busy or item[0] in WAKING
            if destination == EVERYONE:
                for index in range(workers):
                    if index != source:
                        inboxes[index].append(item)
            elif 0 <= destination < workers and destination != source:
                inboxes[destination].append(item)
            else:
                raise SimulationWorkerError(f"worker {source} sent an item to worker {destination}")
    # A busy instant meets again at once: what was just handed over may answer or wake a task
    # now. A quiet one (nothing, or only notes that wake nobody) jumps to the earliest deadline
    # of any worker (each is after `now`).
    return inboxes, now if busy else min(next_at for _, next_at, _ in reports)


def merge_counters(parts: list[dict[int, Counter[str]]]) -> dict[int, Counter[str]]:
    merged: dict[int, Counter[str]] = {}
    for part in parts:
        for key, counter in part.items():
            merged.setdefault(key, Counter()).update(counter)
    return dict(sorted(merged.items()))
