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
import math
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio
import trio.testing

from protocol.games import stage_count_of
from protocol.messages import SwarmSchedule
from protocol.seeds import derive_seed
from protocol.sender_map import PeerNumbers
from protocol.verification import VerificationLimits
from simulator.adversary import Adversary
from simulator.audit import AuditedPolicy, GroupAudit
from simulator.network import LinkModel, Partition, SimClock, SimWorld
from simulator.plans import EPOCH_MS, SWARM_ID, PeerPlan, SimulationResult, online_changes, plan_peers
from simulator.policy import CheckpointStore, ForgingPolicy, SimPolicy, SimPolicyParams
from simulator.recording import RecordingCoordinator
from simulator.registry import DEFAULT_TASKS, FORMAT_REWARD, SimTaskRegistry
from simulator.scenario import Scenario
from simulator.scheduling import GC_EVERY_ROUNDS, collect_between_rounds, seed_trio_scheduler
from simulator.shards import ShardLink, exact_jump_clock, merge_counters, run_sharded
from swarmp2p.clocks import TrioClock
from swarmp2p.peer import Peer, RoundRecord, announce_topic
from swarmp2p.peer_cache import VerifyCache
from swarmp2p.rules import peer_settings_for
from swarmp2p.schedule import ScheduleCoordinator

SIM_CACHE_FLOOR = 4096
"""The fewest entries of the run's shared VerifyCache digest tables (4 x peers above 1024 peers).
Not VerifyCache's own default of 50,000, sized for a node: at 1000 peers that kept 25 rounds of
every peer's batch and announcement alive (one RolloutBatch, 16 completions and 2 opened
envelopes per peer and round, ~11 MiB a round), where two rounds are what a fetch reaches.
Evicting changes no outcome (a miss recomputes the same verdict): tests/simulator/test_sim_scale.py."""

SIM_IDENTITY_FLOOR = 1024
"""The fewest entries of its identity memo (2 x peers above 512 peers): an instant's messages."""



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
        seed_trio_scheduler(scenario.seed)
        stack.enter_context(collect_between_rounds())
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
    seed_trio_scheduler(scenario.seed, index)
    clock = exact_jump_clock()
    with collect_between_rounds():
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
    run = _SwarmRun(scenario, schedule, registry, trio_clock, policy_factory, wrap_policy, shard)
    run.settings = _peer_settings(scenario, schedule, peer_overrides)
    async with trio.open_nursery() as nursery:
        run.start(nursery)
        await run.watch_rounds(on_round)
        await trio.sleep_until(run.end_ms / 1000)
        nursery.cancel_scope.cancel()
    return run.result()


def _link_model(scenario: Scenario) -> LinkModel:
    net = scenario.network
    return LinkModel(
        latency_min_ms=net.latency_min_ms,
        latency_max_ms=net.latency_max_ms,
        jitter_ms=net.jitter_ms,
        loss=net.loss,
        gossip_loss=net.gossip_loss,
        upload_bytes_per_s=net.upload_mbit * 125_000,
        time_grid_ms=net.time_grid_ms,
    )


def _partitions(scenario: Scenario, plans: Sequence[PeerPlan], round_ms: int) -> list[Partition]:
    """The scenario's partition faults: the first `fraction` of the peers cut off from the rest
    from `start_round` until `heal_round`."""
    partitions = []
    for spec in scenario.faults.partition:
        cut = math.ceil(spec.fraction * len(plans))
        partitions.append(
            Partition(
                start_ms=EPOCH_MS + spec.start_round * round_ms,
                heal_ms=EPOCH_MS + spec.heal_round * round_ms,
                side=frozenset(plan.peer_id for plan in plans[:cut]),
            )
        )
    return partitions


def _peer_settings(scenario: Scenario, schedule: SwarmSchedule, peer_overrides: Mapping[str, Any]) -> Any:
    """Every simulated peer's PeerSettings: the swarm's rules from `schedule`, the scenario's local
    knobs, and the timeouts and caps scaled to the round length and the swarm's size."""
    return peer_settings_for(
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


def _shared_cache(peers: int) -> VerifyCache:
    # The identity memo holds every announcement of an instant (one per peer at most), so the
    # opens SharedOpen spares are settled as memo hits at the instant's end (SimWorld delivers
    # an instant receiver by receiver), not redone. The digest-keyed tables take two entries
    # per peer and round (its announcement and its batch): 4 x peers keeps two rounds, which
    # is when a batch is fetched; 20 x peers kept ten (at 10,000 peers ~0.5 GB by estimate).
    return VerifyCache(
        max_entries=max(SIM_CACHE_FLOOR, 4 * peers),
        identity_entries=max(SIM_IDENTITY_FLOOR, 2 * peers),
    )


class _SwarmRun:
    """One simulated swarm while it runs: the world, the peers' shared parts, and each peer's
    life (`supervise`: attached while online, a fresh Peer per incarnation) or an adversary's,
    with what the result collects from them."""

    def __init__(
        self,
        scenario: Scenario,
        schedule: SwarmSchedule,
        registry: Any,
        trio_clock: trio.abc.Clock,
        policy_factory: Callable[..., Any] | None,
        wrap_policy: Callable[[PeerPlan, Any], Any] | None,
        shard: Any,
    ) -> None:
        self.scenario, self.schedule, self.registry = scenario, schedule, registry
        self.policy_factory, self.wrap_policy, self.shard = policy_factory, wrap_policy, shard
        self.round_ms = schedule.round_ms
        self.end_ms = scenario.rounds * self.round_ms
        self.clock = TrioClock(EPOCH_MS, trio_clock)
        self.schedule_coordinator = ScheduleCoordinator(schedule, self.clock)
        self.sim_chain = None
        if scenario.coordinator == "chain":
            from simulator.chain import SimChain

            self.sim_chain = SimChain(EPOCH_MS, self.round_ms)
        self.coordinator_log: dict[str, Any] = {"rewards": {}, "winners": {}}
        self.plans = plan_peers(scenario)
        self.world = SimWorld(
            _link_model(scenario),
            # One stream per world: a worker's draws do not depend on how the others' interleave.
            seed=derive_seed(scenario.seed, "network", *(() if shard is None else (shard.index,))),
            now_ms=self.clock.now_ms,
            round_of=lambda now_ms: max(0, (now_ms - EPOCH_MS) // self.round_ms),
            inline_gossip=True,
            shard=shard,
        )
        self.mine = self.plans if shard is None else self._place_shard(shard)
        self.world.partitions.extend(_partitions(scenario, self.plans, self.round_ms))
        self.settings: Any = None  # PeerSettings, set before start()
        self.cache = _shared_cache(scenario.peers)
        if shard is not None:
            shard.share_cache(self.cache)
        # One numbering of every peer for all inboxes: their per-sender maps are lists by number,
        # 8 bytes a (receiver, sender) pair instead of a dict entry's ~30 (10,000 peers).
        # Numbered up front so the lists are full-size from the first round.
        self.numbers = PeerNumbers(plan.peer_id for plan in self.plans)
        self.store = CheckpointStore()
        self.audit = GroupAudit(registry)
        self.params = SimPolicyParams(group_size=scenario.group_size)
        self.records: dict[str, list[RoundRecord]] = {plan.peer_id: [] for plan in self.plans}
        self.live: dict[str, Peer] = {}
        self.last_incarnation: dict[str, Peer] = {}
        self.policies: dict[str, Any] = {}
        self.invalid_trained: list[tuple[str, int]] = []
        self.rejections: Counter[str] = Counter()
        self.agreement: list[dict[str, int]] = []

    def _place_shard(self, shard: Any) -> list[PeerPlan]:
        """This worker's own plans; the other workers' peers become remote ends of the world,
        online as their plans say."""
        shard.place(self.plans)
        others = [plan for plan in self.plans if not shard.owns(plan.peer_id)]
        for plan in others:
            self.world.add_remote(plan.peer_id)
        shard.expect_online(online_changes(others, self.end_ms))
        shard.apply_online_changes(self.world, 0.0)
        return [plan for plan in self.plans if shard.owns(plan.peer_id)]

    def start(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self.world.run_deliveries)
        if self.shard is not None:
            nursery.start_soon(self.shard.run, self.world, nursery)
        for plan in self.mine:
            if plan.honest or plan.role == "forge":
                nursery.start_soon(self.supervise, plan)
            else:
                nursery.start_soon(self.run_adversary, plan)

    def coordinator_for(self, plan: PeerPlan) -> Any:
        if self.sim_chain is not None:
            name = f"swarmp2p-sim-{self.scenario.seed}-{plan.index}"
            inner: Any = self.sim_chain.coordinator(name, self.clock)
        else:
            inner = self.schedule_coordinator
        return RecordingCoordinator(inner, self.coordinator_log)

    def policy_for(self, plan: PeerPlan) -> Any:
        slowdown = self.scenario.faults.slowdown if plan.slow else 1.0
        if self.policy_factory is not None:
            return self.policy_factory(plan=plan, registry=self.registry, store=self.store, slowdown=slowdown)
        cls = ForgingPolicy if plan.role == "forge" else SimPolicy
        return cls(
            plan.peer_id, self.registry, seed=self.scenario.seed, params=self.params, store=self.store,
            slowdown=slowdown,
        )

    def offload_for(self, policy: Any) -> Callable[..., Any]:
        world = self.world

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

    def _audited(self, plan: PeerPlan, policy: Any) -> AuditedPolicy:
        def on_invalid() -> None:
            round_number = max(0, (self.clock.now_ms() - EPOCH_MS) // self.round_ms)
            self.invalid_trained.append((plan.peer_id, round_number))

        inner = policy if self.wrap_policy is None else self.wrap_policy(plan, policy)
        return AuditedPolicy(inner, self.audit, on_invalid)

    async def supervise(self, plan: PeerPlan) -> None:
        for start_ms, stop_ms in plan.online:
            await trio.sleep_until(start_ms / 1000)
            network = self.world.attach(
                plan.peer_id, upload_factor=1 / self.scenario.faults.slowdown if plan.slow else 1.0
            )
            policy = self.policy_for(plan)
            self.policies[plan.peer_id] = policy
            peer = Peer(
                self.settings,
                plan.seed,
                network,
                self.coordinator_for(plan),
                self._audited(plan, policy),
                self.registry,
                SimClock(self.world, self.clock),
                offload=self.offload_for(policy),
                on_round_complete=self.records[plan.peer_id].append,
                verify_cache=self.cache,
                peer_numbers=self.numbers,
            )
            self.live[plan.peer_id] = peer
            try:
                with trio.move_on_at(stop_ms / 1000):
                    await peer.run()
            finally:  # also when the whole run ends (cancelled): collect what this incarnation saw
                del self.live[plan.peer_id]
                self.last_incarnation[plan.peer_id] = peer
                self.rejections.update(peer.rejections)
                self.world.detach(plan.peer_id)

    async def run_adversary(self, plan: PeerPlan) -> None:
        adversary = Adversary(
            plan.role,
            plan.seed,
            self.world.attach(plan.peer_id),
            swarm_id=SWARM_ID,
            topic=announce_topic(SWARM_ID),
            round_ms=self.round_ms,
            genesis_ms=EPOCH_MS,
            now_ms=self.clock.now_ms,
            rng=random.Random(derive_seed(self.scenario.seed, "adversary", plan.index)),
            victims=[p.peer_id for p in self.plans if p.honest],
        )
        await adversary.run()

    async def watch_rounds(self, on_round: Callable[[int], None] | None) -> None:
        """Mid-round, how many honest peers are online and on the current round; collects garbage
        every GC_EVERY_ROUNDS rounds; `on_round(r)` as round r ends."""
        honest = [plan for plan in self.mine if plan.honest]
        round_ms = self.round_ms
        for round_number in range(self.scenario.rounds):
            await trio.sleep_until((round_number * round_ms + round_ms / 2) / 1000)
            running = [self.live[plan.peer_id] for plan in honest if plan.peer_id in self.live]
            self.agreement.append(
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

    def result(self) -> SimulationResult:
        return SimulationResult(
            scenario=self.scenario,
            plans=self.plans,
            records=self.records,
            stats=self.world.stats,
            agreement=self.agreement,
            banned_by={pid: peer.banned_peers() for pid, peer in sorted(self.last_incarnation.items())},
            rejections=self.rejections,
            invalid_trained=self.invalid_trained,
            skills={
                pid: policy.mean_skill()
                for pid, policy in sorted(self.policies.items())
                if hasattr(policy, "mean_skill")
            },
            cache_hits=self.cache.hits,
            cache_misses=self.cache.misses,
            coordinator_log=self.coordinator_log,
            coordinator_mismatches=_coordinator_mismatches(
                self.coordinator_log, self.schedule_coordinator, self.sim_chain
            ),
            chain=self.sim_chain,
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
