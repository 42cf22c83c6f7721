"""One rule decides whether a group teaches anything: protocol.sampling.has_advantage.

The sampler used to keep a group when its rewards were not exactly equal, and the trainer then
dropped it again unless they differed by more than 1e-9 (trainer/grpo.py's `is_informative`):
a group could take a slot in the training batch and then be thrown away. Both now use one rule
with one tolerance; the test below trains on what the sampler kept and fails if they disagree.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.sampling import REWARD_TOLERANCE, has_advantage, rewards_differ, sample_training_groups


def group(index: int, rewards: list[float]) -> QuestionGroup:
    ref = QuestionRef("basic_arithmetic", 3, index)
    return QuestionGroup(ref, tuple(Completion(f"text {i}", r) for i, r in enumerate(rewards)))


def test_the_tolerance_is_a_bound_both_ways() -> None:
    assert not rewards_differ([0.5, 0.5 + REWARD_TOLERANCE / 2])
    assert rewards_differ([0.5, 0.5 + 2 * REWARD_TOLERANCE])
    assert not rewards_differ([1.0])  # one completion: no group to compare with
    assert not rewards_differ([])


@given(st.lists(st.floats(min_value=0, max_value=1), min_size=0, max_size=8))
def test_has_advantage_is_rewards_differ_on_the_groups_rewards(rewards: list[float]) -> None:
    assert has_advantage(group(0, rewards)) == rewards_differ(rewards)


def test_the_trainer_trains_on_exactly_the_groups_the_sampler_kept(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from trainer.config import TrainerConfig
    from trainer.policy import TrainerPolicy
    from trainer.tasks import ReasoningGymRegistry

    # Training questions only: the trainer drops a held-out one (validation or test split) before
    # the rule is even asked, which is not what this test is about.
    registry = ReasoningGymRegistry(("basic_arithmetic",), difficulty=0)
    a, b, c, d = [i for i in range(100) if not registry.is_heldout(group(i, []).question)][:4]
    groups = [
        group(a, [0.0, 1.0, 0.0, 1.0]),  # teaches
        group(b, [0.5, 0.5, 0.5, 0.5 + REWARD_TOLERANCE / 4]),  # float noise: not equal, no signal
        group(c, [0.3, 0.3, 0.3, 0.3]),  # flat
        group(d, [0.2, 0.2, 0.2, 0.2 + 1e-6]),  # small but real
    ]
    sampled = sample_training_groups(groups, {}, n_local=4, n_external=0, max_per_peer=1, seed=7)
    kept = list(sampled.all_groups())
    assert sorted(g.question.index for g in kept) == [a, d]
    config = TrainerConfig(
        data_dir=str(tmp_path),
        tasks=("basic_arithmetic",),
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=16,
        num_generations=4,
        seed=3,
    )
    metrics = TrainerPolicy(config).train(groups)
    assert metrics["groups_used"] == len(kept)
