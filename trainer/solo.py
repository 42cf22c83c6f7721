"""One peer training alone (`swarmp2p train`): the GRPO loop with no network, synchronous.

`prepare` resumes from the newest checkpoint (or runs the format warm-up) and sets the
learning-rate horizon; `train_alone` then runs the steps: sample questions, generate G
completions each, update, evaluate on schedule, checkpoint, and with selection on keep the
weights of the best validation evaluation and report the test split on them and on the start.
Everything it measures goes to OUT/metrics.jsonl (and a scalar log when one is given); the
caller shows progress through `SoloHooks` and prints the summary from `SoloResult`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import attrs

from trainer.evaluation import eval_due
from trainer.selection import DEFAULT_WINDOW, BestByValidation

RESULT_FIELDS = (
    "step",
    "accuracy",
    "accuracy_interval",
    "task_mean_accuracy",
    "reward",
    "per_task",
    "questions",
    "split",
    "per_question",
)
"""What metrics.jsonl keeps of an evaluation result (trainer/evaluation.py `evaluate`)."""


@attrs.frozen
class SoloRun:
    """What one `train` run does besides the [trainer] config."""

    steps: int
    questions: int
    """Questions per step (G completions each)."""
    save_every: int = 10
    select: bool = True
    """Keep the weights of the best validation evaluation (only when evaluating on validation)."""
    select_window: int = DEFAULT_WINDOW
    warmup_steps: int = -1
    """Supervised format warm-up steps on a fresh start; -1 or 0: none."""
    resume: bool = True
    constant_lr: bool = False
    """False: a cosine to 10% of lr over this run's steps unless [trainer] lr_decay_steps says."""


@attrs.frozen
class SoloHooks:
    """What the caller sees while the run goes: `started()` once the starting evaluations are
    done and the steps begin, `stepped(step, metrics)` after each step."""

    started: Callable[[], None] = lambda: None
    stepped: Callable[[int, dict[str, Any]], None] = lambda step, metrics: None


@attrs.define
class SoloResult:
    rewards: list[float]
    """Mean training reward of each step."""
    evals: list[dict[str, Any]]
    """The held-out curve (the config's split and samples)."""
    start_step: int
    test_start: dict[str, Any] | None = None
    """With selection: the test split before training, at `eval_report_samples`."""
    selected: dict[str, Any] | None = None
    """With selection: the test split on the chosen weights."""
    best: BestByValidation | None = None


def prepare(policy: Any, run: SoloRun) -> list[float]:
    """Resume (when asked and a checkpoint exists) or warm up, and fix the learning-rate horizon;
    the warm-up's losses (empty when there was none)."""
    resumed = run.resume and policy.load()
    if policy.config.lr_decay_steps == 0 and not run.constant_lr:
        # A run of known length ends on small steps: measured, the constant rate lost late what it
        # had gained early (docs/trainer.md). [trainer] lr_decay_steps overrides the horizon.
        policy.config = attrs.evolve(policy.config, lr_decay_steps=policy.step + run.steps)
    warmup = max(0, run.warmup_steps)
    if resumed or not warmup:
        return []
    return list(policy.warmup(warmup))


def report_evaluation(policy: Any, split: str, step: int | None = None) -> dict[str, Any]:
    """An evaluation of `split` for the reported figure: `eval_report_samples` completions per
    question instead of the curve's `eval_samples` (the same questions and seeded sampler)."""
    curve = policy.config
    policy.config = attrs.evolve(curve, eval_samples=curve.eval_report_samples)
    try:
        return policy.evaluate(split, step=step)
    finally:
        policy.config = curve


class _SoloLoop:
    def __init__(self, policy: Any, run: SoloRun, log: IO[str], board: Any) -> None:
        self.policy, self.run, self.log, self.board = policy, run, log, board
        config = policy.config
        # Selection reads validation only; on any other split it would choose on what it reports.
        self.selecting = run.select and config.eval_split == "validation" and config.eval_every > 0
        self.best = BestByValidation(window=run.select_window)
        self.evals: list[dict[str, Any]] = []
        self.last_eval_at: int | None = None
        self.start_step = policy.step
        self.iteration = self.start_step  # the scalar log's x: one per step, an update or not

    def record_test(self, key: str, result: dict[str, Any], **extra: object) -> None:
        fields = {k: result[k] for k in RESULT_FIELDS}
        self.log.write(json.dumps({key: {**fields, **extra}}) + "\n")

    def maybe_evaluate(self) -> None:
        policy = self.policy
        if not eval_due(policy.config, policy.step, self.last_eval_at):
            return
        result = policy.evaluate()
        self.last_eval_at = policy.step
        self.evals.append(result)
        self.log.write(json.dumps({"eval": {k: result[k] for k in (*RESULT_FIELDS, "seconds")}}) + "\n")
        if self.board is not None:
            self.board.evaluation(self.iteration, result)
        if self.selecting:
            self.best.offer(policy.step, result["accuracy"], policy.model)

    def step(self, rng: random.Random) -> dict[str, Any]:
        policy, config = self.policy, self.policy.config
        groups = policy.generate(policy.registry.sample(rng, self.run.questions, config.seed))
        metrics = policy.train(groups)
        self.iteration += 1
        self.log.write(json.dumps(metrics) + "\n")
        if self.board is not None:
            self.board.train(self.iteration, metrics)
        self.maybe_evaluate()
        if policy.step != self.start_step and policy.step % self.run.save_every == 0:
            policy.save()
        return metrics


def train_alone(
    policy: Any, run: SoloRun, out: Path, *, board: Any = None, hooks: SoloHooks | None = None
) -> SoloResult:
    """Run `run.steps` GRPO steps on `policy` (prepared), appending to OUT/metrics.jsonl; with
    selection, the chosen weights are restored into the policy and saved to OUT/best-model."""
    hooks = hooks or SoloHooks()
    rng = random.Random(policy.config.seed * 1_000_003 + policy.step)
    with open(out / "metrics.jsonl", "a", encoding="utf-8", buffering=1) as log:
        loop = _SoloLoop(policy, run, log, board)
        result = SoloResult(rewards=[], evals=loop.evals, start_step=loop.start_step)
        if loop.selecting:
            result.test_start = report_evaluation(policy, "test")
            loop.record_test("test_start", result.test_start)
        loop.maybe_evaluate()
        hooks.started()
        for _ in range(run.steps):
            metrics = loop.step(rng)
            result.rewards.append(metrics["reward_mean"])
            hooks.stepped(policy.step, metrics)
        if policy.step % run.save_every != 0:  # the loop already saved this step otherwise
            policy.save()  # the last weights: a resumed run continues from here, not from the selection
        best = loop.best
        if loop.selecting and best.step is not None:
            best.restore(policy.model)
            result.selected = report_evaluation(policy, "test", step=best.step)  # that step's weights
            loop.record_test(
                "test_selected",
                result.selected,
                selected_step=best.step,
                validation_accuracy=best.accuracy,
                validation_score=best.score,
                select_window=best.window,
            )
            result.best = best
            policy.model.save_pretrained(out / "best-model")
            policy.tokenizer.save_pretrained(out / "best-model")
    return result
