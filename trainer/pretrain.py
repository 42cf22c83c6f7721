"""Supervised pre-training of the `tiny` model: from random weights to a weak solver.

Real swarms start from instruct models that already answer some questions right; GRPO then
sharpens what the model half knows. A randomly initialised model knows nothing, so every group
scores zero and GRPO has no signal. This module gives the offline `tiny` model that starting
point: a short cross-entropy training on `prompt -> <answer>reference</answer>` pairs generated
by reasoning-gym, stopped early on purpose, so the model writes the format and gets a minority
of answers right (see docs/trainer.md for the measured held-out accuracy).

Never on evaluation questions: items come from PRETRAIN_DATASET_SEED (no swarm or evaluation
seed), and every item whose question text falls in the held-out share
(`ReasoningGymRegistry.is_heldout`) is skipped, whichever seed generated it
(tests/trainer/test_trainer_evaluation.py).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from typing import Any

from protocol.messages import QuestionRef
from protocol.questions import EVAL_INDEX_BASE, TRAIN_INDEX_LIMIT
from trainer.rewards import ANSWER_CLOSE, ANSWER_OPEN
from trainer.tasks import ReasoningGymRegistry

PRETRAIN_DATASET_SEED = 777_777_777
"""The dataset seed of every pre-training item: not a swarm's derived seed (a 63-bit hash) nor
the evaluation seed."""
Progress = Callable[[int, int, float], None]
"""(step, total steps, loss) after each step."""


def examples(registry: ReasoningGymRegistry, rng: random.Random) -> Iterator[tuple[QuestionRef, str, str]]:
    """Endless (ref, prompt, answer) pre-training items, tasks drawn by the registry's weights,
    held-out questions skipped."""
    while True:
        for ref in registry.sample(rng, 64, PRETRAIN_DATASET_SEED, (0, TRAIN_INDEX_LIMIT)):
            assert ref.index < EVAL_INDEX_BASE
            prompt, answer = registry.question(ref)
            if answer is None or registry.is_heldout(ref):
                continue
            yield ref, prompt, answer


def near_miss(answer: str, rng: random.Random) -> str:
    """A plausible wrong answer: an integer answer moved by 1 or 2 either way (what a weak solver
    gets wrong most often); other answers are returned unchanged."""
    try:
        value = int(answer.strip())
    except ValueError:
        return answer
    return str(value + rng.choice((-2, -1, 1, 2)))


def pretrain(
    model: Any,
    tokenizer: Any,
    registry: ReasoningGymRegistry,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    max_prompt_tokens: int,
    max_answer_tokens: int,
    progress: Progress | None = None,
    noise: float = 0.0,
) -> list[float]:
    """`steps` AdamW steps of answer-token cross-entropy; returns the loss of every step.

    Linear warm-up over the first 5% of steps, then cosine decay to 10% of `lr`: a short run
    that does not end on a large step.
    """
    import torch

    from trainer.grpo import completion_logps, pack

    rng = random.Random(seed)
    stream = examples(registry, rng)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warm = max(1, steps // 20)

    def rate(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress_ = (step - warm) / max(1, steps - warm)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress_))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    losses: list[float] = []
    model.train()
    for step in range(steps):
        prompts, targets = [], []
        for _ref, prompt, answer in (next(stream) for _ in range(batch_size)):
            if noise and rng.random() < noise:
                answer = near_miss(answer, rng)
            prompts.append(tokenizer(prompt, add_special_tokens=False)["input_ids"][-max_prompt_tokens:])
            ids = tokenizer(f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}", add_special_tokens=False)["input_ids"]
            targets.append([*ids[: max_answer_tokens - 1], tokenizer.eos_token_id])
        batch = pack(prompts, targets, tokenizer.pad_token_id)
        logps = completion_logps(model, batch.input_ids, batch.attention_mask, batch.completion_ids.size(1))
        mask = batch.completion_mask.float()
        loss = -(logps * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach()))
        if progress is not None:
            progress(step + 1, steps, losses[-1])
    model.eval()
    return losses
