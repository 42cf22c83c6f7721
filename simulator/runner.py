"""Run a whole swarm in one process on trio's virtual clock: the SAME `swarmp2p.peer.Peer` as a
real node, over the in-memory network, a schedule coordinator and (by default) the cheap policy.

Determinism: every random choice comes from generators seeded by the scenario seed, the clock is
`trio.testing.MockClock(autojump_threshold=0)` (virtual time jumps as soon as every task waits),
policy calls run inline (no threads), and trio's own scheduler shuffling is seeded too. So a seed
reproduces a run exactly, and 100 peers x 100 rounds of virtual half-minute rounds take seconds.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import math
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing

from protocol.envelope import peer_id_from_seed
from protocol.games import stage_count_of
from protocol.messages import QuestionGroup, QuestionRef, SwarmSchedule
from protocol.seeds import derive_seed
from protocol.sender_map import PeerNumbers
from protocol.verification import VerificationLimits
from simulator.adversary import Adversary
from simulator.network import LinkModel, Partition, SimClock, SimWorld
from simulator.policy import CheckpointStore, ForgingPolicy, SimPolicy, SimPolicyParams
from simulator.recording import RecordingCoordinator
from simulator.registry import DEFAULT_TASKS, FORMAT_REWARD, SimTaskRegistry
from simulator.scenario import Scenario
from simulator.shards import ShardLink, exact_jump_clock, merge_counters, run_sharded
from swarmp2p.clocks import TrioClock
from swarmp2p.peer import Peer, RoundRecord, announce_topic
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.rules import peer_settings_for
from swarmp2p.schedule import ScheduleCoordinator

EPOCH_MS = 1_700_000_000_000
"""Virtual time 0 as epoch milliseconds: a fixed date, so no wall-clock time leaks into a run."""
SWARM_ID = "sim"
HONEST = "honest"

SIM_CACHE_FLOOR = 4096
"""The fewest entries of the run's shared VerifyCache digest tables (4 x peers above 1024 peers).
Not VerifyCache's own default of 50,000, sized for a node: at 1000 peers that kept 25 rounds of
every peer's batch and announcement alive (one RolloutBatch, 16 completions and 2 opened
envelopes per peer and round, ~11 MiB a round), where two rounds are what a fetch reaches.
Evicting changes no outcome (a miss recomputes the same verdict): tests/simulator/test_sim_scale.py."""

SIM_IDENTITY_FLOOR = 1024
"""The fewest entries of its identity memo (2 x peers above 512 peers): an instant's messages."""


@attrs.frozen
class PeerPlan:
    index: int
    peer_id: str
    seed: bytes
    role: str  # "honest", or a byzantine kind
    slow: bool
    online: tuple[tuple[int, int], ...]  # [from_ms, until_ms) in virtual ms since genesis
    events: tuple[str, ...]  # what happened to it, for the report ("late_join@r3", "crash@r7", ...)

    @property
    def honest(self) -> bool:
        return self.role == HONEST

    def present_for(self, round_number: int, round_ms: int) -> bool:
        """Online for the whole of `round_number` (joined at or before it started, left after it ended)."""
        start, end = round_number * round_ms, (round_number + 1) * round_ms
        return any(a <= start and b >= end for a, b in self.online)


@attrs.define
class SimulationResult:
    scenario: Scenario
    plans: list[PeerPlan]
    records: dict[str, list[RoundRecord]]
    stats: dict[int, Counter[str]]
    agreement: list[dict[str, int]]  # per round, sampled mid-round
    banned_by: dict[str, list[str]]  # honest peer -> byzantine/other peers it banned (last incarnation)
    rejections: Counter[str]
    # (peer, round) each time train() got a group with forged rewards, for EVERY peer: a forger
    # trains on its own forged local groups, so filter by role for what verification let through
    invalid_trained: list[tuple[str, int]]
    skills: dict[str, float]  # final mean skill per peer (sim policy)
    cache_hits: int
    cache_misses: int
    coordinator_log: dict[str, Any] = attrs.Factory(dict)  # accepted submissions (see RecordingCoordinator)
    coordinator_mismatches: int = 0
    chain: Any = None  # simulator.chain.SimChain when coordinator = "chain"
    peer_sizes: dict[str, str] = attrs.Factory(dict)  # peer id -> model size ("base"/"large"), trainer only
    # workers > 1: per worker, its lockstep meetings, wall seconds waiting there, and CPU seconds
    lockstep: list[dict[str, float]] = attrs.Factory(list)

    @property
    def round_ms(self) -> int:
        return int(self.scenario.round_s * 1000)


def plan_peers(scenario: Scenario) -> list[PeerPlan]:
    """Who is who and who is online when: decided up front from the seed, so that properties can
    be checked against the plan after the run."""
    rng = random.Random(derive_seed(scenario.seed, "plan"))
    round_ms = int(scenario.round_s * 1000)
    end_ms = scenario.rounds * round_ms
    byzantine_count = round(scenario.byzantine.fraction * scenario.peers)
    byzantine = sorted(rng.sample(range(scenario.peers), byzantine_count))
    kinds = scenario.byzantine.kinds
    roles = {index: kinds[i % len(kinds)] for i, index in enumerate(byzantine)}
    faults = scenario.faults
    plans = []
    for index in range(scenario.peers):
        seed = hashlib.sha256(f"swarmp2p-sim|{scenario.seed}|{index}".encode()).digest()
        role = roles.get(index, HONEST)
        slow = role == HONEST and rng.random() < faults.slow_fraction
        events: list[str] = []
        start = 0
        if role == HONEST and rng.random() < faults.late_join_fraction:
            start = faults.late_join_round * round_ms + rng.randrange(round_ms)
            events.append(f"late_join@r{faults.late_join_round}")
        intervals: list[tuple[int, int]] = []
        online_from = start
        round_number = start // round_ms
        while role == HONEST and online_from < end_ms and round_number < scenario.rounds:
            # Walk the rounds; a fault ends the current online interval.
            at = round_number * round_ms + rng.randrange(round_ms)
            if at <= online_from:
                round_number += 1
                continue
            if rng.random() < faults.crash_rate:
                intervals.append((online_from, at))
                online_from = at + int(faults.crash_restart_s * 1000)
                events.append(f"crash@r{round_number}")
            elif rng.random() < faults.churn_leave:
                intervals.append((online_from, at))
                away = 1
                while rng.random() >= faults.churn_join and away < scenario.rounds:
                    away += 1
                online_from = (round_number + away) * round_ms + rng.randrange(round_ms)
                events.append(f"leave@r{round_number}")
            round_number = max(round_number + 1, online_from // round_ms)
        if online_from < end_ms:
            intervals.append((online_from, end_ms))
        plans.append(
            PeerPlan(
                index=index,
                peer_id=peer_id_from_seed(seed),
                seed=seed,
                role=role,
                slow=slow,
                online=tuple(intervals),
                events=tuple(events),
            )
        )
    return plans


class _GroupAudit:
    """The oracle's verdict per trained group, shared by all peers' `_AuditedPolicy`: an
    accepted external group is the same object for every peer that trains on it, so it is
    re-scored once, not once per trainer. Remembered by identity (the entry holds the group, so
    its id cannot be reused); bounded."""

    def __init__(self, registry: Any, max_entries: int = 20_000) -> None:
        self.registry = registry
        self.max_entries = max_entries
        self._seen: dict[int, tuple[QuestionGroup, bool]] = {}

    def honest(self, group: QuestionGroup) -> bool:
        entry = self._seen.get(id(group))
        if entry is not None and entry[0] is group:
            return entry[1]
        ok = all(
            abs(self.registry.score(group.question, c.text) - c.reward) <= 1e-6 for c in group.completions
        )
        self._seen[id(group)] = (group, ok)
        if len(self._seen) > self.max_entries:
            del self._seen[next(iter(self._seen))]
        return ok


class _AuditedPolicy:
    """Delegates to a policy and checks, as an outside oracle, every group it is trained on:
    any claimed reward the registry disagrees with means a forged batch got through."""

    def __init__(self, inner: Any, audit: _GroupAudit, on_invalid: Callable[[], None]) -> None:
        self.inner = inner
        self.audit = audit
        self.on_invalid = on_invalid

    def generate(self, questions: Sequence[QuestionRef]) -> list[QuestionGroup]:
        return self.inner.generate(questions)

    def generate_items(self, items: Sequence[Any]) -> list[QuestionGroup]:
        return self.inner.generate_items(items)

    def train(self, groups: Sequence[QuestionGroup]) -> dict[str, float]:
        for group in groups:
            if not self.audit.honest(group):
                self.on_invalid()
        return self.inner.train(groups)

    def save(self) -> None:
        self.inner.save()

    def load(self) -> bool:
        return self.inner.load()

    def evaluate(self) -> dict[str, Any]:
        return self.inner.evaluate()

    @property
    def cancellable(self) -> bool:
        return bool(self.inner.cancellable)

    def cancel(self) -> None:
        self.inner.cancel()

    def reset_cancel(self) -> None:
        self.inner.reset_cancel()

    def __getattr__(self, name: str) -> Any:
        # What the simulator reads off the inner policy (take_cost, mean_skill, ...).
        return getattr(self.inner, name)


def _seed_trio_scheduler(seed: int, *worker: int) -> None:
    # trio shuffles the order of runnable tasks with a module-level Random (to shake out
    # ordering bugs). Seeding it makes a simulated run reproducible; this is the same hook
    # pytest-trio and hypothesis-trio use for deterministic scheduling.
    # The shuffle alone is not enough: outside hypothesis, trio only reverses each batch of
    # runnable tasks, and the batch's order comes from cancel-scope deadline ties broken by id()
    # and Event wake-ups in set order, i.e. memory addresses, which differ between runs (the
    # lossy scenario diverged between two runs in one process). Deterministic mode sorts each
    # batch by task creation order before the seeded shuffle; hypothesis turns on the same flag.
    import trio._core._run as trio_run

    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    # A worker of a run over several processes (`worker`: its index) gets a stream of its own: with
    # one seed, every worker shuffled its batches alike, and the peers at one position in each
    # worker's share met the same fate (9 peers with late fetches in round 0 at 1000 peers in one
    # process; 18, in pairs 2k and 2k + 1, in two).
    trio_run._r.seed(derive_seed(seed, "trio-scheduler", *worker))


GC_EVERY_ROUNDS = 20
"""While a simulation runs, Python's cyclic garbage collector runs only every this many
virtual rounds (`_collect_between_rounds`). One full collection at 1000 peers takes ~0.75 s
(it walks every peer's per-sender containers), as much as a quarter of a round; what it finds
is a few hundred cyclic objects."""


@contextlib.contextmanager
def _collect_between_rounds() -> Iterator[None]:
    """No automatic garbage collection while the swarm runs: `watch_rounds` collects everything
    every GC_EVERY_ROUNDS virtual rounds instead.

    Why: a run allocates millions of objects on top of a large long-lived heap, and a collection
    walks every container made since the last one, big ones included (each peer's per-round
    lists by sender). At Python's default threshold, 100 peers x 40 rounds spent ~15% of their
    CPU collecting; at 1000 peers x 6 rounds a threshold of 20,000 still cost 2.7 of 24.3 CPU-s
    and 200,000 cost 0.9 s. What those collections found was 88 cyclic objects in all (nearly
    everything dies by reference count), and 1000 x 12 peaked at the same RSS with collection
    off. A full collection every GC_EVERY_ROUNDS rounds keeps any cyclic garbage bounded for a
    fraction of that cost. (Freezing what a collection leaves, so that the next walks only newer
    objects, did not make the next one cheaper: it is the big containers made since that cost.)
    Restored afterwards (the simulator also runs inside tests)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def swarm_schedule(
    scenario: Scenario, tasks: Sequence[str], format_reward: float, difficulty: int = -1
) -> SwarmSchedule:
    """The simulated swarm's schedule: its round clock and its scoring rules. As in a real swarm,
    every peer's settings and registry are then built FROM it (swarmp2p.rules)."""
    return SwarmSchedule(
        swarm_id=SWARM_ID,
        genesis_ms=EPOCH_MS,
        round_ms=int(scenario.round_s * 1000),
        stage_count=stage_count_of(scenario.game),  # a round's stages share its length
        seed=scenario.seed,
        tasks=tuple(tasks),
        weights=(),
        questions_per_round=scenario.questions_per_round,
        format_reward=format_reward,
        difficulty=difficulty,
        game=scenario.game,
    )


def run_simulation(
    scenario: Scenario,
    *,
    on_round: Callable[[int], None] | None = None,
    policy_factory: Callable[..., Any] | None = None,
    tasks: tuple[str, ...] | None = None,
    work_dir: Path | None = None,
    trainer_settings: Any = None,
    trainer_config: Any = None,
    trainer_large: Mapping[str, Any] | None = None,
    peer_overrides: Mapping[str, Any] | None = None,
    wrap_policy: Callable[[PeerPlan, Any], Any] | None = None,
) -> SimulationResult:
    """Run `scenario` to the end of its last round. `on_round(r)` is called as round r ends.

    `tasks` overrides the scenario's task list. `policy_factory` replaces the simulated policy
    (it scores with the registry it is given, which follows the swarm's rules).
    `work_dir`: where `policy = "trainer"` keeps the shared tiny model and the peers'
    checkpoints (a temporary directory if None; its peers/ folder is wiped at the start).
    `trainer_settings` (TrainerSimSettings), `trainer_config` (a TrainerConfig to start every
    peer's from, default the trainer's defaults; its tasks, format reward and difficulty become
    the swarm's rules unless `tasks` or the scenario name tasks) and `trainer_large` (overrides
    for the larger half of a heterogeneous swarm) shape `policy = "trainer"`
    (simulator/trainer_policy.py).
    `peer_overrides`: extra PeerSettings fields for every peer (sampling rule, verify_rewards,
    evaluation, ...). `wrap_policy(plan, policy)` returns what the Peer calls instead of
    `policy` (a spy, for tests and experiments); virtual compute time is still the policy's."""
    if scenario.workers > 1:
        if policy_factory is not None or wrap_policy is not None or work_dir is not None:
            raise ValueError(
                "workers > 1 runs the simulated policy only (no policy_factory, wrap_policy or work_dir)"
            )
        return _run_in_workers(scenario, on_round, tasks, dict(peer_overrides or {}))
    with contextlib.ExitStack() as stack:
        peer_sizes: dict[int, str] = {}
        if scenario.policy == "trainer" and policy_factory is None:
            from simulator.trainer_policy import TrainerSimSettings, TrainerSwarm
            from trainer.config import TrainerConfig

            trainer_settings = trainer_settings or TrainerSimSettings()
            rules = trainer_config or TrainerConfig()
            schedule = swarm_schedule(
                scenario, tasks or scenario.tasks or rules.tasks, rules.format_reward, rules.difficulty
            )
            if work_dir is None:
                work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="swarmp2p-sim-")))
            swarm = TrainerSwarm(
                work_dir,
                schedule=schedule,
                group_size=scenario.group_size,
                settings=trainer_settings,
                base_config=trainer_config,
                large=trainer_large,
            )
            policy_factory, registry = swarm.policy, swarm.registry
            peer_sizes = {index: swarm.size_of(index) for index in range(scenario.peers)}
        else:
            schedule = swarm_schedule(scenario, tasks or scenario.tasks or DEFAULT_TASKS, FORMAT_REWARD)
            registry = SimTaskRegistry.for_schedule(schedule)
        _seed_trio_scheduler(scenario.seed)
        stack.enter_context(_collect_between_rounds())
        clock = trio.testing.MockClock(autojump_threshold=0)
        result = trio.run(
            _simulate,
            scenario,
            schedule,
            on_round,
            policy_factory,
            registry,
            clock,
            dict(peer_overrides or {}),
            wrap_policy,
            clock=clock,
        )
        result.peer_sizes = {plan.peer_id: peer_sizes[plan.index] for plan in result.plans if peer_sizes}
        return result


def run_shard(
    scenario: Scenario,
    index: int,
    connection: Any,
    *,
    tasks: tuple[str, ...] | None,
    peer_overrides: dict[str, Any],
) -> dict[str, Any]:
    """Worker `index`'s part of a run over `scenario.workers` processes (simulator/shards.py):
    its own peers, in lockstep with the other workers through `connection`."""
    schedule = swarm_schedule(scenario, tasks or scenario.tasks or DEFAULT_TASKS, FORMAT_REWARD)
    registry = SimTaskRegistry.for_schedule(schedule)
    shard = ShardLink(connection, index, scenario.workers)  # placed by _simulate, which plans
    _seed_trio_scheduler(scenario.seed, index)
    clock = exact_jump_clock()
    with _collect_between_rounds():
        result = trio.run(
            _simulate,
            scenario,
            schedule,
            None,
            None,
            registry,
            clock,
            peer_overrides,
            None,
            shard,
            clock=clock,
        )
    mine = [plan.peer_id for plan in result.plans if shard.owns(plan.peer_id)]
    return {
        "records": {peer_id: result.records[peer_id] for peer_id in mine},
        "stats": result.stats,
        "agreement": result.agreement,
        "banned_by": result.banned_by,
        "rejections": result.rejections,
        "invalid_trained": result.invalid_trained,
        "skills": result.skills,
        "cache_hits": result.cache_hits,
        "cache_misses": result.cache_misses,
        "coordinator_log": result.coordinator_log,
        "coordinator_mismatches": result.coordinator_mismatches,
        "lockstep": {"barriers": shard.barriers, "waited_s": shard.waited_s, "cpu_s": time.process_time()},
    }


def online_changes(plans: Sequence[PeerPlan], end_ms: int) -> list[tuple[float, int, str, bool]]:
    """When `plans`' peers come online and go offline, as `_simulate`'s `supervise` and
    `run_adversary` attach and detach them: (virtual seconds, plan index, peer, online). An
    adversary is online for the whole run; nothing goes offline at the run's end."""
    changes = []
    for plan in plans:
        online = plan.online if plan.honest or plan.role == "forge" else ((0, end_ms),)
        for start_ms, stop_ms in online:
            changes.append((start_ms / 1000, plan.index, plan.peer_id, True))
            if stop_ms < end_ms:
                changes.append((stop_ms / 1000, plan.index, plan.peer_id, False))
    return changes


def _run_in_workers(
    scenario: Scenario,
    on_round: Callable[[int], None] | None,
    tasks: tuple[str, ...] | None,
    peer_overrides: dict[str, Any],
) -> SimulationResult:
    """`run_simulation` over `scenario.workers` processes: the workers' parts in one result."""
    parts = run_sharded(scenario, run_shard, on_round=on_round, tasks=tasks, peer_overrides=peer_overrides)
    plans = plan_peers(scenario)
    records: dict[str, list[RoundRecord]] = {plan.peer_id: [] for plan in plans}
    coordinator_log: dict[str, Any] = {"rewards": {}, "winners": {}}
    for part in parts:
        records.update(part["records"])
        for key in ("rewards", "winners"):
            coordinator_log[key].update(part["coordinator_log"][key])
    agreement = [
        {
            "round": round_number,
            "honest_online": sum(part["agreement"][round_number]["honest_online"] for part in parts),
            "on_current_round": sum(part["agreement"][round_number]["on_current_round"] for part in parts),
        }
        for round_number in range(len(parts[0]["agreement"]))
    ]
    return SimulationResult(
        scenario=scenario,
        plans=plans,
        records=records,
        stats=merge_counters([part["stats"] for part in parts]),
        agreement=agreement,
        banned_by=dict(sorted(item for part in parts for item in part["banned_by"].items())),
        rejections=sum((part["rejections"] for part in parts), Counter()),
        invalid_trained=sorted(
            (entry for part in parts for entry in part["invalid_trained"]),
            key=lambda entry: (entry[1], entry[0]),
        ),
        skills=dict(sorted(item for part in parts for item in part["skills"].items())),
        cache_hits=sum(part["cache_hits"] for part in parts),
        cache_misses=sum(part["cache_misses"] for part in parts),
        coordinator_log=coordinator_log,
        coordinator_mismatches=sum(part["coordinator_mismatches"] for part in parts),
        lockstep=[part["lockstep"] for part in parts],
    )


async def _simulate(
    scenario: Scenario,
    schedule: SwarmSchedule,
    on_round: Callable[[int], None] | None,
    policy_factory: Callable[..., Any] | None,
    registry: Any,
    trio_clock: trio.abc.Clock,
    peer_overrides: dict[str, Any],
    wrap_policy: Callable[[PeerPlan, Any], Any] | None,
    shard: Any = None,
) -> SimulationResult:
    """The run itself; with `shard` (simulator/shards.py), only this worker's peers."""
    round_ms = schedule.round_ms
    end_ms = scenario.rounds * round_ms
    clock = TrioClock(EPOCH_MS, trio_clock)
    schedule_coordinator = ScheduleCoordinator(schedule, clock)
    sim_chain = None
    if scenario.coordinator == "chain":
        from simulator.chain import SimChain

        sim_chain = SimChain(EPOCH_MS, round_ms)
    coordinator_log: dict[str, Any] = {"rewards": {}, "winners": {}}

    def make_coordinator(plan: PeerPlan) -> Any:
        if sim_chain is not None:
            inner: Any = sim_chain.coordinator(f"swarmp2p-sim-{scenario.seed}-{plan.index}", clock)
        else:
            inner = schedule_coordinator
        return RecordingCoordinator(inner, coordinator_log)

    plans = plan_peers(scenario)
    net = scenario.network
    world = SimWorld(
        LinkModel(
            latency_min_ms=net.latency_min_ms,
            latency_max_ms=net.latency_max_ms,
            jitter_ms=net.jitter_ms,
            loss=net.loss,
            gossip_loss=net.gossip_loss,
            upload_bytes_per_s=net.upload_mbit * 125_000,
            time_grid_ms=net.time_grid_ms,
        ),
        # One stream per world: a worker's draws do not depend on how the others' interleave.
        seed=derive_seed(scenario.seed, "network", *(() if shard is None else (shard.index,))),
        now_ms=clock.now_ms,
        round_of=lambda now_ms: max(0, (now_ms - EPOCH_MS) // round_ms),
        inline_gossip=True,
        shard=shard,
    )
    if shard is not None:
        shard.place(plans)
    mine = plans if shard is None else [plan for plan in plans if shard.owns(plan.peer_id)]
    if shard is not None:
        others = [plan for plan in plans if not shard.owns(plan.peer_id)]
        for plan in others:
            world.add_remote(plan.peer_id)
        shard.expect_online(online_changes(others, end_ms))
        shard.apply_online_changes(world, 0.0)
    for spec in scenario.faults.partition:
        cut = math.ceil(spec.fraction * len(plans))
        world.partitions.append(
            Partition(
                start_ms=EPOCH_MS + spec.start_round * round_ms,
                heal_ms=EPOCH_MS + spec.heal_round * round_ms,
                side=frozenset(plan.peer_id for plan in plans[:cut]),
            )
        )
    settings = peer_settings_for(
        schedule,
        n_local=scenario.n_local,
        n_external=scenario.n_external,
        max_groups_per_peer=scenario.max_groups_per_peer,
        collect_fraction=scenario.collect_fraction,
        fetch_timeout_s=min(5.0, scenario.round_s / 6),
        max_fetch_per_round=max(64, 2 * scenario.peers),
        fetch_sample=scenario.fetch_sample,
        dht_sweep=scenario.dht_sweep,
        poll_interval_s=max(1.0, scenario.round_s / 4),
        verification_limits=VerificationLimits(),
        **peer_overrides,
    )
    # The identity memo holds every announcement of an instant (one per peer at most), so the
    # opens SharedOpen spares are settled as memo hits at the instant's end (SimWorld delivers
    # an instant receiver by receiver), not redone. The digest-keyed tables take two entries
    # per peer and round (its announcement and its batch): 4 x peers keeps two rounds, which
    # is when a batch is fetched; 20 x peers kept ten (at 10,000 peers ~0.5 GB by estimate).
    cache = VerifyCache(
        max_entries=max(SIM_CACHE_FLOOR, 4 * scenario.peers),
        identity_entries=max(SIM_IDENTITY_FLOOR, 2 * scenario.peers),
    )
    if shard is not None:
        shard.share_cache(cache)
    # One numbering of every peer for all inboxes: their per-sender maps are lists by number,
    # 8 bytes a (receiver, sender) pair instead of a dict entry's ~30 (issue 13: 10,000 peers).
    # Numbered up front so the lists are full-size from the first round.
    numbers = PeerNumbers(plan.peer_id for plan in plans)
    store = CheckpointStore()
    audit = _GroupAudit(registry)
    params = SimPolicyParams(group_size=scenario.group_size)
    records: dict[str, list[RoundRecord]] = {plan.peer_id: [] for plan in plans}
    live: dict[str, Peer] = {}
    last_incarnation: dict[str, Peer] = {}
    policies: dict[str, Any] = {}
    invalid_trained: list[tuple[str, int]] = []
    rejections: Counter[str] = Counter()
    agreement: list[dict[str, int]] = []

    def make_policy(plan: PeerPlan) -> Any:
        slowdown = scenario.faults.slowdown if plan.slow else 1.0
        if policy_factory is not None:
            return policy_factory(plan=plan, registry=registry, store=store, slowdown=slowdown)
        cls = ForgingPolicy if plan.role == "forge" else SimPolicy
        return cls(plan.peer_id, registry, seed=scenario.seed, params=params, store=store, slowdown=slowdown)

    def make_offload(policy: Any) -> Callable[..., Any]:
        async def offload(fn: Callable[..., Any], *args: Any) -> Any:
            result = fn(*args)  # inline: threads would make virtual time nondeterministic
            take_cost = getattr(policy, "take_cost", None)
            cost = take_cost() if take_cost is not None else 0.0
            if cost > 0:
                # Parked on the world's timer heap: a trio.sleep would end in a Cancelled
                # exception per call, which costs more than the simulated policy itself.
                await world.sleep(cost)
            return result

        return offload

    async def supervise(plan: PeerPlan) -> None:
        for start_ms, stop_ms in plan.online:
            await trio.sleep_until(start_ms / 1000)
            network = world.attach(
                plan.peer_id, upload_factor=1 / scenario.faults.slowdown if plan.slow else 1.0
            )
            policy = make_policy(plan)
            policies[plan.peer_id] = policy
            audited = _AuditedPolicy(
                policy if wrap_policy is None else wrap_policy(plan, policy),
                audit,
                lambda pid=plan.peer_id: invalid_trained.append(
                    (pid, max(0, (clock.now_ms() - EPOCH_MS) // round_ms))
                ),
            )
            peer = Peer(
                settings,
                plan.seed,
                network,
                make_coordinator(plan),
                audited,
                registry,
                SimClock(world, clock),
                offload=make_offload(policy),
                on_round_complete=records[plan.peer_id].append,
                verify_cache=cache,
                peer_numbers=numbers,
            )
            live[plan.peer_id] = peer
            try:
                with trio.move_on_at(stop_ms / 1000):
                    await peer.run()
            finally:  # also when the whole run ends (cancelled): collect what this incarnation saw
                del live[plan.peer_id]
                last_incarnation[plan.peer_id] = peer
                rejections.update(peer.rejections)
                world.detach(plan.peer_id)

    async def run_adversary(plan: PeerPlan) -> None:
        network = world.attach(plan.peer_id)
        adversary = Adversary(
            plan.role,
            plan.seed,
            network,
            swarm_id=SWARM_ID,
            topic=announce_topic(SWARM_ID),
            round_ms=round_ms,
            genesis_ms=EPOCH_MS,
            now_ms=clock.now_ms,
            rng=random.Random(derive_seed(scenario.seed, "adversary", plan.index)),
            victims=[p.peer_id for p in plans if p.honest],
        )
        await adversary.run()

    async def watch_rounds() -> None:
        honest = [plan for plan in mine if plan.honest]
        for round_number in range(scenario.rounds):
            await trio.sleep_until((round_number * round_ms + round_ms / 2) / 1000)
            running = [live[plan.peer_id] for plan in honest if plan.peer_id in live]
            agreement.append(
                {
                    "round": round_number,
                    "honest_online": len(running),
                    "on_current_round": sum(1 for peer in running if peer.machine.round == round_number),
                }
            )
            await trio.sleep_until((round_number + 1) * round_ms / 1000)
            if (round_number + 1) % GC_EVERY_ROUNDS == 0:
                gc.collect()  # automatic collection is off while the swarm runs
            if on_round is not None:
                on_round(round_number)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(world.run_deliveries)
        if shard is not None:
            nursery.start_soon(shard.run, world, nursery)
        for plan in mine:
            if plan.honest or plan.role == "forge":
                nursery.start_soon(supervise, plan)
            else:
                nursery.start_soon(run_adversary, plan)
        await watch_rounds()
        await trio.sleep_until(end_ms / 1000)
        nursery.cancel_scope.cancel()

    return SimulationResult(
        scenario=scenario,
        plans=plans,
        records=records,
        stats=world.stats,
        agreement=agreement,
        banned_by={pid: peer.banned_peers() for pid, peer in sorted(last_incarnation.items())},
        rejections=rejections,
        invalid_trained=invalid_trained,
        skills={
            pid: policy.mean_skill()
            for pid, policy in sorted(policies.items())
            if hasattr(policy, "mean_skill")
        },
        cache_hits=cache.hits,
        cache_misses=cache.misses,
        coordinator_log=coordinator_log,
        coordinator_mismatches=_coordinator_mismatches(coordinator_log, schedule_coordinator, sim_chain),
        chain=sim_chain,
    )


def _coordinator_mismatches(log: dict[str, Any], schedule: ScheduleCoordinator, chain: Any) -> int:
    """How many accepted reward and winner submissions the coordinator does NOT hold as sent
    (read back from the contract, or from the schedule coordinator's records). 0 expected."""
    bad = 0
    for (round_number, stage, peer_id), reward in sorted(log["rewards"].items()):
        if chain is not None:
            held = chain.stage_reward(round_number, stage, peer_id)
            bad += abs(held - reward) > 0.5e-6 + 1e-12  # the contract keeps 6 decimals
        else:
            bad += schedule.rewards.get((round_number, stage), {}).get(peer_id) != reward
    for (round_number, peer_id), winners in sorted(log["winners"].items()):
        if chain is not None:
            bad += not chain.has_vote(round_number, peer_id, winners)
        else:
            bad += schedule.winners.get(round_number, {}).get(peer_id) != winners
    return bad
