"""What a simulated swarm's report must show whatever the scenario: the properties the
simulator's tests hold every run to."""

from __future__ import annotations

from simulator.runner import SimulationResult


def honest_completes_every_present_round(result: SimulationResult) -> None:
    for plan in result.plans:
        if not plan.honest:
            continue
        completed = {record.round for record in result.records[plan.peer_id] if record.completed}
        for round_number in range(result.scenario.rounds):
            if plan.present_for(round_number, result.round_ms):
                assert round_number in completed, (plan.index, round_number, plan.online)


def never_trained_on_forgeries(result: SimulationResult) -> None:
    """No honest peer ever trained on a group with forged rewards (a forger trains on its own)."""
    honest = {plan.peer_id for plan in result.plans if plan.honest}
    assert [(peer, round_number) for peer, round_number in result.invalid_trained if peer in honest] == []


def no_honest_rollouts_lost(result: SimulationResult) -> None:
    """Lossless network, every batch fetched: each honest peer present for a round accepted the
    batch of every other honest peer present for it."""
    honest = [plan for plan in result.plans if plan.honest]
    for round_number in range(result.scenario.rounds):
        present = [p for p in honest if p.present_for(round_number, result.round_ms)]
        for receiver in present:
            record = next(
                r for r in result.records[receiver.peer_id] if r.round == round_number and r.completed
            )
            expected = {p.peer_id for p in present if p is not receiver}
            assert expected <= set(record.accepted_peers), (round_number, receiver.index)


def byzantine_banned_by_every_honest_peer(result: SimulationResult) -> None:
    """Every honest peer banned every byzantine sender, and no honest one."""
    byzantine = {plan.peer_id for plan in result.plans if not plan.honest}
    honest = [plan for plan in result.plans if plan.honest]
    for plan in honest:
        banned = set(result.banned_by[plan.peer_id])
        # Replayers only relay other peers' messages and are caught as sender mismatches.
        assert byzantine <= banned, plan.index
        assert not banned & {h.peer_id for h in honest}


def halves_apart_then_agreed(result: SimulationResult, *, start_round: int, heal_round: int) -> None:
    """A swarm cut in two halves (the first half of the plans on one side) for [start_round,
    heal_round), every batch fetched: while cut, each peer accepts only its own side's batches,
    otherwise every other peer's. Stated bound: from the first round after the heal, at every
    mid-round sample all honest online peers are in the schedule's current round."""
    everyone = {p.peer_id for p in result.plans}
    side = {p.peer_id for p in result.plans[: len(result.plans) // 2]}
    for plan in result.plans:
        for record in result.records[plan.peer_id]:
            accepted = set(record.accepted_peers)
            if start_round <= record.round < heal_round:  # cut off: only its own side
                assert accepted <= (side if plan.peer_id in side else everyone - side)
            else:
                assert len(accepted) == len(everyone) - 1
    for sample in result.agreement:
        if sample["round"] >= heal_round:
            assert sample["on_current_round"] == sample["honest_online"] > 0
