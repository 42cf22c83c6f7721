"""Simulator scale work: memory bounds and caches must not change what a seed produces."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.network import LinkModel, SimWorld
from simulator.pair_latency import PairLatencies, pair_latency_s
from simulator.report import build_report, report_json
from simulator.runner import run_simulation
from simulator.scenario import FaultSpec, NetworkSpec, Scenario


def _report(scenario: Scenario) -> str:
    return report_json(build_report(run_simulation(scenario)))


def test_latencies_from_the_pair_triangle_give_the_same_report(monkeypatch: pytest.MonkeyPatch) -> None:
    # Churn re-gathers the subscribers after every membership change, loss takes the per-receiver
    # loop; both read the triangle. The same run with every latency computed directly from the
    # pair's ids (what the per-sender arrays held before) must give the same bytes.
    scenario = Scenario(
        peers=12,
        rounds=4,
        seed=11,
        faults=FaultSpec(churn_leave=0.2, crash_rate=0.1),
        network=NetworkSpec(loss=0.05),
    )
    stored = _report(scenario)

    def direct_row(self: PairLatencies, sender: str, members: Any) -> np.ndarray:
        return np.array([pair_latency_s(sender, self.ids[m], self.low_ms, self.high_ms) for m in members])

    def direct_get(self: PairLatencies, a: str, b: str) -> float:
        return pair_latency_s(a, b, self.low_ms, self.high_ms)

    monkeypatch.setattr(PairLatencies, "row", direct_row)
    monkeypatch.setattr(PairLatencies, "get", direct_get)
    assert _report(scenario) == stored


@given(
    ids=st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=12, unique=True),
    data=st.data(),
)
def test_the_pair_triangle_holds_each_pairs_latency_once(ids: list[str], data: st.DataObject) -> None:
    latencies = PairLatencies(10.0, 80.0)
    order = data.draw(st.permutations(ids))
    for peer in order:
        latencies.number_of(peer)
    assert len(latencies.values) == len(ids) * (len(ids) + 1) // 2  # once per pair, itself included
    for a in ids:
        for b in ids:
            expected = pair_latency_s(a, b, 10.0, 80.0)
            assert latencies.get(a, b) == expected == latencies.get(b, a)
            assert 0.010 <= expected <= 0.080
    sender = data.draw(st.sampled_from(ids))
    members = data.draw(st.lists(st.sampled_from(ids)))
    row = latencies.row(sender, [latencies.number[m] for m in members])
    assert row.tolist() == [pair_latency_s(sender, m, 10.0, 80.0) for m in members]
    assert latencies.get(sender, "never-numbered") == pair_latency_s(sender, "never-numbered", 10.0, 80.0)


def test_a_world_keeps_one_latency_per_pair_not_one_per_sender() -> None:
    # 10,000 peers within 8 GiB: per-sender arrays were N x N floats; attaching the
    # same peer again (a restart) adds nothing.
    world = SimWorld(LinkModel(), seed=1, now_ms=lambda: 0, round_of=lambda ms: 0)
    for index in range(40):
        world.attach(f"peer-{index}")
    world.detach("peer-3")
    world.attach("peer-3")
    assert world._latencies.ids == [f"peer-{index}" for index in range(40)]
    assert len(world._latencies.values) == 40 * 41 // 2
    assert world.latency_s("peer-1", "peer-2") >= world._base_latency_s("peer-2", "peer-1")


def test_the_shared_verify_cache_keeps_recent_rounds_only_and_evicting_changes_no_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's VerifyCache is bounded by 4 x peers above SIM_CACHE_FLOOR (two rounds of every
    peer's announcement and batch): with the floor out of the way, a batch from three rounds ago
    is no longer held anywhere at the last round, and the report is byte for byte the one of a
    cache that never evicts (a memo: a miss recomputes the same outcome)."""
    import gc

    import simulator.runner as runner
    from protocol.messages import RolloutBatch

    # Loss: failed fetches, top-ups and DHT sweeps reach for batches beyond the first fetch.
    # (No churn: a peer that left keeps its last round's work, one batch each, by design.)
    scenario = Scenario(peers=30, rounds=7, seed=5, fetch_sample=4, network=NetworkSpec(loss=0.05))
    monkeypatch.setattr(runner, "SIM_CACHE_FLOOR", 10**6)  # never evicts here
    never_evicting = _report(scenario)

    monkeypatch.setattr(runner, "SIM_CACHE_FLOOR", 1)  # 4 x peers: two rounds
    monkeypatch.setattr(runner, "SIM_IDENTITY_FLOOR", 1)  # 2 x peers: an instant's messages
    held: list[int] = []

    def on_round(round_number: int) -> None:
        if round_number == scenario.rounds - 2:
            gc.collect()
            old = round_number - 3
            held.append(sum(1 for o in gc.get_objects() if type(o) is RolloutBatch and o.round <= old))

    bounded = report_json(build_report(run_simulation(scenario, on_round=on_round)))
    assert held == [0]
    assert bounded == never_evicting
