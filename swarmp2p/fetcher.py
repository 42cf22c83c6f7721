"""Inbound batches: announcements heard (from a receive loop, or inline from the transport),
the DHT sweep, a bounded queue of fetch jobs, `fetch_concurrency` workers, and the IO of one
fetch (a direct request to the announcer, else the DHT record). Which jobs to run and what to
make of the bytes that come back is the admission inbox's call (protocol/admission.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from protocol.admission import Accept, Fetch, FetchJob, Hold, Inbox, NeedInputs, OpenedOnce
from protocol.errors import ProtocolError
from protocol.messages import FetchRequest, FetchResponse
from swarmp2p.fetch_queue import LaneQueue
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.peer_settings import PeerSettings, batch_dht_key
from swarmp2p.ports import InboundMessage, InlineHandler, NetworkError, NetworkPort
from swarmp2p.pushed import PushedBatches, unwrap

log = logging.getLogger("swarmp2p.peer")

Fetched = tuple[bytes, bool] | None
"""(envelope, came directly from the announcer) or None: found nowhere."""


class Fetcher:
    def __init__(
        self,
        settings: PeerSettings,
        peer_id: str,
        network: NetworkPort,
        inbox: Inbox,
        cache: VerifyCache,
        *,
        on_hold: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.peer_id = peer_id
        self.network = network
        self.inbox = inbox
        self.cache = cache
        self.counters = inbox.counters
        self._on_hold = on_hold  # an announcement for the next round: the swarm has moved on
        self._queue: LaneQueue[FetchJob] | None = None
        # True when `request` and `dht_get` always return within their own timeout (the
        # simulator's network does). Then our own deadline around them would never fire, and a
        # cancel scope per fetch is a visible cost at 100 peers.
        self._waits_bounded = network.bounds_waits is True
        # Pushed envelopes (swarmp2p/pushed.py) of announcements the inbox chose to fetch: at
        # most one per queued job, taken by the worker that runs it.
        self.pushed = PushedBatches(settings.max_fetch_per_round + settings.fetch_concurrency, self.counters)

    def start(self, nursery: trio.Nursery) -> None:
        settings = self.settings
        # Lane 1 is unknown keys' (Inbox.fetch_lane): some workers always stay free for lane 0.
        unknown_workers = max(1, min(settings.unknown_fetch_concurrency, settings.fetch_concurrency - 1))
        self._queue = queue = LaneQueue[FetchJob](
            settings.max_fetch_per_round, lane_limits={1: unknown_workers}
        )
        for _ in range(self.settings.fetch_concurrency):
            nursery.start_soon(self._worker, queue)

    def enqueue(self, job: FetchJob) -> bool:
        assert self._queue is not None
        try:
            # The inbox picks the lane: established senders' fetches run before unknown keys'.
            self._queue.put_nowait(job, self.inbox.fetch_lane(job.sender))
            self.inbox.queued(job)
            return True
        except trio.WouldBlock:
            self.inbox.reject("fetch_queue_full", blame=None)
            return False

    def take(self, decision: object) -> None:
        """Carry out an inbox decision: queue a Fetch; a Hold wakes the round loop."""
        if isinstance(decision, Fetch):
            self.enqueue(decision.job)
        elif isinstance(decision, Hold):
            self._on_hold()

    async def receive_loop(self, channel: Any) -> None:
        async for first in channel:
            # Drain whatever else is already queued without yielding per message: a burst of
            # announcements then costs one scheduler round trip, not one each.
            message = first
            while True:
                self.handle_announcement(message)
                try:
                    message = channel.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break

    def handle_announcement(self, message: InboundMessage) -> None:
        """One inbound announcement, from the receive loop or a transport's inline delivery
        (`subscribe_inline`). Never raises."""
        try:
            self.on_announcement(message)
        except Exception:
            log.exception("%s: handling an announcement failed", self.peer_id)
            self.inbox.reject("internal_error", blame=None)

    def inline_handler(self) -> InlineHandler:
        """What the Peer subscribes inline with: per message, or (the simulator's world) the
        messages of one instant for many fetchers at once."""
        return InlineHandler(self.handle_announcement, Fetcher.handle_announcement_many, self)

    @staticmethod
    def handle_announcement_many(deliveries: list[tuple[Fetcher, list[InboundMessage]]]) -> None:
        """`handle_announcement(message)` for each fetcher and each of its messages in order.
        An in-process transport may put a faster call with the same decisions in its place (the
        simulator's, simulator/fastpath/delivery.py). Never raises."""
        for fetcher, messages in deliveries:
            for message in messages:
                fetcher.handle_announcement(message)

    def on_announcement(self, message: InboundMessage) -> None:
        sender = message.transport_sender
        try:
            # A small batch may ride along (eager push): the announcement is judged alone.
            announcement, pushed = unwrap(message.data)
        except ProtocolError as error:
            self.inbox.reject(error.reason, blame=sender)
            return
        self.announced(sender, announcement, None, pushed)

    def announced(
        self, sender: str, data: bytes, shared: OpenedOnce | None, pushed: bytes | None = None
    ) -> None:
        """An announcement (its envelope `data`, unwrapped) from `sender`: the inbox decides."""
        inbox = self.inbox
        if inbox.unknown_budget_full() and not inbox.established(sender):
            # Peers connect during a round too (a node opens round 0 before the others are up):
            # before a sender is refused as an unknown key, learn who is connected now. Only
            # then: this runs per delivery, and asking the network costs a walk of its peers.
            inbox.peers_connected(self.network.connected_peers())
        decision = inbox.heard(sender, data, shared)
        if pushed is not None and isinstance(decision, Fetch):
            # Kept only for a batch the inbox wants: deferred or refused ones go at once.
            job = decision.job
            self.pushed.keep(job.sender, job.digest, pushed)
            if not self.enqueue(job):
                self.pushed.discard(job.sender, job.digest)
            return
        self.take(decision)

    def sweep(self) -> None:
        """The sweep is due: queue DHT lookups for the batches of known peers that announced
        nothing this round (lost gossip, or we joined after they announced)."""
        for job in self.inbox.sweep(self.network.connected_peers()):
            self.enqueue(job)

    async def _worker(self, queue: LaneQueue[FetchJob]) -> None:
        async with queue.worker():
            while True:
                job = await queue.get()
                try:
                    accepted = await self._fetch_and_verify(job)
                except Exception:
                    log.exception("%s: fetching from %s failed unexpectedly", self.peer_id, job.sender)
                    self.inbox.reject("internal_error", blame=None)
                    accepted = False
                finally:
                    queue.done()
                if not accepted and not job.dht_only:
                    top_up = self.inbox.top_up(job.round)
                    if top_up is not None:
                        self.enqueue(top_up.job)

    async def _fetch_and_verify(self, job: FetchJob) -> bool:
        pushed = self.pushed.take(job.sender, job.digest)
        if not self.inbox.may_fetch(job):
            return False
        if pushed is not None:
            # Pushed with its announcement by its author: judged below exactly as if fetched
            # from the author directly.
            self.counters["pushed_used"] += 1
            fetched: Fetched = (pushed, True)
        else:
            fetched = await (self._swept(job) if job.dht_only else self._fetch(job))
        envelope, direct = fetched if fetched is not None else (None, False)
        decision = self.inbox.fetched(job, envelope, direct)
        if isinstance(decision, NeedInputs):
            # A later stage's batch built on batches we never fetched: get them, then judge it.
            await self._fetch_inputs(decision.jobs, depth=job.stage - 1)
            decision = self.inbox.fetched(job, envelope, direct, inputs_fetched=True)
        return isinstance(decision, Accept)

    async def _fetch_inputs(self, jobs: tuple[FetchJob, ...], depth: int) -> None:
        """Fetch referenced batches (from each author, else the DHT) into the inbox's inputs;
        an input that is itself a later stage's may need its own (`depth` more levels)."""
        for job in jobs:
            fetched = await self._fetch(job)
            envelope = fetched[0] if fetched is not None else None
            more = self.inbox.input_fetched(job, envelope, last=depth <= 0)
            if isinstance(more, NeedInputs):
                await self._fetch_inputs(more.jobs, depth - 1)
                self.inbox.input_fetched(job, envelope, last=True)

    async def _fetch(self, job: FetchJob) -> Fetched:
        """The batch envelope from its announcer (direct stream), else from the DHT."""
        request = self.cache.encode(
            FetchRequest(
                swarm_id=self.settings.swarm_id, round=job.round, stage=job.stage, peer_id=job.sender
            )
        )
        self.counters["fetches"] += 1
        if self._waits_bounded:
            fetched = await self._request_batch(job, request)
        else:
            fetched = None  # what the limit below leaves when it cancels the request
            # Belt and braces over the port's own timeout.
            with trio.move_on_after(self.settings.fetch_timeout_s * 2):
                fetched = await self._request_batch(job, request)
        if fetched is not None:
            return fetched
        self.counters["dht_fallbacks"] += 1
        return await self._from_dht(job)

    async def _request_batch(self, job: FetchJob, request: bytes) -> Fetched:
        try:
            raw = await self.network.request(job.sender, request, self.settings.fetch_timeout_s)
            response = self.cache.decode(raw)
        except (NetworkError, ProtocolError):
            return None
        if isinstance(response, FetchResponse) and response.found:
            return response.envelope, True
        return None

    async def _swept(self, job: FetchJob) -> Fetched:
        """A sweep job (no announcement heard): from the peer itself while it is connected (a
        stream of its own, so a gossip link held up for seconds by a flood does not matter), else
        or then from the DHT. Measured in the flood test on one busy core: the neighbour's gossip
        arrived 3-7 s late while its fetch streams answered in a millisecond, and the DHT lookup
        timed out (tests/node/test_peer_inbound.py)."""
        if job.sender in self.network.connected_peers():
            return await self._fetch(job)
        return await self._from_dht(job)

    async def _from_dht(self, job: FetchJob) -> Fetched:
        if self._waits_bounded:
            return await self._dht_lookup(job)
        with trio.move_on_after(self.settings.fetch_timeout_s):
            return await self._dht_lookup(job)
        return None  # timed out

    async def _dht_lookup(self, job: FetchJob) -> Fetched:
        try:
            value = await self.network.dht_get(
                batch_dht_key(self.settings.swarm_id, job.round, job.stage, job.sender)
            )
        except NetworkError:
            return None
        if value is not None and len(value) <= self.settings.max_batch_bytes:
            return value, False
        return None
