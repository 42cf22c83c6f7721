"""The node's trainer: built (resumed, or warmed up on a first start), saved on the way out, and
evaluated once on the held-out set before the node joins; plus the advice printed when an
evaluation will not fit into a round."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from swarmp2p.heldout import EvalSettings
from swarmp2p.node_config import NodeError

if TYPE_CHECKING:
    from swarmp2p.ports import PolicyPort


def eval_settings(trainer_config: Any) -> EvalSettings:
    """The round loop's held-out evaluation schedule from the [trainer] eval settings (a node
    counts `eval_every` in rounds; see NODE_TRAINER_DEFAULTS for the node's own default)."""
    return EvalSettings(
        every=trainer_config.eval_every,
        before_train=trainer_config.eval_before_train,
        questions=trainer_config.eval_questions * len(trainer_config.tasks),
    )


EVAL_WINDOW_SHARE = 0.4
"""About the share of a round the worker idles in one stretch (the collect window after
generating, or the rest of the round after training) on a CPU peer: what an evaluation must fit."""


def eval_fit_advice(settings: EvalSettings, seconds: float, round_s: float, per_task: int) -> str | None:
    """A line of advice when an evaluation lasting `seconds` will rarely fit into a round of
    `round_s` (so it would be deferred round after round); None when it fits."""
    window = EVAL_WINDOW_SHARE * round_s
    needed = settings.margin * seconds + settings.slack_s
    if needed <= window or seconds <= 0:
        return None
    fits = int(per_task * (window - settings.slack_s) / (settings.margin * seconds))
    fix = f"--eval-questions {fits} (per task) or " if fits >= 1 else ""
    return (
        f"held-out evaluation needs about {needed:.0f} s but a {round_s:g} s round leaves the worker "
        f"about {window:.0f} s at a stretch: it will mostly be deferred; use {fix}"
        f"--round-seconds {needed / EVAL_WINDOW_SHARE:.0f} or more for a new swarm"
    )


async def evaluate_before_train(
    policy: PolicyPort, settings: EvalSettings, stopping: trio.Event, echo: Callable[[str], None]
) -> tuple[dict[str, Any], float] | None:
    """The held-out evaluation before the first round, run before the node joins (and before a
    new swarm's genesis), so it never eats into a round. (result, seconds) or None. A trainer that
    remembers evaluations (`evaluate_remembered`, trainer/eval_results.py) answers from its store
    when these weights were evaluated on these questions before (a new data dir on the same base)."""
    if not (settings.every > 0 and settings.before_train):
        return None
    # "up to": a task with fewer distinct held-out questions gives fewer (the result line's count)
    echo(f"held-out evaluation before joining (up to {settings.questions} questions)…")
    started = time.monotonic()
    try:
        remembered = getattr(policy, "evaluate_remembered", None)
        result = await trio.to_thread.run_sync(remembered if callable(remembered) else policy.evaluate)
    except Exception as error:
        if not stopping.is_set():
            echo(f"held-out evaluation failed: {error}")
        return None
    return result, time.monotonic() - started


def build_policy(
    trainer_config: Any, *, registry: Any, warmup_steps: int, echo: Callable[[str], None]
) -> Any:
    """The trainer, resumed from its newest valid checkpoint; on a first start, warmed up and saved."""
    from trainer.model import ModelLoadError
    from trainer.policy import TrainerPolicy
    from trainer.tasks import TaskError

    def pretraining(step: int, total: int, loss: float) -> None:
        if step == 1 or step % max(1, total // 10) == 0 or step == total:
            echo(f"building the tiny model (once): pre-training step {step}/{total}, loss {loss:.3f}")

    try:
        policy = TrainerPolicy(trainer_config, registry=registry, build_progress=pretraining)
    except (ModelLoadError, TaskError) as error:
        raise NodeError(f"model: {error}") from None
    if policy.load():
        echo(f"resumed from checkpoint step {policy.step}")
        return policy
    # A pre-trained tiny model already writes the format; a raw one (tiny_pretrain_steps = 0) does not.
    raw_tiny = trainer_config.model == "tiny" and trainer_config.tiny_pretrain_steps == 0
    steps = warmup_steps if warmup_steps >= 0 else (15 if raw_tiny else 0)
    if steps:
        echo(f"first start: {steps} supervised format warm-up steps…")
        policy.warmup(steps)
        policy.save()
    return policy


async def save_policy(policy: PolicyPort, echo: Callable[[str], None]) -> None:
    policy.reset_cancel()  # the stop's cancel must not stop the save
    try:
        with trio.move_on_after(10):
            await trio.to_thread.run_sync(policy.save)
    except Exception as error:
        echo(f"saving the model failed: {error}")
