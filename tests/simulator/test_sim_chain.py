"""coordinator = "chain": a simulated swarm drives the SwarmCoordinator contract on one in-process
chain; rewards and winners land on the contract, and a seed still reproduces the run exactly."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from simulator.report import build_report, report_json
from simulator.runner import run_simulation
from simulator.scenario import ByzantineSpec, Scenario


@pytest.fixture(scope="module")
def chain_run():  # type: ignore[no-untyped-def]
    scenario = Scenario(
        peers=6,
        rounds=3,
        seed=4,
        coordinator="chain",
        fetch_sample=0,
        byzantine=ByzantineSpec(fraction=0.17, kinds=("forge",)),  # one forger among six
    )
    return scenario, run_simulation(scenario)


@pytest.mark.slow
def test_rewards_and_winners_land_on_the_contract(chain_run) -> None:  # type: ignore[no-untyped-def]
    scenario, result = chain_run
    chain = result.chain
    assert chain is not None
    assert chain.position() == (scenario.rounds - 1, 0)  # the lazy stage manager kept up
    honest = [plan for plan in result.plans if plan.honest]
    totals: dict[str, float] = defaultdict(float)
    completed = 0
    for plan in honest:
        for record in result.records[plan.peer_id]:
            if not record.completed:
                continue
            completed += 1
            # what the peer measured is what the contract holds (6 decimals on-chain)
            assert math.isclose(
                chain.stage_reward(record.round, 0, plan.peer_id), record.reward, abs_tol=1e-6
            )
            winners = result.coordinator_log["winners"][(record.round, plan.peer_id)]
            assert winners and chain.has_vote(record.round, plan.peer_id, winners)
            totals[plan.peer_id] += chain.stage_reward(record.round, 0, plan.peer_id)
    assert completed == len(honest) * scenario.rounds
    for peer_id, total in totals.items():
        assert math.isclose(chain.total_reward(peer_id), total, abs_tol=1e-5)
    assert result.coordinator_mismatches == 0
    # The forger is banned by every honest peer, so nobody votes for it.
    forger = next(plan.peer_id for plan in result.plans if plan.role == "forge")
    assert all(forger in result.banned_by[plan.peer_id] for plan in honest)
    honest_ids = {plan.peer_id for plan in honest}
    honest_votes = [w for (_, voter), w in result.coordinator_log["winners"].items() if voter in honest_ids]
    assert len(honest_votes) == completed and all(forger not in winners for winners in honest_votes)
    counts = chain.winner_counts()
    assert sum(counts.values()) == sum(len(w) for w in result.coordinator_log["winners"].values())


@pytest.mark.slow
def test_chain_runs_are_reproducible(chain_run) -> None:  # type: ignore[no-untyped-def]
    scenario, result = chain_run
    again = run_simulation(scenario)
    assert report_json(build_report(again)) == report_json(build_report(result))
