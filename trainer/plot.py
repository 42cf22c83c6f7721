"""Training-run plots (matplotlib, headless): the reward per step and the held-out accuracy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def _moving_mean(values: Sequence[float], window: int) -> list[float]:
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def plot_rewards(
    path: Path,
    rewards: Sequence[float],
    evals: Sequence[Mapping[str, Any]] = (),
    window: int = 10,
    first_step: int = 0,
    tests: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """Top: the training reward of every step and its moving mean. Bottom (when there are
    evaluations): held-out accuracy overall and per task against the step it was measured at.
    `evals` are TrainerPolicy.evaluate() results; `first_step` is the step before the run's first;
    `tests` are the test split's results (the start and the chosen weights), drawn as points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 2 if evals else 1
    figure, axes = plt.subplots(rows, 1, figsize=(8, 3.4 * rows), sharex=True, squeeze=False)
    top = axes[0][0]
    steps = list(range(first_step + 1, first_step + len(rewards) + 1))
    top.plot(steps, rewards, color="tab:blue", alpha=0.3, label="mean reward of the step's rollouts")
    if len(rewards) >= 2:
        top.plot(steps, _moving_mean(rewards, window), color="tab:blue", label=f"moving mean ({window})")
    top.set_ylabel("training reward")
    span = f" (steps {steps[0]}-{steps[-1]})" if steps else ""
    top.set_title(f"GRPO training: reward per step{span}")
    top.margins(y=0.08)  # fits the data: a fixed 0-1 axis flattened the curve
    top.grid(alpha=0.3)
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    if evals:
        bottom = axes[1][0]
        x = [e["step"] for e in evals]
        split = evals[0].get("split", "held-out")
        overall = [e["accuracy"] for e in evals]
        bottom.plot(x, overall, "o-", color="black", lw=2, label=f"all tasks ({split})")
        for task in evals[0]["per_task"]:
            bottom.plot(x, [e["per_task"][task]["accuracy"] for e in evals], ".--", alpha=0.8, label=task)
        bottom.set_ylabel("held-out accuracy")
        if tests:  # the reported figure: test on the start and on the weights validation chose
            label = "all tasks (test): start, chosen weights"
            points = ([t["step"] for t in tests], [t["accuracy"] for t in tests])
            bottom.scatter(*points, marker="*", s=140, color="tab:red", zorder=3, label=label)
        shown = [*evals, *tests]
        top_value = max(max(e["accuracy"], *(t["accuracy"] for t in e["per_task"].values())) for e in shown)
        bottom.set_ylim(0.0, min(1.02, top_value + 0.1))
        bottom.grid(alpha=0.3)
        bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
        bottom.set_xlabel("GRPO step")
    else:
        top.set_xlabel("GRPO step")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
