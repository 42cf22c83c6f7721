"""The node's round loop, written once: run by `swarmp2p node` (libp2p) and by the simulator.

`Peer` is the only place where the protocol meets IO. It drives `protocol.rounds.RoundMachine`
with events (coordinator polls, finished work, ticks) and carries out the actions it returns,
through four ports (swarmp2p/ports.py): NetworkPort, CoordinatorPort, PolicyPort and Clock, plus
a `protocol.tasks.TaskRegistry` for re-scoring peers' completions.

One round, as the machine sees it:

    poll coordinator -> RoundOpened(r)
    Generate(r)  questions_for(seed, r, stage, me) -> offload(policy.generate) -> seal batch -> RolloutsReady
    Publish(r)   announce (sealed RolloutAnnouncement: digest + size) on swarmp2p/<swarm>/announce,
                 dht_put(/swarmp2p/<swarm>/<r>/<stage>/<me>, envelope), serve FetchRequests for it
    ...          meanwhile inbound announcements are checked, fetched, verified, kept per sender
    Tick past the collect deadline -> Train(r): sample_training_groups -> offload(policy.train), save
    Report(r)    coordinator.submit_reward / submit_winners (failures counted, never fatal), then
                 the held-out evaluation when due and it fits before the next round; a deferred one
                 may run in the next round's collect window instead (swarmp2p/heldout.py)

Inbound handling never raises out of the Peer: protocol failures become counted rejections
(`rejections[reason]`) and, when the fault is attributable, a strike against the sender in
`protocol.scoring.PeerScores` (banned at `ban_threshold`). Anything unexpected while handling
ONE message is logged and counted as "internal_error".

Threads: `offload` runs the synchronous policy calls. A real node passes
`trio.to_thread.run_sync` bound to ONE CapacityLimiter (the default); the simulator runs them
inline, because worker threads would break MockClock's deterministic virtual time.

Optional network capability: `network.subscribe_inline(topic, handler) -> bool`. A transport
that can hand each inbound message to a synchronous handler at delivery time (the simulator's
in-memory network) returns True, and the Peer then runs no receive task of its own; any other
transport (libp2p) lacks the method or returns False and is read through `subscribe`. Either
way every message goes through the same `_handle_announcement`.

Two more optional capabilities, both only about cost (the simulator's network has them, libp2p
does not): `network.bounds_waits is True` (its `request` / `dht_get` always end by their own
timeout, so the Peer adds no cancel scope of its own) and `network.sleep_wakeable(seconds,
set_waker)` (the round loop's idle wait, cut short through the waker instead of an Event in a
cancel scope).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

from protocol import codec
from protocol.envelope import peer_id_from_public_key, public_key_from_seed, seal
from protocol.errors import ProtocolError
from protocol.messages import (
    FetchRequest,
    FetchResponse,
    QuestionGroup,
    QuestionRef,
    RolloutAnnouncement,
    RolloutBatch,
)
from protocol.questions import questions_for
from protocol.rounds import (
    AbandonRound,
    Action,
    Generate,
    IllegalTransition,
    Phase,
    Publish,
    Report,
    ReportFinished,
    RolloutsReady,
    RoundMachine,
    RoundOpened,
    Tick,
    Train,
    TrainingFinished,
)
from protocol.sampling import SamplingRule, SamplingState, observe_round, sample_training_groups
from protocol.scoring import PeerScores
from protocol.tasks import TaskRegistry
from protocol.verification import VerificationLimits, verify_batch
from swarmp2p.heldout import EvalSettings, HeldOutEvaluation
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.ports import (
    Clock,
    CoordinatorError,
    CoordinatorPort,
    InboundMessage,
    NetworkError,
    NetworkPort,
    PolicyPort,
    RoundInfo,
)

log = logging.getLogger("swarmp2p.peer")

Offload = Callable[..., Awaitable[Any]]
"""`await offload(sync_fn, *args)` runs `sync_fn(*args)` somewhere and returns its result."""


def announce_topic(swarm_id: str) -> str:
    return f"swarmp2p/{swarm_id}/announce"


def batch_dht_key(swarm_id: str, round_number: int, stage: int, peer_id: str) -> str:
    return f"/swarmp2p/{swarm_id}/{round_number}/{stage}/{peer_id}"


def _positive(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class PeerSettings:
    """What every peer of one swarm must agree on (swarm_id, seed, tasks, questions_per_round,
    verification limits) plus local knobs (sampling split, timeouts, caps)."""

    swarm_id: str
    seed: int
    tasks: tuple[str, ...]
    questions_per_round: int = attrs.field(default=4, validator=attrs.validators.ge(1))
    weights: tuple[float, ...] = ()
    """Task weights for question derivation (empty: uniform); a swarm rule like `tasks`."""
    n_local: int = attrs.field(default=4, validator=attrs.validators.ge(0))
    n_external: int = attrs.field(default=4, validator=attrs.validators.ge(0))
    max_groups_per_peer: int = attrs.field(default=2, validator=attrs.validators.ge(1))
    sampling: SamplingRule = attrs.field(factory=SamplingRule)
    """How the n_local + n_external training groups are picked (protocol.sampling: fixed,
    adaptive split, filtered peers; optional top-up of a short side)."""
    verify_rewards: bool = True
    """Re-score every fetched batch before accepting it. False takes claimed rewards on trust:
    only for the experiment that measures what verification is worth, never for a real peer."""
    ban_threshold: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    collect_fraction: float = attrs.field(
        default=0.6, validator=[attrs.validators.gt(0.0), attrs.validators.le(1.0)]
    )
    """Share of the time from opening a round to its end spent collecting peers' batches."""
    fetch_timeout_s: float = attrs.field(default=5.0, validator=_positive)
    max_fetch_per_round: int = attrs.field(default=256, validator=attrs.validators.ge(1))
    fetch_sample: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """0: fetch and verify EVERY announced batch. N > 0: fetch about N per round, chosen by a
    per-(round, peer, sender) hash (unbiased, different for every peer), plus one more for each
    fetch or verification that fails. Bandwidth and CPU per round then stay O(N), not O(swarm)."""
    ban_on_proof: bool = True
    """Ban at once on signed proof of lying (a forged reward, two batches for one round), instead
    of waiting for `ban_threshold` strikes: honest peers cannot produce such proof by accident."""
    fetch_concurrency: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    poll_interval_s: float = attrs.field(default=1.0, validator=_positive)
    max_announce_bytes: int = attrs.field(default=1024 + 256, validator=attrs.validators.ge(1))
    max_batch_bytes: int = attrs.field(default=4 * 1024 * 1024 + 256, validator=attrs.validators.ge(1))
    max_duplicates_per_round: int = attrs.field(default=4, validator=attrs.validators.ge(0))
    """Identical re-announcements tolerated per sender and round (gossip echoes) before it is a flood."""
    verification_limits: VerificationLimits = attrs.field(factory=VerificationLimits)
    reward_tolerance: float = 1e-6
    keep_published_rounds: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    winners_count: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    history_limit: int = attrs.field(default=10_000, validator=attrs.validators.ge(1))
    dht_sweep: bool = True
    """At `sweep_fraction` of the collect window, look up in the DHT the batches of peers we know
    (from earlier rounds or the transport) but heard no announcement from this round: gossip
    loss and late joining must not cost a peer its rollouts."""
    sweep_fraction: float = attrs.field(
        default=0.5, validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )
    known_peer_rounds: int = attrs.field(default=10, validator=attrs.validators.ge(1))
    """A peer last seen this many rounds ago is no longer swept for."""
    min_round_remaining: float = attrs.field(
        default=0.5, validator=[attrs.validators.ge(0.0), attrs.validators.le(1.0)]
    )
    """A round that has less than this share of its stage left when this peer gets to start it
    (its previous round's work overran, e.g. a long training step) is skipped: its batch would
    arrive after every on-time peer's collect deadline, and it would train alone and start the
    next round late too. 0 disables. Needs the stage length, learned from the coordinator's
    stage ends, so it applies from the second round a Peer sees; `swarmp2p node` guards the
    first one itself (`join_min_remaining`)."""
    evaluation: EvalSettings = attrs.field(factory=EvalSettings)
    """Held-out evaluation (swarmp2p/heldout.py): before the first round and every N rounds,
    after the train step and only when it fits before the next round starts. Off by default."""


@attrs.frozen
class RoundRecord:
    """What happened to one peer in one round (a completed round, or one abandoned midway)."""

    round: int
    stage: int
    completed: bool
    reward: float | None  # mean reward of the local completions (None if generation failed)
    rollouts_in: int  # external groups accepted (verified) this round
    rollouts_out: int  # groups this peer published
    external_peers_trained_on: tuple[str, ...]
    accepted_peers: tuple[str, ...]  # peers whose batches verified this round
    rejected: Mapping[str, int]
    opened_ms: int
    finished_ms: int
    train_metrics: Mapping[str, float] = attrs.field(factory=dict)
    skipped: bool = False  # never started: too little of it was left (PeerSettings.min_round_remaining)
    trained_local: int = 0  # local groups passed to train() this round
    trained_external: int = 0  # external groups passed to train() this round
    eval: Mapping[str, Any] | None = None  # the held-out evaluation run after this round (heldout.py)
    eval_deferred: Mapping[str, Any] | None = None  # {needed_s, left_s}: due, but did not fit

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["rejected"] = dict(sorted(self.rejected.items()))
        data["train_metrics"] = dict(sorted(self.train_metrics.items()))
        data["external_peers_trained_on"] = list(self.external_peers_trained_on)
        data["accepted_peers"] = list(self.accepted_peers)
        return data


@attrs.frozen
class _FetchJob:
    round: int
    stage: int
    sender: str
    digest: bytes  # b"": unknown (a DHT sweep job: no announcement was seen)
    group_count: int  # -1: unknown
    dht_only: bool = False


@attrs.define
class _RoundState:
    """Mutable working state of the round in progress."""

    round: int
    stage: int
    opened_ms: int
    questions: tuple[QuestionRef, ...] = ()
    local: list[QuestionGroup] = attrs.Factory(list)
    rollouts_out: int = 0
    batch_digest: bytes = b""
    envelope: bytes = b""
    external: dict[str, tuple[QuestionGroup, ...]] = attrs.Factory(dict)
    external_reward: dict[str, float] = attrs.Factory(dict)
    announced: dict[str, bytes] = attrs.Factory(dict)  # sender -> announced digest
    duplicates: Counter[str] = attrs.Factory(Counter)
    fetches: int = 0
    fetch_probability: float = 1.0
    fetch_hash_prefix: Any = None  # hashlib sha256 state over (seed, round, me), see _fetch_priority
    sweep_at_ms: int = 0
    swept: bool = False
    # sampled out, kept for top-ups: sender -> (priority, announcement)
    deferred: dict[str, tuple[float, RolloutAnnouncement]] = attrs.Factory(dict)
    rejected: Counter[str] = attrs.Factory(Counter)
    trained_on: tuple[str, ...] = ()
    trained_local: int = 0
    trained_external: int = 0
    train_metrics: dict[str, float] = attrs.Factory(dict)
    generate_s: float | None = None
    eval: dict[str, Any] | None = None
    eval_deferred: dict[str, Any] | None = None


def _job_for(announcement: RolloutAnnouncement) -> _FetchJob:
    return _FetchJob(
        round=announcement.round,
        stage=announcement.stage,
        sender=announcement.peer_id,
        digest=announcement.batch_digest,
        group_count=announcement.group_count,
    )


_GENERATING = Phase.GENERATING
_COLLECTING = Phase.COLLECTING
# Module constants compared by identity: `phase in (Phase.A, Phase.B)` looks both members up
# on the Enum class on every call, and it runs for every inbound announcement.

PROOF_OF_LYING = frozenset({"forged_reward", "equivocation"})
"""Rejection reasons backed by the sender's own signature: a batch whose claimed rewards the
deterministic re-scoring contradicts, or two different batches signed for one round."""


def _thread_offload() -> Offload:
    """The real node's offload: one worker thread at a time (the trainer is not re-entrant)."""
    limiter = trio.CapacityLimiter(1)

    async def offload(fn: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=limiter)

    return offload


def learn_stage_ms(known_ms: int | None, earlier: RoundInfo, later: RoundInfo) -> int | None:
    """The stage length implied by two coordinator answers, combined with what was known.

    k stages apart, the stage ends are k stage lengths apart. The minimum over observations is
    kept: a chain coordinator's stage can outlast its duration (nobody advanced it yet), never
    undercut it, so the smallest estimate is the closest."""
    stages_apart = (later.round - earlier.round) * later.stage_count + (later.stage - earlier.stage)
    if stages_apart <= 0 or later.stage_count != earlier.stage_count:
        return known_ms
    estimate = (later.stage_ends_ms - earlier.stage_ends_ms) // stages_apart
    if estimate <= 0:
        return known_ms
    return estimate if known_ms is None else min(known_ms, estimate)


def too_late_to_start(now_ms: int, stage_ends_ms: int, stage_ms: int | None, min_remaining: float) -> bool:
    """Whether a round whose stage ends at `stage_ends_ms` has less than `min_remaining` of a
    `stage_ms`-long stage left at `now_ms` (never, while the stage length is unknown)."""
    if stage_ms is None or min_remaining <= 0:
        return False
    return stage_ends_ms - now_ms < min_remaining * stage_ms


def assigned_questions(
    settings: PeerSettings, round_number: int, stage: int, peer_id: str
) -> tuple[QuestionRef, ...]:
    """The questions `peer_id` must answer in (round, stage) under the swarm's rules: what a peer
    generates for itself and what it re-derives to verify another peer's batch."""
    return questions_for(
        settings.seed,
        round_number,
        stage,
        peer_id,
        settings.tasks,
        settings.questions_per_round,
        settings.weights or None,
    )


def _stopping() -> bool:
    """True inside a cancelled scope, i.e. while the node stops. A policy call that fails then
    was told to stop (TrainerPolicy.cancel raises out of generate/train): not a fault to report."""
    return trio.current_effective_deadline() == -math.inf


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from sha256 of the parts (never Python's salted hash())."""
    text = "\x1f".join(str(part) for part in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1


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
    ) -> None:
        if len(signing_seed) != 32:
            raise ValueError("signing_seed must be 32 bytes (an Ed25519 seed)")
        self.settings = settings
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
        self._offload = offload or _thread_offload()
        self._on_round_complete = on_round_complete
        self.cache = verify_cache if verify_cache is not None else VerifyCache(max_entries=4096)

        self.machine = RoundMachine()
        self.scores = PeerScores(ban_threshold=settings.ban_threshold)
        self.history: list[RoundRecord] = []
        self.rejections: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()
        self.sampling_state = SamplingState()  # what the sampling rule remembers between rounds
        self.evaluation = HeldOutEvaluation(settings.evaluation, self.counters, self.peer_id)
        self.topic = announce_topic(settings.swarm_id)

        self._state: _RoundState | None = None
        self._abandoned: _RoundState | None = None
        self._last_info: RoundInfo | None = None
        # Stage length learned from the coordinator's stage ends (see `learn_stage_ms`).
        self._stage_ms: int | None = None
        self._skipped_round = -1  # the newest round skipped for lack of time
        self._actions: deque[Action] = deque()
        self._wake = trio.Event()
        # Optional transport capability `sleep_wakeable(seconds, set_waker)`: sleep up to
        # `seconds`, calling `set_waker(wake)` first with a callable that ends the sleep early.
        # The simulator's network parks the round loop on its own timer heap with it: a trio
        # cancel scope that fires (the round loop's every idle wait) costs ~40 us, ~800 times
        # a virtual round at 100 peers. Other transports: a cancel scope around `_wake`.
        self._sleep_wakeable: Callable[..., Awaitable[None]] | None = getattr(network, "sleep_wakeable", None)
        self._waker: Callable[[], None] | None = None
        # (round, stage) -> encoded FetchResponse carrying our signed batch, for recent rounds.
        self._published: dict[tuple[int, int], bytes] = {}
        # Peers heard from (announced or served a verified batch) -> last round: swept for in
        # the DHT when a round brings no announcement from them.
        self._known: dict[str, int] = {}
        # Announcements for the NEXT round that arrived before our own poll saw it open.
        self._early: dict[int, dict[str, tuple[RolloutAnnouncement, bytes]]] = {}
        self._fetch_send: trio.MemorySendChannel[_FetchJob] | None = None
        self._not_found = codec.encode(FetchResponse(found=False, envelope=b""))
        # Optional transport capability: True when `request` and `dht_get` always return within
        # their own timeout (the simulator's network does). Then the Peer's own deadline around
        # them would never fire, and a cancel scope per fetch is a visible cost at 100 peers.
        self._waits_bounded = getattr(network, "bounds_waits", False) is True

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
        subscribe_inline = getattr(self.network, "subscribe_inline", None)
        inline = subscribe_inline is not None and subscribe_inline(self.topic, self._handle_announcement)
        channel = None if inline else await self.network.subscribe(self.topic)
        self.network.set_request_handler(self._serve_fetch)
        await self._register()
        send, receive = trio.open_memory_channel[_FetchJob](self.settings.max_fetch_per_round)
        self._fetch_send = send
        async with trio.open_nursery() as nursery:
            if channel is not None:
                nursery.start_soon(self._receive_loop, channel)
            for _ in range(self.settings.fetch_concurrency):
                nursery.start_soon(self._fetch_worker, receive.clone())
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
        }

    def is_banned(self, peer_id: str) -> bool:
        return self.scores.is_banned(peer_id)

    def banned_peers(self) -> list[str]:
        return sorted(self.scores.banned)

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
            self._feed(Tick())
            while self._actions:
                await self._perform(self._actions.popleft())
                if self._round_over():
                    # Our work outlasted the round (a slow peer, or one that restarted in the
                    # round's last seconds): a newer round abandons this one now, instead of
                    # finishing it late and starting the next one late too.
                    await self._poll()
                self._feed(Tick())  # the collect deadline may have passed while we worked
            self._sweep_dht()
            await self._sleep_until_next()

    def _round_over(self) -> bool:
        ends = self.machine.round_ends_ms
        return self.machine.phase is not Phase.IDLE and ends > 0 and self.clock.now_ms() >= ends

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
        previous, self._last_info = self._last_info, info
        if previous is not None:
            self._stage_ms = learn_stage_ms(self._stage_ms, previous, info)
        if info.round > self.machine.round:
            now = self.clock.now_ms()
            if too_late_to_start(now, info.stage_ends_ms, self._stage_ms, self.settings.min_round_remaining):
                self._skip(info, now)
                return
            remaining = max(0, info.stage_ends_ms - now)
            collect_until = now + int(self.settings.collect_fraction * remaining)
            self._abandoned = self._state  # kept for the record if the machine abandons it
            self._state = _RoundState(round=info.round, stage=info.stage, opened_ms=now)
            self._state.sweep_at_ms = now + int(self.settings.sweep_fraction * (collect_until - now))
            if self.settings.fetch_sample:
                expected = max(1, len(self.network.connected_peers()))
                self._state.fetch_probability = min(1.0, self.settings.fetch_sample / expected)
            self._feed(RoundOpened(info.round, collect_until, max(info.stage_ends_ms, collect_until)))

    def _skip(self, info: RoundInfo, now_ms: int) -> None:
        """Leave `info.round` out (once per round; polls see it again until it ends). The round
        machine is not told: it finishes the work in hand and opens the next round on time."""
        if info.round <= self._skipped_round:
            return
        self._skipped_round = info.round
        self.counters["rounds_skipped"] += 1
        log.info(
            "%s: skipping round %d: %.1fs of it left when we got to it",
            self.peer_id,
            info.round,
            (info.stage_ends_ms - now_ms) / 1000,
        )
        record = RoundRecord(
            round=info.round,
            stage=info.stage,
            completed=False,
            reward=None,
            rollouts_in=0,
            rollouts_out=0,
            external_peers_trained_on=(),
            accepted_peers=(),
            rejected={},
            opened_ms=now_ms,
            finished_ms=now_ms,
            skipped=True,
        )
        self._record(record)

    def _feed(self, event: Any) -> None:
        try:
            self._actions.extend(self.machine.handle(self.clock.now_ms(), event))
        except IllegalTransition:
            # Our own sequencing is wrong: a bug, not bad input. Keep the node alive and visible.
            log.exception("%s: illegal round transition", self.peer_id)
            self.counters["internal_error"] += 1

    async def _sleep_until_next(self) -> None:
        now = self.clock.now_ms()
        wake_at = now + int(self.settings.poll_interval_s * 1000)
        if self.machine.phase is Phase.COLLECTING:
            wake_at = min(wake_at, self.machine.collect_until_ms)
        if self._last_info is not None and self._last_info.stage_ends_ms >= now:
            wake_at = min(wake_at, self._last_info.stage_ends_ms)
        state = self._state
        if self.settings.dht_sweep and state is not None and not state.swept and state.sweep_at_ms > now:
            wake_at = min(wake_at, state.sweep_at_ms)
        delay_ms = max(1, wake_at - now)
        if self._sleep_wakeable is None:
            with trio.move_on_after(delay_ms / 1000):
                await self._wake.wait()
        elif self._wake.is_set():
            await trio.lowlevel.checkpoint()  # what Event.wait does when already set
        else:
            try:
                await self._sleep_wakeable(delay_ms / 1000, self._set_waker)
            finally:
                self._waker = None
        self._wake = trio.Event()

    def _set_waker(self, wake: Callable[[], None]) -> None:
        self._waker = wake

    def _wake_up(self) -> None:
        """End the round loop's idle wait now (the swarm has moved on: poll the coordinator)."""
        self._wake.set()
        waker, self._waker = self._waker, None
        if waker is not None:
            waker()

    async def _perform(self, action: Action) -> None:
        if isinstance(action, Generate):
            await self._generate(action.round)
        elif isinstance(action, Publish):
            await self._publish(action.round)
            await self._evaluate_while_collecting(action.round)
        elif isinstance(action, Train):
            await self._train(action.round)
        elif isinstance(action, Report):
            await self._report(action.round)
        elif isinstance(action, AbandonRound):
            self._abandon(action.round)

    def _current(self, round_number: int) -> _RoundState | None:
        state = self._state
        return state if state is not None and state.round == round_number else None

    async def _generate(self, round_number: int) -> None:
        state = self._current(round_number)
        if state is None:
            return
        settings = self.settings
        state.questions = assigned_questions(settings, round_number, state.stage, self.peer_id)
        self._drop_old_early(round_number)
        early = self._early.pop(round_number, {})
        for sender in sorted(early):
            self._consider(*early[sender])
        try:
            started_ms = self.clock.now_ms()
            groups = list(await self._offload(self.policy.generate, state.questions))
            state.generate_s = (self.clock.now_ms() - started_ms) / 1000
            batch = RolloutBatch(
                swarm_id=settings.swarm_id,
                round=round_number,
                stage=state.stage,
                peer_id=self.peer_id,
                groups=tuple(groups),
            )
            envelope = seal(batch, self._seed)
        except Exception:
            if _stopping():
                log.debug("%s: generation stopped with the node in round %d", self.peer_id, round_number)
                return
            # Our own policy failed: the round is skipped (the next RoundOpened abandons it).
            log.exception("%s: generation failed in round %d", self.peer_id, round_number)
            self.counters["generate_failed"] += 1
            return
        state.local = groups
        state.envelope = envelope
        state.batch_digest = hashlib.sha256(envelope).digest()
        self._published[(round_number, state.stage)] = codec.encode(
            FetchResponse(found=True, envelope=envelope)
        )
        for key in sorted(self._published)[: -self.settings.keep_published_rounds]:
            del self._published[key]
        self._feed(RolloutsReady(round_number))

    async def _publish(self, round_number: int) -> None:
        state = self._current(round_number)
        if state is None:
            return
        envelope = state.envelope
        if not envelope:
            return
        announcement = RolloutAnnouncement(
            swarm_id=self.settings.swarm_id,
            round=round_number,
            stage=state.stage,
            peer_id=self.peer_id,
            batch_digest=state.batch_digest,
            group_count=len(state.local),
            size_bytes=len(envelope),
        )
        state.rollouts_out = len(state.local)
        sealed = seal(announcement, self._seed)
        key = batch_dht_key(self.settings.swarm_id, round_number, state.stage, self.peer_id)
        # Both at once: the announcement is what peers act on before their collect deadline, so
        # it must not queue behind a DHT put (a lookup plus stores to the closest peers). The
        # put starts first only in name: start_soon runs it once the announce awaits.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._put_batch, key, envelope)
            await self._announce(sealed)

    async def _announce(self, sealed: bytes) -> None:
        # Never raises: a failure inside the nursery would cancel the sibling DHT put.
        try:
            await self.network.publish(self.topic, sealed)
            self.counters["published"] += 1
        except NetworkError as error:
            log.warning("%s: publish failed: %s", self.peer_id, error)
            self.counters["publish_failed"] += 1
        except Exception:
            log.exception("%s: publish failed", self.peer_id)
            self.counters["publish_failed"] += 1

    async def _put_batch(self, key: str, envelope: bytes) -> None:
        try:
            await self.network.dht_put(key, envelope)
        except NetworkError:
            self.counters["dht_put_failed"] += 1  # best effort: peers fetch directly first
        except Exception:
            log.exception("%s: DHT put failed", self.peer_id)
            self.counters["dht_put_failed"] += 1

    async def _evaluate_while_collecting(self, round_number: int) -> None:
        """An evaluation deferred after the last train step may fit in the worker's idle time
        between publishing and the collect deadline (swarmp2p/heldout.py)."""
        state = self._current(round_number)
        if state is not None and self.machine.phase is Phase.COLLECTING:
            state.eval, state.eval_deferred = await self.evaluation.while_collecting(
                self.policy,
                self._offload,
                self.clock.now_ms,
                round_number,
                self.machine.collect_until_ms,
                state.generate_s,
                len(state.questions),
            )

    async def _train(self, round_number: int) -> None:
        state = self._current(round_number)
        if state is None:
            return
        external = {
            peer: groups for peer, groups in state.external.items() if not self.scores.is_banned(peer)
        }
        settings = self.settings
        sampled = sample_training_groups(
            state.local,
            external,
            n_local=settings.n_local,
            n_external=settings.n_external,
            max_per_peer=settings.max_groups_per_peer,
            seed=derive_seed(settings.seed, round_number, self.peer_id, "sample"),
            rule=settings.sampling,
            state=self.sampling_state,
        )
        self.sampling_state = observe_round(
            settings.sampling,
            self.sampling_state,
            state.local,
            external,
            round_number=round_number,
            n_local=settings.n_local,
            n_external=settings.n_external,
        )
        groups = [*sampled.local, *(group for _, group in sampled.external)]
        state.trained_on = tuple(sorted({peer for peer, _ in sampled.external}))
        state.trained_local, state.trained_external = len(sampled.local), len(sampled.external)
        self.counters["dropped_zero_advantage"] += sampled.dropped_zero_advantage
        if groups:
            try:
                metrics = await self._offload(self.policy.train, groups)
                state.train_metrics = {str(k): float(v) for k, v in dict(metrics or {}).items()}
                self.counters["trained"] += 1
            except Exception:
                if _stopping():
                    log.debug("%s: training stopped with the node in round %d", self.peer_id, round_number)
                    return
                log.exception("%s: training failed in round %d", self.peer_id, round_number)
                self.counters["train_failed"] += 1
                state.trained_on = ()
                state.trained_local = state.trained_external = 0
            try:
                await self._offload(self.policy.save)
            except Exception:
                log.exception("%s: checkpoint save failed", self.peer_id)
                self.counters["save_failed"] += 1
        self._feed(TrainingFinished(round_number))

    async def _report(self, round_number: int) -> None:
        state = self._current(round_number)
        if state is None:
            return
        reward = _mean_reward(state.local)
        ranking = dict(state.external_reward)
        if reward is not None:
            ranking[self.peer_id] = reward
        winners = [peer for peer, _ in sorted(ranking.items(), key=lambda item: (-item[1], item[0]))]
        winners = winners[: self.settings.winners_count]
        try:
            if reward is not None:
                await self.coordinator.submit_reward(round_number, state.stage, reward, self.peer_id)
            if winners:
                await self.coordinator.submit_winners(round_number, winners, self.peer_id)
        except CoordinatorError as error:
            log.warning("%s: report failed: %s", self.peer_id, error.reason)
            self.counters["report_failed"] += 1
        except Exception:
            log.exception("%s: report failed", self.peer_id)
            self.counters["report_failed"] += 1
        evaluated, deferred = await self.evaluation.after_round(
            self.policy,
            self._offload,
            self.clock.now_ms,
            round_number,
            self.machine.round_ends_ms,
            state.generate_s,
            len(state.questions),
        )
        state.eval = evaluated or state.eval  # (or the one run in this round's collect window)
        state.eval_deferred = state.eval_deferred or deferred  # a probe stopped while collecting says more
        self._finish(state, completed=True)
        self._feed(ReportFinished(round_number))

    def _abandon(self, round_number: int) -> None:
        # `_state` already belongs to the new round; the abandoned one was parked in `_abandoned`.
        state = self._abandoned
        self._abandoned = None
        self.counters["abandoned"] += 1
        if state is not None and state.round == round_number:
            self._finish(state, completed=False)

    def _finish(self, state: _RoundState, *, completed: bool) -> None:
        record = RoundRecord(
            round=state.round,
            stage=state.stage,
            completed=completed,
            reward=_mean_reward(state.local),
            rollouts_in=sum(len(groups) for groups in state.external.values()),
            rollouts_out=state.rollouts_out,
            external_peers_trained_on=state.trained_on,
            accepted_peers=tuple(sorted(state.external)),
            rejected=dict(sorted(state.rejected.items())),
            opened_ms=state.opened_ms,
            finished_ms=self.clock.now_ms(),
            train_metrics=state.train_metrics,
            trained_local=state.trained_local,
            trained_external=state.trained_external,
            eval=state.eval,
            eval_deferred=state.eval_deferred,
        )
        self._record(record)

    def _record(self, record: RoundRecord) -> None:
        self.history.append(record)
        if len(self.history) > self.settings.history_limit:
            del self.history[: len(self.history) - self.settings.history_limit]
        if self._on_round_complete is not None:
            try:
                self._on_round_complete(record)
            except Exception:
                log.exception("%s: on_round_complete callback failed", self.peer_id)

    # ---- inbound: announcements, fetches, verification -----------------------------------

    async def _receive_loop(self, channel: Any) -> None:
        async for first in channel:
            # Drain whatever else is already queued without yielding per message: a burst of
            # announcements then costs one scheduler round trip, not one each.
            message = first
            while True:
                self._handle_announcement(message)
                try:
                    message = channel.receive_nowait()
                except (trio.WouldBlock, trio.EndOfChannel):
                    break

    def _handle_announcement(self, message: InboundMessage) -> None:
        """One inbound announcement, from the receive loop or a transport's inline delivery
        (`subscribe_inline`). Never raises."""
        try:
            self._on_announcement(message)
        except Exception:
            log.exception("%s: handling an announcement failed", self.peer_id)
            self._reject("internal_error", blame=None)

    def _reject(self, reason: str, *, blame: str | None) -> None:
        self.rejections[reason] += 1
        if self._state is not None:
            self._state.rejected[reason] += 1
        if blame is not None and blame != self.peer_id:
            self.scores.record_invalid(blame, reason)
            if self.settings.ban_on_proof and reason in PROOF_OF_LYING:
                self.scores.ban(blame, reason)

    def _on_announcement(self, message: InboundMessage) -> None:
        sender = message.transport_sender
        if sender == self.peer_id:
            return  # our own publish echoed back
        if sender in self.scores.banned:  # scores.is_banned, inlined: this runs per delivery
            self._reject("banned", blame=None)
            return
        data = message.data
        max_bytes = self.settings.max_announce_bytes
        if len(data) > max_bytes:
            self._reject("oversized", blame=sender)
            return
        try:
            opened = self.cache.open(data, max_size=max_bytes)
        except ProtocolError as error:
            self._reject(error.reason, blame=sender)
            return
        announcement = opened.message
        if not isinstance(announcement, RolloutAnnouncement):
            self._reject("wrong_kind", blame=sender)
            return
        if opened.signer != sender:
            # Someone relays (or replays) a message signed by another peer as its own.
            self._reject("sender_mismatch", blame=sender)
            return
        if announcement.swarm_id != self.settings.swarm_id:
            self._reject("wrong_swarm", blame=sender)
            return
        # A skipped round counts as current: the round after it is the next one we will open.
        current = max(self.machine.round, self._skipped_round)
        if announcement.round < current:
            self._reject("stale_round", blame=None)  # a replay, or a peer lagging behind: not blamed
        elif announcement.round == current:
            self._consider(announcement, opened.digest)
        elif announcement.round == current + 1:
            early = self._early.setdefault(announcement.round, {})
            if len(early) < self.settings.max_fetch_per_round and announcement.peer_id not in early:
                early[announcement.peer_id] = (announcement, opened.digest)
                self._wake_up()  # the swarm has moved on: poll the coordinator now
            else:
                self._reject("future_round", blame=None)
        else:
            self._reject("future_round", blame=None)

    def _drop_old_early(self, round_number: int) -> None:
        for stale in [r for r in self._early if r < round_number]:
            del self._early[stale]

    def _consider(self, announcement: RolloutAnnouncement, digest: bytes) -> None:
        """An announcement for the current round: queue a fetch unless it is a repeat or too late."""
        state = self._state
        sender = announcement.peer_id
        if state is None or state.round != announcement.round:
            self._reject("stale_round", blame=None)
            return
        phase = self.machine.phase
        if phase is not _GENERATING and phase is not _COLLECTING:
            self._reject("late", blame=None)
            return
        if announcement.stage != state.stage:
            self._reject("wrong_stage", blame=None)
            return
        previous = state.announced.get(sender)
        if previous is not None:
            if previous != announcement.batch_digest:
                self._reject("equivocation", blame=sender)  # two different batches for one round
                return
            state.duplicates[sender] += 1
            over = state.duplicates[sender] == self.settings.max_duplicates_per_round + 1
            self._reject("flood" if over else "duplicate", blame=sender if over else None)
            return
        if announcement.size_bytes > self.settings.max_batch_bytes:
            self._reject("oversized", blame=sender)
            return
        if state.fetches >= self.settings.max_fetch_per_round:
            self._reject("fetch_limit", blame=None)
            return
        state.announced[sender] = announcement.batch_digest
        self._known[sender] = state.round
        if state.fetch_probability < 1.0:
            priority = self._fetch_priority(state, sender)
            if priority >= state.fetch_probability:
                # Most announcements end here when sampling: keep them cheap (no job object yet).
                state.deferred[sender] = (priority, announcement)
                self.counters["fetch_deferred"] += 1
                return
        self._enqueue_fetch(state, _job_for(announcement))

    def _fetch_priority(self, state: _RoundState, sender: str) -> float:
        """derive_seed(seed, round, me, sender, "fetch") / 2**63, from a per-round hash prefix:
        it runs for every announcement of every round, and hashing the shared prefix once per
        round halves its cost."""
        prefix = state.fetch_hash_prefix
        if prefix is None:
            prefix = state.fetch_hash_prefix = hashlib.sha256(
                f"{self.settings.seed}\x1f{state.round}\x1f{self.peer_id}\x1f".encode()
            )
        hasher = prefix.copy()
        hasher.update(f"{sender}\x1ffetch".encode())
        return (int.from_bytes(hasher.digest()[:8], "big") >> 1) / 2**63

    def _sweep_dht(self) -> None:
        """Once per round, at `sweep_at_ms`: queue DHT lookups for the batches of known peers
        that announced nothing this round (lost gossip, or we joined after they announced)."""
        state = self._state
        if (
            not self.settings.dht_sweep
            or state is None
            or state.swept
            or self.clock.now_ms() < state.sweep_at_ms
            or not self._still_collecting(state.round)
        ):
            return
        state.swept = True
        oldest = state.round - self.settings.known_peer_rounds
        for peer in [p for p, last in self._known.items() if last < oldest]:
            del self._known[peer]
        candidates = set(self._known)
        candidates.update(self.network.connected_peers())  # now, not at round open: peers join
        for peer in sorted(candidates):
            if peer == self.peer_id or peer in state.announced or self.scores.is_banned(peer):
                continue
            if state.fetch_probability < 1.0 and self._fetch_priority(state, peer) >= state.fetch_probability:
                continue  # sampled out: we would not have fetched its batch had we heard of it
            if state.fetches >= self.settings.max_fetch_per_round:
                break
            self.counters["sweep_lookups"] += 1
            self._enqueue_fetch(state, _FetchJob(state.round, state.stage, peer, b"", -1, dht_only=True))

    def _enqueue_fetch(self, state: _RoundState, job: _FetchJob) -> None:
        assert self._fetch_send is not None
        try:
            self._fetch_send.send_nowait(job)
            state.fetches += 1
        except trio.WouldBlock:
            self._reject("fetch_queue_full", blame=None)

    def _top_up(self, round_number: int) -> None:
        """A sampled fetch failed: fetch the next deferred batch instead (lowest priority first)."""
        state = self._current(round_number)
        if state is None or not state.deferred or not self._still_collecting(round_number):
            return
        sender = min(state.deferred, key=lambda peer: (state.deferred[peer][0], peer))
        _, announcement = state.deferred.pop(sender)
        if self.scores.is_banned(sender):
            self._top_up(round_number)
            return
        self._enqueue_fetch(state, _job_for(announcement))

    async def _fetch_worker(self, receive: trio.MemoryReceiveChannel[_FetchJob]) -> None:
        async with receive:
            async for job in receive:
                try:
                    accepted = await self._fetch_and_verify(job)
                except Exception:
                    log.exception("%s: fetching from %s failed unexpectedly", self.peer_id, job.sender)
                    self._reject("internal_error", blame=None)
                    accepted = False
                if not accepted and not job.dht_only:
                    self._top_up(job.round)

    def _still_collecting(self, round_number: int) -> bool:
        machine = self.machine
        return machine.round == round_number and (
            machine.phase is _GENERATING or machine.phase is _COLLECTING
        )

    async def _fetch_and_verify(self, job: _FetchJob) -> bool:
        if not self._still_collecting(job.round):
            self._reject("late", blame=None)
            return False
        fetched = await (self._fetch_from_dht(job) if job.dht_only else self._fetch(job))
        if fetched is None:
            if job.dht_only:
                self.counters["sweep_missing"] += 1  # nothing published, or not reachable: no fault
            else:
                self._reject("fetch_failed", blame=None)
            return False
        envelope, direct = fetched
        digest = self.cache.digest(envelope)
        if job.digest and digest != job.digest:
            # From the announcer itself this is a lie; from the DHT it may be someone else's record.
            self._reject("digest_mismatch", blame=job.sender if direct else None)
            return False
        try:
            opened = self.cache.open(envelope, max_size=self.settings.max_batch_bytes)
        except ProtocolError as error:
            self._reject(error.reason, blame=job.sender)
            return False
        batch = opened.message
        if not isinstance(batch, RolloutBatch):
            self._reject("wrong_kind", blame=job.sender)
            return False
        if opened.signer != job.sender:
            self._reject("sender_mismatch", blame=job.sender)
            return False
        if (
            batch.swarm_id != self.settings.swarm_id
            or batch.round != job.round
            or batch.stage != job.stage
            or (job.group_count >= 0 and len(batch.groups) != job.group_count)
        ):
            self._reject("batch_mismatch", blame=job.sender)
            return False
        verdict = self.cache.verdict(digest, functools.partial(self._verify, batch))
        if not verdict.ok:
            self._reject(verdict.reason or "invalid_batch", blame=job.sender)
            return False
        if not self._still_collecting(job.round):
            self._reject("late", blame=None)
            return False
        state = self._state
        assert state is not None
        if self.scores.is_banned(job.sender):
            self._reject("banned", blame=None)
            return False
        if job.dht_only:
            announced = state.announced.setdefault(job.sender, digest)
            if announced != digest:
                # Meanwhile the sender announced a different batch for this round. Not blamed
                # here: the DHT record may predate a restart of the sender within the round.
                self._reject("sweep_conflict", blame=None)
                return False
            self.counters["sweep_recovered"] += 1
        self.scores.record_valid(job.sender)
        self._known[job.sender] = job.round
        state.external[job.sender] = batch.groups
        reward = _mean_reward(batch.groups)
        if reward is not None:
            state.external_reward[job.sender] = reward
        self.counters["accepted_batches"] += 1
        return True

    def _verify(self, batch: RolloutBatch) -> Any:
        settings = self.settings
        expected = assigned_questions(settings, batch.round, batch.stage, batch.peer_id)
        return verify_batch(
            batch,
            self.registry,
            expected_questions=expected,
            limits=settings.verification_limits,
            tolerance=settings.reward_tolerance,
            rescore=settings.verify_rewards,
        )

    async def _fetch(self, job: _FetchJob) -> tuple[bytes, bool] | None:
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
            # Belt and braces over the port's own timeout.
            with trio.move_on_after(self.settings.fetch_timeout_s * 2):
                fetched = await self._request_batch(job, request)
        if fetched is not None:
            return fetched
        self.counters["dht_fallbacks"] += 1
        return await self._fetch_from_dht(job)

    async def _request_batch(self, job: _FetchJob, request: bytes) -> tuple[bytes, bool] | None:
        try:
            raw = await self.network.request(job.sender, request, self.settings.fetch_timeout_s)
            response = self.cache.decode(raw)
        except (NetworkError, ProtocolError):
            return None
        if isinstance(response, FetchResponse) and response.found:
            return response.envelope, True
        return None

    async def _fetch_from_dht(self, job: _FetchJob) -> tuple[bytes, bool] | None:
        if self._waits_bounded:
            return await self._dht_lookup(job)
        with trio.move_on_after(self.settings.fetch_timeout_s):
            return await self._dht_lookup(job)
        return None  # timed out

    async def _dht_lookup(self, job: _FetchJob) -> tuple[bytes, bool] | None:
        try:
            value = await self.network.dht_get(
                batch_dht_key(self.settings.swarm_id, job.round, job.stage, job.sender)
            )
        except NetworkError:
            return None
        if value is not None and len(value) <= self.settings.max_batch_bytes:
            return value, False
        return None

    async def _serve_fetch(self, requester: str, data: bytes) -> bytes:
        """Answer a peer's FetchRequest for one of our recent batches. Never raises."""
        try:
            request = self.cache.decode(data)
        except ProtocolError as error:
            self._reject(f"request_{error.reason}", blame=requester)
            return self._not_found
        except Exception:
            log.exception("%s: decoding a fetch request failed", self.peer_id)
            self._reject("internal_error", blame=None)
            return self._not_found
        if not isinstance(request, FetchRequest) or request.swarm_id != self.settings.swarm_id:
            self._reject("bad_request", blame=requester)
            return self._not_found
        if request.peer_id != self.peer_id:
            return self._not_found
        self.counters["served"] += 1
        return self._published.get((request.round, request.stage), self._not_found)


def _mean_reward(groups: Sequence[QuestionGroup]) -> float | None:
    rewards = [completion.reward for group in groups for completion in group.completions]
    if not rewards:
        return None
    mean = math.fsum(rewards) / len(rewards)
    return mean
