"""The node's round loop, written once: run by `swarmp2p node` (libp2p) and by the simulator.

`Peer` is a driver. The rules live in the sans-IO core: `protocol.rounds.RoundMachine` decides
when a round opens, is skipped or abandoned, when to collect, sweep, train and report;
`protocol.admission.Inbox` decides which announcements to fetch, defer or reject and which
fetched batches to accept; `protocol.game.Game` says which questions a peer answers and how a
batch is verified. The Peer feeds them events with the time, and carries out what they return
through four ports (swarmp2p/ports.py): NetworkPort, CoordinatorPort, PolicyPort and Clock.

One round end to end, and how the parts fit: docs/architecture.md.

Over 400 lines: the driver, and beside it the surface that tools and tests use
(`status`, the settings setter, `_state`, `_early`, `_serve_fetch`, `_on_announcement`, the
re-exports in `__all__`).

Inbound handling never raises out of the Peer: protocol failures become counted rejections
(`rejections[reason]`) and, when the fault is attributable, a strike against the sender in
`protocol.scoring.PeerScores`. Anything unexpected while handling ONE message is logged and
counted as "internal_error".

Threads: `offload` runs the synchronous policy calls. A real node passes
`trio.to_thread.run_sync` bound to ONE CapacityLimiter (the default); the simulator runs them
inline, because worker threads would break MockClock's deterministic virtual time.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import trio

from protocol import rounds as ev  # the machine's events and actions
from protocol.admission import PROOF_OF_LYING, Inbox
from protocol.envelope import peer_id_from_public_key, public_key_from_seed
from protocol.games import spec_of
from protocol.rounds import IllegalTransition, RoundMachine, learn_stage_ms, too_late_to_start
from protocol.sampling import SamplingState
from protocol.scoring import PeerScores
from protocol.seeds import derive_seed
from protocol.sender_map import PeerNumbers
from protocol.tasks import TaskRegistry
from swarmp2p import round_steps as steps
from swarmp2p.fetcher import Fetcher
from swarmp2p.heldout import HeldOutEvaluation
from swarmp2p.idle_wait import IdleWait
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.peer_settings import (
    PeerSettings,
    admission_rules,
    announce_topic,
    assigned_questions,
    batch_dht_key,
    game_of,
    round_timing,
    stage_plan,
)
from swarmp2p.ports import Clock, CoordinatorError, CoordinatorPort, InboundMessage, NetworkPort, PolicyPort
from swarmp2p.publisher import Publisher
from swarmp2p.round_pace import (
    GenerationTimes,
    Pace,
    apply_threads,
    deepest_level,
    policy_threads,
    scaled,
    times_of,
)
from swarmp2p.round_record import RoundHistory, RoundRecord, RoundWork, record_of
from swarmp2p.round_steps import Offload

__all__ = [
    "PROOF_OF_LYING",
    "Peer",
    "PeerSettings",
    "RoundRecord",
    "announce_topic",
    "assigned_questions",
    "batch_dht_key",
    "derive_seed",
    "learn_stage_ms",
    "too_late_to_start",
]

log = logging.getLogger("swarmp2p.peer")


class Peer:
    """One swarm member's round loop. Construct, then `await peer.run()` inside a nursery.

    Args:
        settings: swarm-wide and local parameters (`PeerSettings`).
        signing_seed: the 32-byte Ed25519 seed of this node's identity; its peer id must equal
            `network.local_peer_id` (ValueError otherwise).
        network, coordinator, policy, registry, clock: the ports (swarmp2p/ports.py).
        offload: `await offload(fn, *args)` runs a synchronous policy call; default: one worker
            thread (trio.to_thread.run_sync on one CapacityLimiter).
        on_round_complete: called with each RoundRecord (completed or abandoned); exceptions
            from it are logged, never propagated.
        verify_cache: a VerifyCache to share (the simulator shares one across all peers).
        peer_numbers: a numbering of peers to share: the inbox then keeps its per-sender maps as
            lists by number (the simulator's, for memory: protocol/sender_map.py); a node's
            keeps dicts.
        stopping: says whether the node is stopping (`swarmp2p node`'s stop): held-out
            evaluation then leaves the policy's cancel set and counts no failure.
    """

    def __init__(
        self,
        settings: PeerSettings,
        signing_seed: bytes,
        network: NetworkPort,
        coordinator: CoordinatorPort,
        policy: PolicyPort,
        registry: TaskRegistry,
        clock: Clock,
        *,
        offload: Offload | None = None,
        on_round_complete: Callable[[RoundRecord], None] | None = None,
        verify_cache: VerifyCache | None = None,
        peer_numbers: PeerNumbers | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        if len(signing_seed) != 32:
            raise ValueError("signing_seed must be 32 bytes (an Ed25519 seed)")
        self._settings = settings
        self.peer_id = peer_id_from_public_key(public_key_from_seed(signing_seed))
        if network.local_peer_id != self.peer_id:
            raise ValueError(
                f"network peer id {network.local_peer_id} does not match the signing key's {self.peer_id}"
            )
        self._seed = signing_seed
        self.network = network
        self.coordinator = coordinator
        self.policy = policy
        self.registry = registry
        self.clock = clock
        self._offload = offload or steps.thread_offload()
        self.cache = verify_cache if verify_cache is not None else VerifyCache(max_entries=4096)

        self.machine = RoundMachine(timing=round_timing(settings), plan=stage_plan(settings))
        self.game = game_of(settings, registry)
        self.scores = PeerScores(ban_threshold=settings.ban_threshold)
        self.counters: Counter[str] = Counter()
        self.inbox = Inbox(
            admission_rules(settings, self.peer_id),
            self.machine,
            self.game,
            opener=self.cache,
            scores=self.scores,
            counters=self.counters,
            peer_numbers=peer_numbers,
            store=spec_of(settings.game).store(),
        )
        self._last_round: int | None = None  # the newest round opened or skipped (for missed ones)
        self.rounds = RoundHistory(self.peer_id, settings.history_limit, on_round_complete)
        self.history = self.rounds.records
        self.sampling_state = SamplingState()  # what the sampling rule remembers between rounds
        self.evaluation = HeldOutEvaluation(
            settings.evaluation, self.counters, self.peer_id, stopping=stopping
        )
        self._stopping = stopping or (lambda: False)
        self.topic = announce_topic(settings.swarm_id)
        self.idle = IdleWait(clock)
        self.fetcher = Fetcher(
            settings, self.peer_id, network, self.inbox, self.cache, on_hold=self.idle.wake_up
        )
        self.publisher = Publisher(
            settings, self.peer_id, signing_seed, network, self.inbox, self.cache, self.counters
        )

        self._work: RoundWork | None = None
        self._abandoned: RoundWork | None = None
        self._actions: deque[ev.Action] = deque()
        # How much of its own work fits a round here (swarmp2p/round_pace.py).
        self.pace = Pace(threads=policy_threads(policy))
        self.generations = GenerationTimes()

    # ---- public surface -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Join the swarm and run rounds until cancelled."""
        try:
            restored = await self._offload(self.policy.load)
            self.counters["checkpoint_restored" if restored else "checkpoint_fresh"] += 1
        except Exception:
            log.exception("%s: loading the checkpoint failed; starting fresh", self.peer_id)
            self.counters["load_failed"] += 1
        if self.evaluation.wants_before_train():  # `swarmp2p node` runs it before joining instead
            await self.evaluation.run(self.policy, self._offload, self.clock.now_ms, None)
        inline = self.network.subscribe_inline(self.topic, self.fetcher.inline_handler())
        channel = None if inline else await self.network.subscribe(self.topic)
        # A full gossip inbox keeps established senders' messages.
        self.network.set_gossip_priority(lambda sender: self.inbox.established(sender))
        self.network.set_request_handler(self.publisher.serve)
        await self._register()
        async with trio.open_nursery() as nursery:
            if channel is not None:
                nursery.start_soon(self.fetcher.receive_loop, channel)
            self.fetcher.start(nursery)
            task_status.started()
            await self._round_loop()

    def status(self) -> dict[str, Any]:
        """JSON-able snapshot for the dashboard and logs."""
        return {
            "peer_id": self.peer_id,
            "swarm_id": self.settings.swarm_id,
            "round": self.machine.round,
            "phase": self.machine.phase.value,
            "peers": len(self.network.connected_peers()),
            "history": [record.to_json() for record in self.history[-100:]],
            "counters": dict(sorted(self.counters.items())),
            "rejections": dict(sorted(self.rejections.items())),
            "banned": self.banned_peers(),
            **self.evaluation.status(),
            "pace": self.pace.status(
                self.settings.questions_per_round, self.settings.n_local, self.settings.n_external
            ),
        }

    @property
    def settings(self) -> PeerSettings:
        return self._settings

    @settings.setter
    def settings(self, settings: PeerSettings) -> None:
        """Replace the settings of a peer that has not started yet (tests vary one peer)."""
        self._settings = settings
        self.machine.timing = round_timing(settings)
        self.machine.plan = stage_plan(settings)
        self.game = self.inbox.game = game_of(settings, self.registry)
        self.inbox.rules = admission_rules(settings, self.peer_id)
        self.scores.ban_threshold = settings.ban_threshold
        self.fetcher.settings = self.publisher.settings = settings
        self.rounds.limit = settings.history_limit

    @property
    def rejections(self) -> Counter[str]:
        return self.inbox.rejections

    def is_banned(self, peer_id: str) -> bool:
        return self.scores.is_banned(peer_id)

    def banned_peers(self) -> list[str]:
        return sorted(self.scores.banned)

    @property
    def current_work(self) -> RoundWork | None:
        """The round being played now (None between rounds): what the dashboard's rollout feed shows."""
        return self._work

    # Kept for tests and tools that look inside a running peer.
    @property
    def _state(self) -> RoundWork | None:
        return self._work

    @property
    def _early(self) -> dict[int, Any]:
        return self.inbox.early

    async def _serve_fetch(self, requester: str, data: bytes) -> bytes:
        return await self.publisher.serve(requester, data)

    def _on_announcement(self, message: InboundMessage) -> None:
        self.fetcher.on_announcement(message)

    # ---- the round loop -------------------------------------------------------------------

    async def _register(self) -> None:
        try:
            await self.coordinator.register(self.peer_id)
        except CoordinatorError as error:
            log.warning("%s: register failed: %s", self.peer_id, error.reason)
            self.counters["register_failed"] += 1
        except Exception:
            log.exception("%s: register failed", self.peer_id)
            self.counters["register_failed"] += 1

    async def _round_loop(self) -> None:
        while True:
            await self._poll()
            self._feed(ev.Tick())
            while self._actions:
                await self._perform(self._actions.popleft())
                if self.machine.round_over(self.clock.now_ms()):
                    # Our work outlasted the round (a slow peer, or one that restarted in the
                    # round's last seconds): a newer round abandons this one now, instead of
                    # finishing it late and starting the next one late too.
                    await self._poll()
                self._feed(ev.Tick())  # the collect deadline may have passed while we worked
            self._feed(ev.Idle())  # the DHT sweep, when due
            while self._actions:
                await self._perform(self._actions.popleft())
            now = self.clock.now_ms()
            await self.idle.until(self.machine.wake_at_ms(now, int(self.settings.poll_interval_s * 1000)))

    async def _poll(self) -> None:
        try:
            info = await self.coordinator.current()
        except CoordinatorError as error:
            self.counters[f"coordinator_{error.reason}"] += 1
            return
        except Exception:
            log.exception("%s: coordinator poll failed", self.peer_id)
            self.counters["coordinator_error"] += 1
            return
        said = ev.CoordinatorSaid(info.round, info.stage, info.stage_count, info.stage_ends_ms, info.stage_ms)
        self._feed(said)

    def _feed(self, event: ev.Event) -> None:
        now = self.clock.now_ms()
        try:
            actions = self.machine.handle(now, event)
        except IllegalTransition:
            # Our own sequencing is wrong: a bug, not bad input. Keep the node alive and visible.
            log.exception("%s: illegal round transition", self.peer_id)
            self.counters["internal_error"] += 1
            return
        for action in actions:
            # Opening and skipping take effect at once: announcements that arrive before the
            # queued actions run must already be judged against the new round.
            if isinstance(action, ev.Generate):
                # The machine abandons the round in hand only in the event that opens the next.
                self._open(action.round, now, abandons=any(type(a) is ev.AbandonRound for a in actions))
            elif isinstance(action, ev.SkipRound):
                self._skip(action, now)
                continue
            self._actions.append(action)

    def _open(self, round_number: int, now_ms: int, *, abandons: bool = False) -> None:
        self._note_missed(round_number, now_ms)
        # Kept for the record if the machine abandons it, else let go: a finished round's work
        # holds its inbox (`announced` is O(peers): ~3 GB over 10,000 simulated peers).
        self._abandoned = self._work if abandons else None
        stage = self.machine.stage
        connected = self.network.connected_peers()
        self.inbox.peers_connected(connected)  # established senders: fetched before unknown keys
        sampled_over = len(connected) if self.settings.fetch_sample else 0
        inbox = self.inbox.open_round(round_number, stage, sampled_over)
        self._work = RoundWork(
            round=round_number,
            stage=stage,
            opened_ms=now_ms,
            inbox=inbox,
            sweep_at_ms=self.machine.sweep_at_ms,
            round_ends_ms=self.machine.round_ends_ms,
        )

    def _note_missed(self, round_number: int, now_ms: int) -> None:
        """Rounds between the last one this driver opened or skipped and `round_number` passed
        while its work ran (the driver polls between actions, so only a step longer than a
        round leaves a gap): each gets a record, so that no round goes without one."""
        last = self._last_round
        self._last_round = max(last if last is not None else round_number, round_number)
        if last is not None and round_number > last + 1:
            self.counters["rounds_missed"] += round_number - last - 1
            self.rounds.missed(last + 1, round_number - 1, last, now_ms)

    def _skip(self, action: ev.SkipRound, now_ms: int) -> None:
        """The machine left `action.round` out (once per round): it finishes the work in hand
        and opens the next round on time."""
        self._note_missed(action.round, now_ms)
        self.counters["rounds_skipped"] += 1
        self.rounds.skipped(action.round, action.stage, action.left_ms, now_ms)
        if action.for_generation:
            # Kept out by the estimate alone: its slowest generation goes, or a peer that gets
            # to every round late (a stage manager behind, a loaded host) would skip them all
            # on one slow generation, never measuring a faster one.
            questions = scaled(self.settings.questions_per_round, self.pace.share)
            self.generations.forget_slowest(questions)
            self.machine.expected_generate_ms = self.generations.expected_ms(questions)

    async def _perform(self, action: ev.Action) -> None:
        # Every action names its (round, stage): work of an abandoned position is dropped.
        if isinstance(action, ev.Generate):
            await self._generate(action.round, action.stage)
        elif isinstance(action, ev.Publish):
            work = self._current(action.round, action.stage)
            if work is not None:
                await self.publisher.publish(work)
                await self._evaluate_while_collecting(work)
        elif isinstance(action, ev.Train):
            await self._train(action.round, action.stage)
        elif isinstance(action, ev.Report):
            await self._report(action)
        elif isinstance(action, ev.AbandonRound):
            self._abandon(action.round, action.stage)
        elif isinstance(action, ev.SweepDht) and self._current(action.round, action.stage) is not None:
            self.fetcher.sweep()

    def _current(self, round_number: int, stage: int = 0) -> RoundWork | None:
        work = self._work
        return work if work is not None and (work.round, work.stage) == (round_number, stage) else None

    async def _generate(self, round_number: int, stage: int = 0) -> None:
        work = self._current(round_number, stage)
        if work is None:
            return
        has_work = steps.stage_questions(work, self.game, self.peer_id, self.inbox.store, self.counters)
        if self.game.stage_count == 1:  # a multi-stage game's later stages build on every answer
            work.questions = self.pace.own_questions(work.questions)
        for decision in self.inbox.release_early(round_number):
            self.fetcher.take(decision)
        if not has_work:  # nothing to answer (no inputs to build on): publish nothing, go on
            self._feed(ev.RolloutsReady(round_number, stage))
            return
        ready = await steps.generate(
            work,
            settings=self.settings,
            peer_id=self.peer_id,
            signing_seed=self._seed,
            policy=self.policy,
            offload=self._offload,
            now_ms=self.clock.now_ms,
            counters=self.counters,
        )
        if ready:
            self.publisher.keep(round_number, work.stage, work.envelope)
            if work.batch is not None:  # where the game's next stage builds on it
                self.game.remember(self.inbox.store, work.batch_digest, work.batch, work.items)
            self._feed(ev.RolloutsReady(round_number, stage))

    async def _evaluate_while_collecting(self, work: RoundWork) -> None:
        """An evaluation deferred after the last train step may fit in the worker's idle time
        between publishing and the collect deadline (swarmp2p/heldout.py)."""
        if self._current(work.round, work.stage) is work and self.machine.phase is ev.Phase.COLLECTING:
            work.eval, work.eval_deferred = await self.evaluation.while_collecting(
                self.policy,
                self._offload,
                self.clock.now_ms,
                work.round,
                self.machine.collect_until_ms,
                work.generate_s,
                len(work.questions),
            )

    async def _train(self, round_number: int, stage: int = 0) -> None:
        work = self._current(round_number, stage)
        if work is None:
            return
        work.train_started_ms = self.clock.now_ms()
        self.sampling_state, finished = await steps.train(
            work,
            self.inbox.training_pool(work.inbox),
            self.sampling_state,
            settings=self.pace.settings_for(self.settings),
            peer_id=self.peer_id,
            policy=self.policy,
            offload=self._offload,
            counters=self.counters,
            local=self.game.training_groups(stage, work.items, work.local),
        )
        if finished:
            work.train_finished_ms = self.clock.now_ms()
            self._feed(ev.TrainingFinished(round_number, stage))

    async def _report(self, action: ev.Report) -> None:
        round_number, stage = action.round, action.stage
        work = self._current(round_number, stage)
        if work is None:
            return
        await steps.report(
            work,
            peer_id=self.peer_id,
            winners_count=self.settings.winners_count if action.votes else 0,  # one vote per round
            coordinator=self.coordinator,
            counters=self.counters,
        )
        work.reported_ms = self.clock.now_ms()
        if action.votes:  # the held-out evaluation runs once a round, after the voting stage
            evaluated, deferred = await self.evaluation.after_round(
                self.policy,
                self._offload,
                self.clock.now_ms,
                round_number,
                self.machine.round_ends_ms,
                work.generate_s,
                len(work.questions),
            )
            work.eval = evaluated or work.eval  # (or the one run in this round's collect window)
            work.eval_deferred = work.eval_deferred or deferred  # a probe stopped while collecting says more
        self._ended(work, completed=True)
        self._feed(ev.ReportFinished(round_number, stage))

    def _abandon(self, round_number: int, stage: int = 0) -> None:
        # `_work` already belongs to the new round; the abandoned one was parked in `_abandoned`.
        work, self._abandoned = self._abandoned, None
        self.counters["abandoned"] += 1
        if work is not None and (work.round, work.stage) == (round_number, stage):
            self._ended(work, completed=False)

    def _ended(self, work: RoundWork, *, completed: bool) -> None:
        """Record a round that ended, and let its timings set how much of our own work the
        next round takes on (said once, when that changes)."""
        self.rounds.add(record_of(work, completed=completed, finished_ms=self.clock.now_ms()))
        if self.game.stage_count > 1 or self._stopping():  # a stop cuts the round short, not the load
            return
        if self.pace.observe(work.round, times_of(work), deepest_level(self.settings)) is not None:
            self.counters["pace_changes"] += 1
            apply_threads(self.policy, self.pace)
            level = logging.WARNING if self.pace.level > 0 else logging.INFO
            log.log(level, "%s", self.pace.line(self.settings))
        # The next round is skipped if its generation, by the recent ones, would publish late.
        self.generations.add(work.generate_s, len(work.questions))
        questions = scaled(self.settings.questions_per_round, self.pace.share)
        self.machine.expected_generate_ms = self.generations.expected_ms(questions)
