"""Supervised warm-up: a few cross-entropy steps on `<answer>reference</answer>` targets.

A freshly initialised tiny model never writes an answer tag, so every GRPO group would have zero
advantage. A handful of supervised steps puts the format within reach of sampling; GRPO takes it
from there. It uses its own AdamW so that the GRPO optimizer state stays untouched.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from protocol.messages import QuestionRef
from trainer.grpo import completion_logps, pack
from trainer.rewards import ANSWER_CLOSE, ANSWER_OPEN
from trainer.tasks import ReasoningGymRegistry


def supervised_warmup(
    *,
    model: Any,
    tokenizer: Any,
    registry: ReasoningGymRegistry,
    prompt_ids: Callable[[QuestionRef], Sequence[int]],
    device: Any,
    seed: int,
    max_new_tokens: int,
    check_cancel: Callable[[], None],
    steps: int,
    questions_per_step: int,
    lr: float,
) -> list[float]:
    """`steps` supervised steps on `model` (in place); the loss of each. It takes the trainer's
    parts rather than the TrainerPolicy whose `warmup` calls it: naming that class here made an
    import circle. `check_cancel` raises to stop between steps."""
    import torch

    rng = random.Random(seed + 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses: list[float] = []
    model.train()
    for _ in range(steps):
        check_cancel()
        prompts, targets = [], []
        for ref in registry.sample(rng, questions_per_step * 2, dataset_seed=seed):
            _prompt, answer = registry.question(ref)
            # tasks with many valid answers have no single target; held-out questions are never trained on
            if answer is None or registry.is_heldout(ref):
                continue
            ids = tokenizer(f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}", add_special_tokens=False)["input_ids"]
            prompts.append(prompt_ids(ref))
            targets.append([*ids[: max_new_tokens - 1], tokenizer.eos_token_id])
            if len(prompts) == questions_per_step:
                break
        batch = pack(prompts, targets, tokenizer.pad_token_id)
        width = batch.completion_ids.size(1)
        logps = completion_logps(model, batch.input_ids.to(device), batch.attention_mask.to(device), width)
        mask = batch.completion_mask.to(device).float()
        loss = -(logps * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    optimizer.zero_grad(set_to_none=True)
    return losses
