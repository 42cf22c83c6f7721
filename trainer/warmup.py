"""Supervised warm-up: a few cross-entropy steps on `<answer>reference</answer>` targets.

A freshly initialised tiny model never writes an answer tag, so every GRPO group would have zero
advantage. A handful of supervised steps puts the format within reach of sampling; GRPO takes it
from there. It uses its own AdamW so that the GRPO optimizer state stays untouched.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from trainer.rewards import ANSWER_CLOSE, ANSWER_OPEN

if TYPE_CHECKING:
    from trainer.policy import TrainerPolicy


def supervised_warmup(policy: TrainerPolicy, steps: int, questions_per_step: int, lr: float) -> list[float]:
    import torch

    from trainer.grpo import completion_logps, pack

    rng = random.Random(policy.config.seed + 1)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr)
    tokenizer = policy.tokenizer
    losses: list[float] = []
    policy.model.train()
    for _ in range(steps):
        policy._check_cancel()
        prompts, targets = [], []
        for ref in policy.registry.sample(rng, questions_per_step * 2, dataset_seed=policy.config.seed):
            _prompt, answer = policy.registry.question(ref)
            # tasks with many valid answers have no single target; held-out questions are never trained on
            if answer is None or policy.registry.is_heldout(ref):
                continue
            ids = tokenizer(f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}", add_special_tokens=False)["input_ids"]
            prompts.append(policy.prompt_ids(ref))
            targets.append([*ids[: policy.config.max_new_tokens - 1], tokenizer.eos_token_id])
            if len(prompts) == questions_per_step:
                break
        batch = pack(prompts, targets, tokenizer.pad_token_id)
        width = batch.completion_ids.size(1)
        logps = completion_logps(
            policy.model, batch.input_ids.to(policy.device), batch.attention_mask.to(policy.device), width
        )
        mask = batch.completion_mask.to(policy.device).float()
        loss = -(logps * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    optimizer.zero_grad(set_to_none=True)
    return losses
