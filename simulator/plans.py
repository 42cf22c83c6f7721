"""Who a simulated swarm's peers are and what a run returns: the plan of every peer (role, seed,
when it is online), decided up front from the scenario's seed so that properties can be checked
against it after the run, and the run's result. Shared by the runner, its worker processes and
the report."""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from protocol.envelope import peer_id_from_seed
from protocol.seeds import derive_seed
from simulator.scenario import Scenario
from swarmp2p.peer import RoundRecord

EPOCH_MS = 1_700_000_000_000
"""Virtual time 0 as epoch milliseconds: a fixed date, so no wall-clock time leaks into a run."""
SWARM_ID = "sim"
HONEST = "honest"


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


def online_changes(plans: Sequence[PeerPlan], end_ms: int) -> list[tuple[float, int, str, bool]]:
    """When `plans`' peers come online and go offline, as the runner's `_SwarmRun.supervise` and
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
