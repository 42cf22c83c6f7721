"""A simulation spread over worker processes (`workers = N`, simulator/shards.py) keeps every
property of a one-process run: the same checks as tests/simulator/test_sim_properties.py, on runs whose
peers live in two processes and reach each other only through the lockstep."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.network import LinkModel, SimWorld
from simulator.report import build_report, report_json
from simulator.runner import online_changes, plan_peers, run_simulation
from simulator.scenario import (
    BYZANTINE_KINDS,
    ByzantineSpec,
    FaultSpec,
    NetworkSpec,
    PartitionSpec,
    Scenario,
    ScenarioError,
    load_scenario,
)
from simulator.shards import EVERYONE, WAKING, ShardLink, SimulationWorkerError, owner_of, route
from tests.helpers.sim_checks import (
    byzantine_banned_by_every_honest_peer,
    halves_apart_then_agreed,
    honest_completes_every_present_round,
    never_trained_on_forgeries,
    no_honest_rollouts_lost,
)


def _owners(result, workers: int) -> dict[str, int]:
    return {plan.peer_id: owner_of(plan.index, workers) for plan in result.plans}


def test_two_workers_run_the_same_lossless_swarm_as_one() -> None:
    """No loss, no faults: which process a peer runs in changes no message and no outcome."""
    scenario = Scenario(peers=12, rounds=4, seed=7, fetch_sample=0)
    one = run_simulation(scenario)
    two = run_simulation(attrs.evolve(scenario, workers=2))
    for result in (one, two):
        honest_completes_every_present_round(result)
        no_honest_rollouts_lost(result)
    for round_number in range(scenario.rounds):
        for key in ("gossip_messages", "requests", "responses", "dht_puts"):
            assert two.stats[round_number][key] == one.stats[round_number][key], (round_number, key)
    assert two.stats[1]["request_timeouts"] == 0
    # Every peer accepted the batch of every other, half of which live in the other process.
    owners = _owners(two, 2)
    for peer_id, records in two.records.items():
        crossed = {p for record in records for p in record.accepted_peers if owners[p] != owners[peer_id]}
        assert len(crossed) == 6, peer_id
    assert [part["barriers"] for part in two.lockstep] == [two.lockstep[0]["barriers"]] * 2
    assert two.agreement == one.agreement
    # The workers share what one process's cache shares: no honest peer's signature checked and
    # no batch re-scored again per worker (4x one process's misses before they did; now the
    # verdicts two workers compute at the same instant, before they can tell each other).
    assert two.cache_misses < 2 * one.cache_misses


def test_a_run_over_two_workers_is_reproduced_by_its_seed() -> None:
    scenario = Scenario(
        peers=10,
        rounds=4,
        seed=3,
        workers=2,
        faults=FaultSpec(churn_leave=0.2, crash_rate=0.1, slow_fraction=0.2),
        network=NetworkSpec(loss=0.05),
        byzantine=ByzantineSpec(fraction=0.2),
    )
    first = report_json(build_report(run_simulation(scenario)))
    assert first == report_json(build_report(run_simulation(scenario)))
    assert '"workers": 2' in first  # the report says how to reproduce it
    assert first != report_json(build_report(run_simulation(attrs.evolve(scenario, seed=4))))
    one = report_json(build_report(run_simulation(attrs.evolve(scenario, workers=1))))
    assert '"workers"' not in one  # one-process reports are as before


def test_byzantine_senders_are_banned_across_workers() -> None:
    result = run_simulation(
        Scenario(
            peers=18, rounds=6, seed=11, fetch_sample=0, workers=2, byzantine=ByzantineSpec(fraction=6 / 18)
        )
    )
    byzantine = [plan for plan in result.plans if not plan.honest]
    assert sorted(plan.role for plan in byzantine) == sorted(BYZANTINE_KINDS)
    owners = _owners(result, 2)
    assert {owners[plan.peer_id] for plan in byzantine} == {0, 1}
    byzantine_banned_by_every_honest_peer(result)
    honest_completes_every_present_round(result)
    never_trained_on_forgeries(result)
    no_honest_rollouts_lost(result)
    for reason in ("forged_reward", "malformed", "oversized", "sender_mismatch", "impersonation", "flood"):
        assert result.rejections[reason] > 0, reason


def test_forgeries_from_another_worker_are_trained_on_only_without_verification() -> None:
    scenario = Scenario(
        peers=8,
        rounds=4,
        seed=5,
        fetch_sample=0,
        workers=2,
        byzantine=ByzantineSpec(fraction=2 / 8, kinds=("forge",)),
    )
    unverified = run_simulation(scenario, peer_overrides={"verify_rewards": False})
    with pytest.raises(AssertionError):
        never_trained_on_forgeries(unverified)
    verified = run_simulation(scenario)
    never_trained_on_forgeries(verified)
    assert verified.rejections["forged_reward"] > 0


def test_churn_and_loss_across_workers_keep_honest_peers_going() -> None:
    scenario = Scenario(
        peers=12,
        rounds=6,
        seed=9941,
        workers=3,
        fetch_sample=3,
        network=NetworkSpec(loss=0.05),
        faults=FaultSpec(
            churn_leave=0.25, crash_rate=0.125, late_join_fraction=0.2, late_join_round=2, slow_fraction=0.2
        ),
        byzantine=ByzantineSpec(fraction=0.15),
    )
    result = run_simulation(scenario)
    assert any(plan.events for plan in result.plans)  # churn happened
    honest_completes_every_present_round(result)
    never_trained_on_forgeries(result)
    assert sum(stats["dropped_loss"] for stats in result.stats.values()) > 0


def test_a_partition_across_workers_heals() -> None:
    scenario = Scenario(
        peers=12,
        rounds=8,
        seed=5,
        fetch_sample=0,
        workers=2,
        faults=FaultSpec(partition=(PartitionSpec(start_round=2, heal_round=5, fraction=0.5),)),
    )
    result = run_simulation(scenario)
    honest_completes_every_present_round(result)
    halves_apart_then_agreed(result, start_round=2, heal_round=5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"workers": 0}, "'workers' must be >= 1"),
        ({"workers": 3, "peers": 2}, "workers: 3 is more than the 2 peers"),
        ({"workers": 2, "policy": "trainer", "peers": 4}, "needs policy 'sim'"),
        ({"workers": 2, "coordinator": "chain"}, "the schedule coordinator"),
    ],
)
def test_wrong_worker_counts_are_refused_in_one_line(overrides: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as caught:
        load_scenario(None, **overrides)
    assert "\n" not in str(caught.value)


def test_a_failing_worker_is_reported_with_its_error() -> None:
    with pytest.raises(SimulationWorkerError, match="no_such_setting"):
        run_simulation(Scenario(peers=4, rounds=2, workers=2), peer_overrides={"no_such_setting": 1})


def test_the_simulate_command_spreads_a_run_over_workers(tmp_path) -> None:
    from typer.testing import CliRunner

    from swarmp2p.cli import app

    out = tmp_path / "run"
    args = ["simulate", "--scenario", "byzantine10", "--peers", "20", "--rounds", "3", "--workers", "2"]
    done = CliRunner().invoke(app, [*args, "--out", str(out), "--no-plots", "--no-solo"])
    assert done.exit_code == 0, done.output
    assert "2 workers" in done.output
    report = (out / "report.json").read_text()
    assert '"workers": 2' in report
    assert load_scenario("byzantine10", peers=20, rounds=3, workers=2).workers == 2


_ITEM = st.tuples(st.sampled_from("godqrv"), st.integers(0, 10**6))


@st.composite
def _meetings(draw: st.DrawFn) -> list[tuple[float, float, list]]:
    workers = draw(st.integers(2, 5))
    now = draw(st.floats(0, 1e6, allow_nan=False))
    destinations = st.sampled_from([EVERYONE, *range(workers)])
    reports = []
    for source in range(workers):
        outbox = draw(
            st.lists(st.tuples(destinations, _ITEM).filter(lambda pair, s=source: pair[0] != s), max_size=6)
        )
        later = draw(st.floats(0.001, 1e3, allow_nan=False))
        reports.append((now, now + later, outbox))
    return reports


@given(_meetings())
def test_the_lockstep_hands_each_item_to_exactly_its_workers_in_a_fixed_order(reports: list) -> None:
    inboxes, next_at = route(reports)
    now = reports[0][0]
    for index, inbox in enumerate(inboxes):
        expected = [
            item
            for source, (_, _, outbox) in enumerate(reports)
            for destination, item in outbox
            if source != index and destination in (EVERYONE, index)
        ]
        assert inbox == expected
    waking = any(item[0] in WAKING for _, _, outbox in reports for _, item in outbox)
    assert next_at == (now if waking else min(deadline for _, deadline, _ in reports))
    assert next_at == now or next_at > now  # time never goes back


@given(_meetings(), st.floats(1e-9, 1.0))
def test_workers_at_different_instants_are_refused(reports: list, skew: float) -> None:
    now, deadline, outbox = reports[-1]
    skewed = [*reports[:-1], (now + skew if now + skew != now else now + 1.0, deadline, outbox)]
    with pytest.raises(SimulationWorkerError, match="out of step"):
        route(skewed)


def test_an_item_for_no_such_worker_is_refused() -> None:
    with pytest.raises(SimulationWorkerError, match="worker 0 sent an item to worker 7"):
        route([(1.0, 2.0, [(7, ("g", 1))]), (1.0, 2.0, [])])


@given(
    seed=st.integers(0, 10**6),
    churn=st.floats(0.0, 0.5),
    crash=st.floats(0.0, 0.3),
    late=st.floats(0.0, 0.5),
    times=st.lists(st.integers(0, 6 * 30_000 - 1), min_size=1, max_size=20),  # the run ends at 180 s
)
def test_a_world_sees_the_other_workers_peers_online_exactly_as_planned(
    seed: int, churn: float, crash: float, late: float, times: list[int]
) -> None:
    """What worker 0 believes of worker 1's peers at any instant is what their plans say:
    online from each interval's start, offline from its end (a crash and its restart at one
    instant leave the peer online)."""
    scenario = Scenario(
        peers=12,
        rounds=6,
        seed=seed,
        faults=FaultSpec(churn_leave=churn, crash_rate=crash, late_join_fraction=late, late_join_round=2),
        byzantine=ByzantineSpec(fraction=0.2),
    )
    plans = plan_peers(scenario)
    end_ms = scenario.rounds * int(scenario.round_s * 1000)
    others = [plan for plan in plans if owner_of(plan.index, 2) == 1]
    world = SimWorld(LinkModel(), seed=1, now_ms=lambda: 0, round_of=lambda _: 0)
    link = ShardLink(None, 0, 2)  # type: ignore[arg-type]
    for plan in others:
        world.add_remote(plan.peer_id)
    link.expect_online(online_changes(others, end_ms))
    for at_ms in sorted(times):
        link.apply_online_changes(world, at_ms / 1000)
        for plan in others:
            intervals = plan.online if plan.honest or plan.role == "forge" else ((0, end_ms),)
            planned = any(start <= at_ms < stop for start, stop in intervals)
            assert world.is_online(plan.peer_id) == planned, (plan.index, at_ms, intervals)
