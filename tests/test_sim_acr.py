"""`swarmp2p simulate --game answer-critique-resolve`: the same Peer driver plays three stages a
round (answer, critique, resolve) over the simulated network, every stage of every round
completes, the report counts each stage, and forged critiques never reach training."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
from typer.testing import CliRunner

from simulator.report import build_report, report_json
from simulator.runner import run_simulation
from simulator.scenario import ByzantineSpec, Scenario
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


def test_forged_critiques_are_rejected_and_their_authors_banned() -> None:
    scenario = Scenario(
        peers=12, rounds=3, seed=3, game=ACR, byzantine=ByzantineSpec(fraction=0.25, kinds=("forge",))
    )
    result = run_simulation(scenario)
    report = build_report(result)
    stages = report["summary"]["stages"]
    # forging peers claim inverted rewards in every stage: critiques and resolutions too
    assert stages[1]["rejected"].get("forged_reward", 0) + stages[2]["rejected"].get("forged_reward", 0) > 0
    assert report["summary"]["byzantine_banned_by_all_honest"] == 3
    honest = {plan.peer_id for plan in result.plans if plan.honest}
    assert not [peer for peer, _ in result.invalid_trained if peer in honest]  # forgers train on their own


def test_the_single_game_report_does_not_name_a_game() -> None:
    # The single-stage game's reports stay byte-identical to those made before games had names.
    scenario = Scenario(peers=3, rounds=1, seed=2)
    assert "game" not in scenario.to_json()
    report = json.loads(report_json(build_report(run_simulation(scenario))))
    assert "stages" not in report["summary"]
    assert attrs.evolve(scenario, game=ACR).to_json()["game"] == ACR
