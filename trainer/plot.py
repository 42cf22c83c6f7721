"""Reward-curve PNG for a training run (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def plot_rewards(
    path: Path, rewards: Sequence[float], evals: Sequence[tuple[int, float]] = (), window: int = 10
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    steps = list(range(1, len(rewards) + 1))
    axis.plot(steps, rewards, color="tab:blue", alpha=0.35, label="mean reward per step")
    if len(rewards) >= 2:
        smoothed = [
            sum(rewards[max(0, i - window + 1) : i + 1]) / len(rewards[max(0, i - window + 1) : i + 1])
            for i in range(len(rewards))
        ]
        axis.plot(steps, smoothed, color="tab:blue", label=f"moving mean ({window})")
    if evals:
        axis.plot(
            [s for s, _ in evals], [r for _, r in evals], "o-", color="tab:orange", label="held-out reward"
        )
    axis.set_xlabel("training step")
    axis.set_ylabel("reward")
    axis.set_ylim(-0.02, 1.02)
    axis.grid(alpha=0.3)
    axis.legend(loc="lower right")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
