"""The node's trainer: built (resumed, or warmed up on a first start), saved on the way out; its
held-out schedule, and the start point when the trainer remembers it."""

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
        sliced=True,
    )


async def start_point(
    policy: PolicyPort, settings: EvalSettings, echo: Callable[[str], None]
) -> tuple[dict[str, Any], float] | None:
    """The held-out evaluation of the weights the node starts with when the trainer remembers it
    (`remembered_evaluation`, trainer/eval_results.py: these weights were evaluated on these
    questions before, e.g. by another data dir on the same base): (result, seconds), at once.
    Otherwise None, and the node says that the evaluation runs in slices while it plays: the
    round loop never waits for it (swarmp2p/heldout.py)."""
    if not (settings.every > 0 and settings.before_train):
        return None
    remembered = getattr(policy, "remembered_evaluation", None)
    started = time.monotonic()
    result = None
    if callable(remembered):
        try:
            result = await trio.to_thread.run_sync(remembered)
        except Exception as error:  # a lookup only: the sliced evaluation still runs
            echo(f"remembered held-out evaluation unreadable ({error})")
    if result is not None:
        return result, time.monotonic() - started
    # "up to": a task with fewer distinct held-out questions gives fewer (the result line's count)
    echo(
        f"held-out evaluation: up to {settings.questions} questions, answered a batch at a time in "
        "the worker's spare moments while the node plays (the start point when it completes)"
    )
    return None


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
