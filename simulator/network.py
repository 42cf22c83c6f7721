"""The in-memory network: NetworkPort for virtual peers, on trio's (virtual) clock.

Over 600 lines: SimWorld is one medium (links, timers, partitions, delivery) whose parts share its state.

`SimWorld` is the medium all virtual peers share; `SimNetwork` is one peer's NetworkPort onto it.
What it models, and why it is enough for the questions the simulator answers:

- Latency: each link (pair of peers) has a fixed base latency drawn deterministically from the
  pair's ids in [latency_min_ms, latency_max_ms], plus uniform jitter per message.
- Bandwidth: each peer has an upload rate; its uploads are serialized (a peer serving 99 fetches
  of its batch sends them one after the other), which is what makes big batches and slow peers
  hurt. Download is not limited separately.
- Loss: every gossip delivery and every direct request is lost with probability `loss`. A lost
  request times out (the caller waits `timeout_s`), like a real dropped stream.
- Partitions: during [start, heal) peers on different sides cannot reach each other at all
  (gossip, requests and DHT reads of records written by the other side).
- Churn: a peer that goes offline stops receiving; requests to it fail after a connect delay.
- DHT: one shared table; a record is readable by peers that can reach its writer when they read
  (a partitioned side does not see the other side's records). Oldest records are evicted.

Virtual time is quantized to `LinkModel.time_grid_ms` (`_on_grid`; 1 ms by default, 10 ms in
the simulator's scenarios): events that land on the same grid point are handled in one pass of
trio's run loop instead of one pass each, which is much of the simulator's speed (a 10 ms grid
is still below the 10-80 ms latencies it models and far below the 5 s fetch timeout).
Deliveries go through ONE scheduler task and a heap, not a task per message: 100 peers publishing
to 99 others each round would otherwise spawn a million tasks over a run.
Everything random comes from one seeded stream (`UniformStream`: random.Random's floats), drawn
in a deterministic order, so a seed reproduces a run exactly (together with seeding trio's
scheduler; see simulator.runner).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs
import numpy as np
import trio

from simulator.fastpath.delivery import fast_handler
from simulator.fastpath.peer_sets import PeersExcept
from simulator.pair_latency import PairLatencies
from simulator.uniform_stream import UniformStream
from swarmp2p.ports import InboundMessage, InlineHandler, NetworkError, RequestHandler


@attrs.frozen
class LinkModel:
    latency_min_ms: float = 10.0
    latency_max_ms: float = 80.0
    jitter_ms: float = 5.0
    loss: float = attrs.field(default=0.0, validator=[attrs.validators.ge(0.0), attrs.validators.lt(1.0)])
    gossip_loss: float = attrs.field(
        default=0.0, validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )
    """Extra loss for gossip only (announcements), on top of `loss`: models a bad mesh while
    direct streams and the DHT still work."""
    upload_bytes_per_s: float = 12_500_000.0  # 100 Mbit/s
    connect_fail_ms: float = 200.0  # how long a dial to an offline peer takes to fail
    subscription_buffer: int = 100_000
    dht_max_records: int = 200_000
    time_grid_ms: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    """Resolution of the network's virtual time: every delivery, response and timeout is
    rounded UP to a multiple of it. Coarser grids put more events in one instant of trio's
    run loop (fewer passes) at the cost of latency resolution; the simulator uses 10 ms
    (`[network] time_grid_ms`), well below the modelled 10-80 ms latencies and 30 s rounds."""


@attrs.frozen
class Partition:
    """Peers in `side` cannot reach the others while start_ms <= now < heal_ms."""

    start_ms: int
    heal_ms: int
    side: frozenset[str]


@attrs.define
class _Node:
    peer_id: str
    online: bool = True
    handler: RequestHandler | None = None
    subscriptions: dict[str, trio.MemorySendChannel[InboundMessage]] = attrs.Factory(dict)
    # topic -> how a message is handed over: a channel's send_nowait, or an inline handler
    sinks: dict[str, Callable[[InboundMessage], object]] = attrs.Factory(dict)
    upload_free_at: float = 0.0
    upload_factor: float = 1.0  # < 1 for slow peers
    # gossip messages due to this node at the instant being delivered (SimWorld._deliver_instant)
    pending: list[InboundMessage] = attrs.Factory(list)
    # Run by another worker process (simulator/shards.py): here only its online state, from its
    # plan, so that `reachable_from` and requests see it; it never has sinks or a handler here.
    remote: bool = False


REQUEST_OK, REQUEST_UNREACHABLE, REQUEST_LOST = 0, 1, 2
"""How `SimWorld.serve` ends a request: answered, no such peer online, or lost (timed out)."""


class ShardPort(Protocol):
    """What a world that runs only some of the run's peers tells the worlds of the others
    (simulator/shards.py carries it between processes). When the others' peers come online and
    go offline is known from their plans, not told."""

    def broadcast(self, item: tuple[Any, ...]) -> None:
        """Hand `item` (a publish, a DHT record) to every other world."""

    async def call(self, target: str, requester: str, data: bytes) -> tuple[int, bytes, float]:
        """`SimWorld.serve` run by the world that runs `target`."""
        ...


BULK_MIN_RECEIVERS = 32
"""From this many subscribers on, publish computes arrival slots in numpy (see _slots_in_bulk)."""


def _on_grid(seconds: float, grid_ms: int) -> float:
    """Round a virtual time UP to the next multiple of `grid_ms` milliseconds."""
    return math.ceil(seconds * 1000 / grid_ms - 1e-6) * grid_ms / 1000


class SimWorld:
    def __init__(
        self,
        model: LinkModel,
        *,
        seed: int,
        now_ms: Callable[[], int],
        round_of: Callable[[int], int],
        inline_gossip: bool = False,
        shard: ShardPort | None = None,
    ) -> None:
        self.model = model
        self.inline_gossip = inline_gossip
        # None: every peer of the run lives in this world (one process). Otherwise this world
        # runs some peers and `shard` carries what they do to the others' worlds (shards.py).
        self.shard = shard
        # Every random draw of the world, in one stream: the floats random.Random(seed) gives,
        # also in bulk (publish's jitter, a float per delivery).
        self.rng = UniformStream(seed)
        self.now_ms = now_ms
        self.round_of = round_of
        self.nodes: dict[str, _Node] = {}
        self.partitions: list[Partition] = []
        self.dht: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self.stats: dict[int, Counter[str]] = {}
        # (at, seq, receivers, message) gossip deliveries and (at, seq, None, [task]) timed wakeups
        self._heap: list[tuple[float, int, list[_Node] | None, Any]] = []
        self._seq = 0
        self._wakeup = trio.Event()
        # Every pair's base latency, once per pair (simulator/pair_latency.py)
        self._latencies = PairLatencies(model.latency_min_ms, model.latency_max_ms)
        self._members_version = 0
        # topic -> (membership version, its online subscribers, their PairLatencies numbers)
        self._topic_members: dict[str, tuple[int, list[_Node], np.ndarray]] = {}
        # topic -> (membership version, id(member) -> position, the members as an object array)
        self._member_positions: dict[str, tuple[int, dict[int, int], np.ndarray]] = {}
        # The online peers as `reachable_from` shares them: a frozenset built at some point,
        # and the peers that came online since, in order (see _online_view); None: rebuild.
        self._online: tuple[frozenset[str], list[str], dict[str, int]] | None = None
        self._online_changes = 0  # attaches and detaches so far
        self._online_asked_at = -1  # `_online_changes` when `_online_view` was last called

    # ---- membership ----------------------------------------------------------------------

    def attach(self, peer_id: str, *, upload_factor: float = 1.0) -> SimNetwork:
        """Bring `peer_id` online with a fresh port (a restart gets a new one, like a new process)."""
        node = self.nodes.get(peer_id)
        was_online = node is not None and node.online
        if node is None:
            node = self.nodes[peer_id] = _Node(peer_id)
            self._latencies.number_of(peer_id)
        if not was_online:
            self._came_online(peer_id)
        node.online = True
        node.handler = None
        node.subscriptions = {}
        node.sinks = {}
        node.upload_factor = upload_factor
        self._membership_changed()
        return SimNetwork(self, peer_id)

    def detach(self, peer_id: str) -> None:
        """Take `peer_id` offline (crash or leave): in-flight deliveries to it are dropped."""
        node = self.nodes.get(peer_id)
        if node is None:
            return
        if node.online:
            self._online = None  # views already handed out keep theirs; the next ask rebuilds
            self._online_changes += 1
        node.online = False
        node.handler = None
        for channel in node.subscriptions.values():
            channel.close()
        node.subscriptions = {}
        node.sinks = {}
        self._membership_changed()

    def _came_online(self, peer_id: str) -> None:
        self._online_changes += 1
        if self._online is not None:
            _, joined, join_index = self._online
            join_index[peer_id] = len(joined)
            joined.append(peer_id)

    def _online_view(self) -> tuple[frozenset[str], list[str], dict[str, int]]:
        """The shared parts of `reachable_from`'s views: (base, joined, join_index). Rebuilt into
        one frozenset (O(peers)) when a peer went offline, when the joined list has outgrown
        the base (so the frozensets built while a swarm starts double in size: O(peers) in
        all), or when nothing changed since the last ask (a settled swarm: every lookup then
        hits the frozenset first)."""
        online = self._online
        if (
            online is None
            or len(online[1]) > max(64, len(online[0]))
            or (online[1] and self._online_asked_at == self._online_changes)
        ):
            base = frozenset(peer_id for peer_id, node in self.nodes.items() if node.online)
            online = self._online = (base, [], {})
        self._online_asked_at = self._online_changes
        return online

    def add_remote(self, peer_id: str) -> None:
        """Know `peer_id` as run by another worker: offline until its plan brings it online."""
        self.nodes[peer_id] = _Node(peer_id, online=False, remote=True)
        self._latencies.number_of(peer_id)

    def set_remote_online(self, peer_id: str, online: bool) -> None:
        """Another worker's peer comes online or goes offline (simulator/shards.py: as its plan
        says, at the start of the instant it does)."""
        node = self.nodes[peer_id]
        if online and not node.online:
            self._came_online(peer_id)
        elif node.online and not online:
            self._online = None
            self._online_changes += 1
        node.online = online

    def is_online(self, peer_id: str) -> bool:
        node = self.nodes.get(peer_id)
        return node is not None and node.online

    # ---- link model ----------------------------------------------------------------------

    def reachable(self, a: str, b: str) -> bool:
        if not self.partitions:
            return True
        now = self.now_ms()
        for partition in self.partitions:
            if partition.start_ms <= now < partition.heal_ms and (a in partition.side) != (
                b in partition.side
            ):
                return False
        return True

    def reachable_from(self, a: str) -> Sequence[str]:
        """Online peers other than `a` that `a` can reach now (one clock read, not one per peer)."""
        now = self.now_ms()
        cuts = [(p.side, a in p.side) for p in self.partitions if p.start_ms <= now < p.heal_ms]
        if not cuts:
            # Every peer asks this at every round start and sweep: one frozenset of the online
            # peers, shared by all of them (PeersExcept leaves `a` out on lookup), plus the peers
            # that came online since it was built, in order, also shared: a view holds only how
            # many of those it includes. A set per peer is O(peers) each (~5 GB at 10,000
            # peers), and so was a frozenset per ask while a swarm starts (each peer asks right
            # after it comes online, so each saw a different set: ~2.5 GB).
            base, joined, join_index = self._online_view()
            return PeersExcept(base, a, joined, join_index, len(joined))
        return [
            peer_id
            for peer_id, node in self.nodes.items()
            if node.online
            and peer_id != a
            and not any((peer_id in side) != a_inside for side, a_inside in cuts)
        ]

    def _base_latency_s(self, a: str, b: str) -> float:
        return self._latencies.get(a, b)

    def latency_s(self, a: str, b: str) -> float:
        return self._base_latency_s(a, b) + self.rng.random() * self.model.jitter_ms / 1000

    def _grid(self, seconds: float) -> float:
        return _on_grid(seconds, self.model.time_grid_ms)

    def _lost(self) -> bool:
        return self.model.loss > 0 and self.rng.random() < self.model.loss

    def _count(self, **amounts: int) -> None:
        self._count_at(self.now_ms(), **amounts)

    def _count_at(self, now_ms: int, **amounts: int) -> None:
        round_number = self.round_of(now_ms)
        stats = self.stats.get(round_number)
        if stats is None:  # not setdefault(..., Counter()): that builds a Counter on every call
            stats = self.stats[round_number] = Counter()
        for key, amount in amounts.items():
            stats[key] += amount

    def _upload_done_at(self, node: _Node, size: int) -> float:
        """Serialize `size` bytes on `node`'s upload link; returns when the last byte leaves."""
        now = trio.current_time()
        start = max(now, node.upload_free_at)
        node.upload_free_at = start + size / (self.model.upload_bytes_per_s * node.upload_factor)
        return node.upload_free_at

    # ---- gossip --------------------------------------------------------------------------

    def _audience(self, sender: str, topic: str) -> tuple[list[_Node], np.ndarray]:
        """The online subscribers of `topic` (attach order, `sender` included) and the base
        latency from `sender` to each, aligned. The subscribers are cached until membership or a
        subscription changes (rebuilding them on every publish was a third of the cost of
        gossip); the latencies are gathered from the pair triangle on each publish."""
        version = self._members_version
        cached = self._topic_members.get(topic)
        if cached is None or cached[0] != version:
            members = [node for node in self.nodes.values() if node.online and topic in node.sinks]
            number_of = self._latencies.number_of
            numbers = np.array([number_of(node.peer_id) for node in members], dtype=np.int64)
            cached = self._topic_members[topic] = (version, members, numbers)
        return cached[1], self._latencies.row(sender, cached[2])

    def _slots_in_bulk(
        self,
        node: _Node,
        topic: str,
        members: list[_Node],
        bases: np.ndarray,
        start: float,
        jitter_ms: float,
        grid_per_s: float,
    ) -> dict[float, list[_Node]]:
        """publish's arrival slots for a network without loss or partitions, in numpy: the same
        floats (one jitter draw per receiver, in member order, from the same stream), the same
        arithmetic in the same order, and the same slots in the same order as its loop."""
        version = self._members_version
        cached = self._member_positions.get(topic)
        if cached is None or cached[0] != version:
            as_objects = np.empty(len(members), dtype=object)
            as_objects[:] = members
            cached = (version, {id(member): i for i, member in enumerate(members)}, as_objects)
            self._member_positions[topic] = cached
        latency = bases
        receivers = cached[2]
        position = cached[1].get(id(node))
        if position is not None:  # the sender gets nothing, and draws nothing for itself
            receivers = np.delete(receivers, position)
            latency = np.delete(latency, position)
        draws = self.rng.take(len(receivers))
        if not len(receivers):
            return {}
        at = np.ceil((start + (latency + draws * jitter_ms / 1000)) * grid_per_s - 1e-6) / grid_per_s
        # One stable sort groups the receivers by slot, each slot's in member order; the slots
        # then go in order of their first receiver (np.unique and two argsorts did the same).
        order = np.argsort(at, kind="stable")
        sorted_at = at[order]
        starts = np.flatnonzero(np.concatenate(([True], sorted_at[1:] != sorted_at[:-1])))
        ends = np.append(starts[1:], len(order))
        slots: dict[float, list[_Node]] = {}
        for g in np.argsort(order[starts], kind="stable").tolist():
            begin, end = int(starts[g]), int(ends[g])
            slots[float(sorted_at[begin])] = receivers[order[begin:end]].tolist()
        return slots

    def _membership_changed(self) -> None:
        self._members_version += 1

    def publish(self, sender: str, topic: str, data: bytes) -> None:
        node = self.nodes.get(sender)
        if node is None or not node.online:
            raise NetworkError("publishing peer is offline")
        now = trio.current_time()
        now_ms = self.now_ms()
        # Gossip is relayed through the mesh: the sender uploads about one copy, not one per peer.
        sent_at = self._upload_done_at(node, len(data)) - now
        start = now + sent_at
        self._spread(node, topic, data, start, now_ms)
        if self.shard is not None:  # the other workers' peers get it from their own worlds
            self.shard.broadcast(("g", topic, sender, data, start, now_ms))

    def receive_remote_gossip(self, topic: str, sender: str, data: bytes, start: float, now_ms: int) -> None:
        """A message another worker's peer `sender` published at `now_ms` (its upload done by
        `start`): this world's own subscribers get it as from a local publish, drawn from this
        world's stream (shards.py). Called at the same virtual time as the publish."""
        self._spread(self.nodes[sender], topic, data, start, now_ms)

    def _spread(self, node: _Node, topic: str, data: bytes, start: float, now_ms: int) -> None:
        """Schedule `data` from `node` to this world's online subscribers of `topic` (`node`
        left out), each on its link's latency, loss and partitions, from `start` on."""
        sender = node.peer_id
        size = len(data)
        cuts = [p for p in self.partitions if p.start_ms <= now_ms < p.heal_ms]
        sender_cut = [sender in p.side for p in cuts]
        loss = self.model.loss
        gossip_loss = self.model.gossip_loss
        jitter_ms = self.model.jitter_ms
        random_draw = self.rng.random
        ceil = math.ceil
        grid_per_s = 1000 / self.model.time_grid_ms
        # Every receiver gets the SAME immutable message object (as from one gossip frame), and
        # receivers due in the same millisecond share one heap entry: one pop, one pass.
        message = InboundMessage(topic, sender, data)
        slots: dict[float, list[_Node]] = {}
        delivered = lost = cut = 0
        members, bases = self._audience(sender, topic)
        if not cuts and loss <= 0 and gossip_loss <= 0 and len(members) >= BULK_MIN_RECEIVERS:
            slots = self._slots_in_bulk(node, topic, members, bases, start, jitter_ms, grid_per_s)
            delivered = sum(len(receivers) for receivers in slots.values())
        else:  # a lossy or partitioned network: draws depend on earlier draws, one by one
            for receiver, base in zip(members, bases.tolist(), strict=True):
                if receiver is node:
                    continue
                if cuts and any(
                    (receiver.peer_id in p.side) != side for p, side in zip(cuts, sender_cut, strict=True)
                ):
                    cut += 1
                    continue
                if loss > 0 and random_draw() < loss:
                    lost += 1
                    continue
                if gossip_loss > 0 and random_draw() < gossip_loss:
                    lost += 1
                    continue
                delivered += 1
                # _on_grid(start + latency), inlined: this line runs ~10k times per virtual round
                at = (
                    ceil((start + (base + random_draw() * jitter_ms / 1000)) * grid_per_s - 1e-6) / grid_per_s
                )
                slot = slots.get(at)
                if slot is None:
                    slots[at] = [receiver]
                else:
                    slot.append(receiver)
        for at, receivers in slots.items():
            self._seq += 1
            heapq.heappush(self._heap, (at, self._seq, receivers, message))
        self._count_at(
            now_ms,
            gossip_messages=delivered,
            gossip_bytes=delivered * size,
            dropped_loss=lost,
            dropped_partition=cut,
        )
        self._wakeup.set()

    async def sleep(self, seconds: float) -> None:
        """Virtual-time sleep for any task of the simulation, on the same timer heap as the
        network's own waits: no cancel scope, no Cancelled exception at the end."""
        await self._wait_until(trio.current_time() + seconds)

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Callable[[], None]], None]) -> None:
        """Sleep `seconds` of virtual time on the timer heap, or less: `set_waker` is called
        first with a callable that reschedules the sleeper at once (a no-op once it has woken)."""
        await self._wait_until(trio.current_time() + seconds, set_waker=set_waker)

    async def _wait_until(
        self, at: float, *, set_waker: Callable[[Callable[[], None]], None] | None = None
    ) -> None:
        """Park until virtual time `at` (on the ms grid).

        The task parks itself with trio's low-level primitives and the delivery task
        reschedules it when `at` comes: no cancel scope and no Event per wait (a fetch waits
        twice). If the waiter is cancelled first, its heap entry is disarmed and skipped."""
        if at <= trio.current_time():
            await trio.lowlevel.checkpoint()
            return
        waiter = [trio.lowlevel.current_task()]
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, None, waiter))
        self._wakeup.set()
        if set_waker is not None:

            def wake() -> None:
                task = waiter[0]
                if task is not None:
                    waiter[0] = None  # the heap entry, when it comes, finds nothing to wake
                    trio.lowlevel.reschedule(task)

            set_waker(wake)

        def abort(_: Any) -> trio.lowlevel.Abort:
            waiter[0] = None  # disarm: run_deliveries must not reschedule a task that moved on
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def run_deliveries(self) -> None:
        """The one task that hands gossip to subscribers and wakes waiters when their time comes."""
        heap = self._heap
        while True:
            if not heap:
                await self._wakeup.wait()
                self._wakeup = trio.Event()
                continue
            at = heap[0][0]
            if at > trio.current_time():
                with trio.move_on_at(at):
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                continue
            deliveries: list[tuple[InboundMessage, list[_Node]]] = []
            while heap and heap[0][0] <= at:
                _, _, receivers, item = heapq.heappop(heap)
                if receivers is None:
                    task = item[0]
                    if task is not None:
                        item[0] = None
                        trio.lowlevel.reschedule(task)
                    continue
                deliveries.append((item, receivers))
            if deliveries:
                self._deliver_instant(deliveries)

    def _deliver_instant(self, deliveries: list[tuple[InboundMessage, list[_Node]]]) -> None:
        """Hand the gossip of one instant to its receivers: receiver by receiver, each with its
        messages in delivery order. Receivers subscribed with an `InlineHandler` sharing one
        `many` get theirs in one call (each message opened once; see
        simulator/fastpath/delivery.py); any other sink, one call per message.

        Why receiver by receiver: at 1000 peers an instant brings ~125 messages to each peer, and
        a peer's admission state (its inbox, round, dicts of 1000 senders) is then looked up once
        and stays in the CPU's cache for all of them; message by message, every delivery found
        another peer's state cold. Each receiver still sees its own messages in order, and
        nothing a receiver decides at an instant depends on another's: only the order in which
        peers' tasks are woken can differ from message by message (no report byte changed in
        the 12 scenarios checked, docs/benchmarks.md)."""
        topic = deliveries[0][0].topic
        if any(message.topic != topic for message, _ in deliveries):
            # Several topics at once (not in the simulator's own runs): message by message, so
            # that each receiver's messages of different topics keep their order.
            for message, receivers in deliveries:
                self._deliver(message, receivers)
            return
        touched: list[_Node] = []
        for message, receivers in deliveries:
            for node in receivers:
                pending = node.pending
                if not pending:
                    touched.append(node)
                pending.append(message)
        runs: list[tuple[_Node, list[InboundMessage]]] = []
        for node in touched:
            runs.append((node, node.pending))
            node.pending = []
        self._hand_over(topic, runs)

    def _deliver(self, message: InboundMessage, receivers: list[_Node]) -> None:
        """Hand `message` to `receivers` in order (see `_hand_over`)."""
        self._hand_over(message.topic, [(node, [message]) for node in receivers])

    def _hand_over(self, topic: str, runs: list[tuple[_Node, list[InboundMessage]]]) -> None:
        """Hand each node of `runs` its messages on `topic`, in order. Consecutive nodes
        subscribed with an `InlineHandler` sharing one `many` get theirs in one call (each
        message judged once, then each receiver: see simulator/fastpath/delivery.py); any
        other sink, one call per message. A node offline or not subscribed drops its messages."""
        dropped = 0
        batch: list[tuple[Any, list[InboundMessage]]] = []
        batch_many: Callable[[list[tuple[Any, list[InboundMessage]]]], None] | None = None
        for node, messages in runs:
            sink = node.sinks.get(topic) if node.online else None
            if sink is None:
                dropped += len(messages)
                continue
            if type(sink) is InlineHandler:
                if sink.many is not batch_many:
                    if batch:
                        batch_many(batch)  # type: ignore[misc]
                    batch, batch_many = [], sink.many
                batch.append((sink.receiver, messages))
                continue
            if batch:
                batch_many(batch)  # type: ignore[misc]
                batch, batch_many = [], None
            for message in messages:
                try:
                    sink(message)
                except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                    self._count(dropped_queue=1)
        if batch:
            batch_many(batch)  # type: ignore[misc]
        if dropped:
            self._count(dropped_offline=dropped)

    # ---- direct requests -----------------------------------------------------------------

    async def request(self, requester: str, target: str, data: bytes, timeout_s: float) -> bytes:
        started = trio.current_time()
        deadline = self._grid(started + timeout_s)
        self._count(requests=1, request_bytes=len(data))
        node = self.nodes.get(target)
        if node is not None and node.remote and self.shard is not None:
            # Served by the worker that runs `target`, at this same virtual time (shards.py).
            status, response, arrives = await self.shard.call(target, requester, data)
        else:
            status, response, arrives = await self.serve(requester, target, data)
        if status == REQUEST_UNREACHABLE:
            await self._wait_until(self._grid(started + min(timeout_s, self.model.connect_fail_ms / 1000)))
            raise NetworkError(f"peer {target} is unreachable")
        if status == REQUEST_LOST or arrives > deadline:
            await self._wait_until(deadline)
            self._count(request_timeouts=1)
            raise NetworkError(f"request to {target} timed out")
        await self._wait_until(arrives)
        if not node.online or not self.is_online(requester):
            raise NetworkError(f"request to {target} failed: peer went offline")
        self._count(responses=1, response_bytes=len(response))
        return response

    async def serve(self, requester: str, target: str, data: bytes) -> tuple[int, bytes, float]:
        """The serving end of a request to `target`, a peer of this world: (REQUEST_OK, the
        answer, when it reaches `requester`), or REQUEST_UNREACHABLE / REQUEST_LOST."""
        node = self.nodes.get(target)
        if node is None or not node.online or node.handler is None:
            return REQUEST_UNREACHABLE, b"", 0.0
        if not self.reachable(requester, target) or self._lost():
            return REQUEST_LOST, b"", 0.0
        # The handler runs when the request is sent rather than one latency later: the serving
        # peer's state cannot change in a way that matters within one link latency (it published
        # before it announced), and one wait per request instead of two halves the scheduling work.
        response = await node.handler(requester, data)
        arrives = self._upload_done_at(node, len(response)) + self.latency_s(requester, target)
        return REQUEST_OK, response, self._grid(arrives + self.latency_s(target, requester))

    # ---- DHT -----------------------------------------------------------------------------

    async def dht_put(self, writer: str, key: str, value: bytes) -> None:
        await self._wait_until(self._grid(trio.current_time() + self.latency_s(writer, writer) * 2))
        self.store_dht_record(writer, key, value)
        if self.shard is not None:  # every worker holds the whole table
            self.shard.broadcast(("d", writer, key, value))
        self._count(dht_puts=1, dht_bytes=len(value))

    def store_dht_record(self, writer: str, key: str, value: bytes) -> None:
        self.dht[key] = (writer, value)
        self.dht.move_to_end(key)
        while len(self.dht) > self.model.dht_max_records:
            self.dht.popitem(last=False)

    async def dht_get(self, reader: str, key: str) -> bytes | None:
        await self._wait_until(self._grid(trio.current_time() + self.latency_s(reader, reader) * 2))
        self._count(dht_gets=1)
        record = self.dht.get(key)
        if record is None or not self.reachable(reader, record[0]):
            return None
        return record[1]

    def online_peers(self) -> list[str]:
        return [peer_id for peer_id, node in self.nodes.items() if node.online]


class SimClock:
    """The Clock port of a simulated peer: `now_ms` from the run's clock, and the round loop's
    wakeable sleep parked on the world's timer heap instead of in a trio cancel scope (a
    cancel scope that fires costs ~40 us, ~800 times a virtual round at 100 peers)."""

    def __init__(self, world: SimWorld, clock: Any) -> None:
        self._world = world
        self.now_ms = clock.now_ms

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Callable[[], None]], None]) -> None:
        await self._world.sleep_wakeable(seconds, set_waker)


class SimNetwork:
    """One virtual peer's NetworkPort onto a SimWorld."""

    bounds_waits = True
    """NetworkPort.bounds_waits: `request` returns or raises by its `timeout_s` (the world's
    deadline) and `dht_get` within two link latencies, so the Peer needs no cancel scope of its
    own around them."""
    push_max_bytes = 0
    """NetworkPort.push_max_bytes: peers announce and fetch. The world models a fetch's
    latency and loss per request; a push would bypass that model (libp2p nodes push small
    batches: swarmp2p/pushed.py)."""

    def __init__(self, world: SimWorld, peer_id: str) -> None:
        self._world = world
        self._peer_id = peer_id

    @property
    def local_peer_id(self) -> str:
        return self._peer_id

    def _node(self) -> _Node:
        node = self._world.nodes[self._peer_id]
        if not node.online:
            raise NetworkError("this peer is offline")
        return node

    async def publish(self, topic: str, data: bytes) -> None:
        self._world.publish(self._peer_id, topic, data)
        await trio.lowlevel.checkpoint()

    async def subscribe(self, topic: str) -> Any:
        node = self._node()
        send, receive = trio.open_memory_channel[InboundMessage](self._world.model.subscription_buffer)
        node.subscriptions[topic] = send
        node.sinks[topic] = send.send_nowait
        self._world._membership_changed()
        await trio.lowlevel.checkpoint()
        return receive

    def set_gossip_priority(self, established: Callable[[str], bool]) -> None:
        """NetworkPort.set_gossip_priority: the simulated network has no bounded gossip inbox
        that would drop messages, so it has nothing to keep."""

    def subscribe_inline(self, topic: str, handler: Callable[[InboundMessage], None]) -> bool:
        """NetworkPort.subscribe_inline: when the world runs with
        `inline_gossip`, call `handler` synchronously in the delivery task for each message on
        `topic` and return True; otherwise return False and the caller uses `subscribe`.

        Why: handing a message over through a channel costs a send, a receive and a wake-up of
        the receiver's task, ~10k times per round at 100 peers. The handler is the same
        validation code the receive loop runs; only the hand-over differs."""
        if not self._world.inline_gossip:
            return False
        node = self._node()
        # A fetcher's handler gets the fast path for many receivers at once (the same decisions).
        node.sinks[topic] = fast_handler(handler) if type(handler) is InlineHandler else handler
        self._world._membership_changed()
        return True

    async def sleep_wakeable(self, seconds: float, set_waker: Callable[[Callable[[], None]], None]) -> None:
        """An idle wait that can be cut short, parked on the world's timer heap (SimClock's)."""
        await self._world.sleep_wakeable(seconds, set_waker)

    def set_request_handler(self, handler: RequestHandler) -> None:
        self._node().handler = handler

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise NetworkError("timeout must be positive")
        return await self._world.request(self._peer_id, peer_id, data, timeout_s)

    async def dht_put(self, key: str, value: bytes) -> None:
        self._node()
        await self._world.dht_put(self._peer_id, key, value)

    async def dht_get(self, key: str) -> bytes | None:
        self._node()
        return await self._world.dht_get(self._peer_id, key)

    def connected_peers(self) -> Sequence[str]:
        return self._world.reachable_from(self._peer_id)
