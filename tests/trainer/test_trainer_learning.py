"""With the tiny model on an easy task, after a short warm-up, GRPO raises mean reward."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from trainer.config import TrainerConfig
from trainer.policy import TrainerPolicy


@pytest.mark.slow
def test_mean_reward_rises_under_grpo(tmp_path: Path) -> None:
    # The reward is the answer format (weight 1.0): learnable by a 0.1M-param model in seconds, and
    # exactly what a fresh model has to learn first. Seeds are fixed, so the run is reproducible.
    # 30 warm-up steps, 8 completions per question, lr 1e-3: the rise over 40 steps is +0.12 to
    # +0.15 on seeds 0-2. Measured alternatives, each flipped by an unrelated change (the sampler's
    # random stream; the tokenizer's corpus): 15 / 4 / 2e-3 gave +0.04 to +0.16 by seed, and
    # 30 / 8 / 2e-3 started near the ceiling (0.84) and fell back to 0.77 on seed 0.
    config = TrainerConfig(
        data_dir=str(tmp_path),
        tasks=("basic_arithmetic",),
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
        threads=1,
        lr=1e-3,
        max_new_tokens=24,
        num_generations=8,
        format_reward=1.0,
        seed=0,
    )
    policy = TrainerPolicy(config)
    policy.warmup(30, lr=3e-3)
    rng = random.Random(0)
    rewards = []
    for _ in range(40):
        metrics = policy.train(policy.generate(policy.registry.sample(rng, 8, config.seed)))
        rewards.append(metrics["reward_mean"])
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.07, f"reward did not rise clearly: first 10 steps {first:.3f}, last 10 {last:.3f}"
