"""The DHT sweep: batches whose announcement was lost are still found, verified and used."""

from __future__ import annotations

from simulator.runner import run_simulation
from simulator.scenario import FaultSpec, NetworkSpec, Scenario


def accepted_pairs(result, *, rounds_from: int = 0) -> set[tuple[str, int, str]]:  # type: ignore[no-untyped-def]
    return {
        (peer, record.round, other)
        for peer, records in result.records.items()
        for record in records
        if record.completed and record.round >= rounds_from
        for other in record.accepted_peers
    }


def expected_pairs(result, *, rounds_from: int = 0) -> set[tuple[str, int, str]]:  # type: ignore[no-untyped-def]
    """Every honest peer present for a round should hold every other such peer's batch."""
    pairs = set()
    for round_number in range(rounds_from, result.scenario.rounds):
        present = [
            p.peer_id for p in result.plans if p.honest and p.present_for(round_number, result.round_ms)
        ]
        pairs |= {(a, round_number, b) for a in present for b in present if a != b}
    return pairs


def test_announcement_loss_is_recovered_from_the_dht() -> None:
    lossy_gossip = NetworkSpec(gossip_loss=0.5)  # half of all announcements vanish; streams and DHT work
    swept = run_simulation(Scenario(peers=8, rounds=4, seed=3, fetch_sample=0, network=lossy_gossip))
    assert expected_pairs(swept) <= accepted_pairs(swept)
    assert swept.rejections.get("fetch_failed", 0) == 0

    unswept = run_simulation(
        Scenario(peers=8, rounds=4, seed=3, fetch_sample=0, network=lossy_gossip, dht_sweep=False)
    )
    missing = expected_pairs(unswept) - accepted_pairs(unswept)
    assert len(missing) > 20  # without the sweep, lost announcements mean lost rollouts


def test_late_joiners_find_batches_announced_before_they_arrived() -> None:
    # Late joiners come online at a random time inside round 2, often after the others announced.
    faults = FaultSpec(late_join_fraction=0.5, late_join_round=2)
    result = run_simulation(Scenario(peers=10, rounds=5, seed=11, fetch_sample=0, faults=faults))
    late = [p for p in result.plans if p.events and p.events[0].startswith("late_join")]
    assert late
    # From the first full round after joining, a late joiner holds every honest present batch.
    assert expected_pairs(result, rounds_from=3) <= accepted_pairs(result, rounds_from=3)
    # In the round it joined, it also holds the batches announced before it arrived.
    late_ids = {plan.peer_id for plan in late}
    early_birds = {
        p.peer_id for p in result.plans if p.honest and p.present_for(2, result.round_ms)
    } - late_ids
    checked = 0
    for plan in late:
        for record in result.records[plan.peer_id]:
            if record.round == 2 and record.completed:
                assert early_birds <= set(record.accepted_peers)
                checked += 1
    assert checked


def test_sampling_bounds_the_sweep() -> None:
    # With fetch_sample, the sweep only looks up peers the sampler would have fetched anyway.
    # (Round 0 is skipped: peers that start first see few others and fetch everything.)
    result = run_simulation(
        Scenario(peers=20, rounds=3, seed=5, fetch_sample=4, network=NetworkSpec(gossip_loss=0.5))
    )
    sizes = [
        len(record.accepted_peers)
        for records in result.records.values()
        for record in records
        if record.completed and record.round >= 1
    ]
    assert sizes and max(sizes) <= 12 and sum(sizes) / len(sizes) <= 6
