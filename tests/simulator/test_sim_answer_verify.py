"""`swarmp2p simulate --game answer-verify`: the second game, added as one registry row, plays
both stages a round over the simulated network; only answers are trained on, the vote follows
the verify stage (once a round), and forged verdicts never reach anyone's store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from protocol.games import GAME_NAMES
from protocol.messages import QuestionGroup
from simulator.policy import forged_group
from simulator.report import build_report
from simulator.runner import run_simulation
from simulator.scenario import Scenario
from swarmp2p.cli import app

GAME = "answer-verify"
PEERS, ROUNDS = 10, 4


def test_simulate_answer_verify_plays_both_stages_and_votes_once_a_round(tmp_path: Path) -> None:
    args = ["simulate", "--peers", str(PEERS), "--rounds", str(ROUNDS), "--game", GAME, "--seed", "4"]
    result = CliRunner().invoke(app, [*args, "--no-plots", "--no-solo", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["scenario"]["game"] == GAME
    stages = report["summary"]["stages"]
    assert [row["name"] for row in stages] == ["answer", "verify"]
    assert [row["trained"] for row in stages] == [True, False]
    for row in stages:
        assert row["honest_completed"] == row["honest_present"] == PEERS * ROUNDS, row
        assert row["batches_accepted"] > 0, row  # each stage's batches verified and taken in
    assert stages[0]["trained_groups"] > 0 and stages[1]["trained_groups"] == 0
    assert 0.0 < stages[1]["reward_mean"] < 1.0  # verdicts are scored, neither all right nor all wrong
    assert "stage 1 verify" in result.output
    assert f"{PEERS * ROUNDS * 2} / {PEERS * ROUNDS} (0 mismatches)" in result.output  # rewards / votes


def test_the_simulate_help_lists_every_game_of_the_registry() -> None:
    result = CliRunner().invoke(app, ["simulate", "--help"], terminal_width=400)
    assert result.exit_code == 0
    assert all(name in result.output for name in GAME_NAMES)
    unknown = CliRunner().invoke(app, ["simulate", "--game", "chess", "--no-plots"])
    assert (
        unknown.exit_code == 2 and "unknown game 'chess' (known: " + ", ".join(GAME_NAMES) in unknown.output
    )


class VerdictForger:
    """Honest answers, forged verdicts: claims the opposite reward for every verify group."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def generate_items(self, items: Any) -> list[QuestionGroup]:
        return [forged_group(group) for group in self.inner.generate_items(items)]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_forged_verdicts_are_rejected_and_their_authors_banned() -> None:
    forgers: set[str] = set()

    def wrap(plan: Any, policy: Any) -> Any:
        if plan.index < 2:
            forgers.add(plan.peer_id)
            return VerdictForger(policy)
        return policy

    result = run_simulation(Scenario(peers=8, rounds=3, seed=3, game=GAME, fetch_sample=0), wrap_policy=wrap)
    stages = build_report(result)["summary"]["stages"]
    assert "forged_reward" not in stages[0]["rejected"]  # their answers are honest...
    assert stages[1]["rejected"].get("forged_reward", 0) > 0  # ...their verdicts are not
    for peer, banned in result.banned_by.items():
        assert set(banned) == forgers - {peer}, peer
