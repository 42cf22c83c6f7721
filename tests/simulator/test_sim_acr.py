"""`swarmp2p simulate --game answer-critique-resolve`: the same Peer driver plays three stages a
round (answer, critique, resolve) over the simulated network, every stage of every round
completes, the report counts each stage, and forged critiques never reach training."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
from typer.testing import CliRunner

from protocol.messages import QuestionGroup
from simulator.policy import forged_group
from simulator.report import build_report, report_json
from simulator.runner import run_simulation
from simulator.scenario import Scenario
from swarmp2p.cli import app

ACR = "answer-critique-resolve"


def test_simulate_acr_completes_every_stage_of_every_round(tmp_path: Path) -> None:
    args = ["simulate", "--peers", "20", "--rounds", "5", "--game", ACR, "--seed", "1", "--no-plots"]
    first = CliRunner().invoke(app, [*args, "--no-solo", "--out", str(tmp_path / "a")])
    assert first.exit_code == 0, first.output
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["scenario"]["game"] == ACR
    stages = report["summary"]["stages"]
    assert [row["name"] for row in stages] == ["answer", "critique", "resolve"]
    for row in stages:
        # every honest peer present in a round completed each of its stages
        assert row["honest_completed"] == row["honest_present"] == 100, row
        assert row["rounds_completed"] == 5
        assert row["batches_accepted"] > 0, row  # each stage's batches were verified and taken
    assert [row["trained"] for row in stages] == [True, False, True]
    assert stages[1]["trained_groups"] == 0 and stages[2]["trained_groups"] > 0
    assert report["summary"]["honest_rounds_present_not_completed"] == 0
    assert report["summary"]["trained_on_invalid_groups"] == 0
    assert "stage 1 critique" in first.output
    second = CliRunner().invoke(app, [*args, "--no-solo", "--out", str(tmp_path / "b")])
    assert second.exit_code == 0, second.output
    assert (tmp_path / "a" / "report.json").read_bytes() == (tmp_path / "b" / "report.json").read_bytes()


class CritiqueForger:
    """Honest answers, forged critiques: claims the opposite reward for every critique."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def generate_items(self, items: Any) -> list[QuestionGroup]:
        groups = self.inner.generate_items(items)
        return [forged_group(g) for g in groups] if items and items[0].stage == 1 else groups

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_forged_critiques_are_rejected_and_their_authors_banned() -> None:
    scenario = Scenario(peers=12, rounds=3, seed=3, game=ACR, fetch_sample=0)
    forgers: set[str] = set()

    def wrap(plan: Any, policy: Any) -> Any:
        if plan.index < 2:
            forgers.add(plan.peer_id)
            return CritiqueForger(policy)
        return policy

    result = run_simulation(scenario, wrap_policy=wrap)
    stages = build_report(result)["summary"]["stages"]
    assert "forged_reward" not in stages[0]["rejected"]  # their answers are honest...
    assert stages[1]["rejected"].get("forged_reward", 0) > 0  # ...their critiques are not
    for peer, banned in result.banned_by.items():
        assert set(banned) == forgers - {peer}, peer  # every other peer banned both, no one else


def test_the_single_game_report_does_not_name_a_game() -> None:
    # The single-stage game's reports stay byte-identical to those made before games had names.
    scenario = Scenario(peers=3, rounds=1, seed=2)
    assert "game" not in scenario.to_json()
    report = json.loads(report_json(build_report(run_simulation(scenario))))
    assert "stages" not in report["summary"]
    assert attrs.evolve(scenario, game=ACR).to_json()["game"] == ACR


def test_the_multi_stage_game_refuses_the_one_stage_simulated_chain() -> None:
    result = CliRunner().invoke(app, ["simulate", "--game", ACR, "--coordinator", "chain", "--no-plots"])
    assert result.exit_code == 2 and "needs the schedule coordinator" in result.output
