"""Simulator scale work (issue 13): memory bounds and caches must not change what a seed produces."""

from __future__ import annotations

import pytest

import simulator.network as network
from simulator.report import build_report, report_json
from simulator.runner import run_simulation
from simulator.scenario import FaultSpec, NetworkSpec, Scenario


def _report(scenario: Scenario) -> str:
    return report_json(build_report(run_simulation(scenario)))


def test_bounded_latency_cache_gives_the_same_report(monkeypatch: pytest.MonkeyPatch) -> None:
    # Churn rebuilds the per-sender latency arrays, so the pair cache is consulted again.
    scenario = Scenario(
        peers=12,
        rounds=4,
        seed=11,
        faults=FaultSpec(churn_leave=0.2, crash_rate=0.1),
        network=NetworkSpec(loss=0.05),
    )
    cached = _report(scenario)
    monkeypatch.setattr(network, "LATENCY_CACHE_PAIRS", 0)
    assert _report(scenario) == cached
