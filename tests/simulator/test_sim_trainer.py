"""policy = "trainer": a small simulated swarm of real tiny-model trainers completes its rounds,
sharing one tiny model build, verifying each other's real rollouts and training on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.runner import run_simulation
from simulator.scenario import Scenario, ScenarioError, load_scenario
from trainer.config import TrainerConfig


@pytest.mark.slow
def test_three_trainer_peers_complete_two_rounds(tmp_path: Path) -> None:
    scenario = Scenario(peers=3, rounds=2, seed=5, policy="trainer", questions_per_round=2, fetch_sample=0)
    # A raw (not pre-trained) small tiny model: built in seconds, formatted by the warm-up.
    config = TrainerConfig(
        tasks=("basic_arithmetic",), tiny_hidden_size=64, tiny_pretrain_steps=0, max_new_tokens=12
    )
    result = run_simulation(scenario, work_dir=tmp_path, trainer_config=config)

    builds = [p for p in (tmp_path / "models").iterdir() if not p.name.startswith(".")]  # not the build lock
    assert len(builds) == 1 and (builds[0] / "config.json").exists()  # one tiny model for all
    for plan in result.plans:
        records = result.records[plan.peer_id]
        assert [r.round for r in records if r.completed] == [0, 1]
        for record in records:
            assert record.reward is not None and 0.0 <= record.reward <= 1.0
            # Real completions of the two others, re-scored by reasoning-gym and accepted.
            assert set(record.accepted_peers) == {p.peer_id for p in result.plans} - {plan.peer_id}
            assert record.train_metrics  # the trainer's own metrics came back through the Peer
        # each peer checkpointed into its own folder, next to the shared model
        checkpoints = tmp_path / "peers" / f"{plan.index:04d}" / "checkpoints"
        assert any(checkpoints.iterdir())
    assert result.invalid_trained == []
    assert result.coordinator_mismatches == 0


def test_trainer_policy_is_refused_for_big_swarms() -> None:
    with pytest.raises(ScenarioError, match="at most 32 peers"):
        load_scenario(None, policy="trainer", peers=33)
