"""The real trainer's answers to a later stage of answer -> critique -> resolve (protocol/acr.py):
the item's critique or resolve prompt, built around the original question's text from the
local registry, sampled like a question's, each completion scored by `score_item` (exactly
what every verifier recomputes). The group is named by the item's wire question (`ref`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from protocol.acr import StageItem, score_item, stage_prompt
from protocol.messages import Completion, QuestionGroup


def generate_items(policy: Any, items: Sequence[StageItem]) -> list[QuestionGroup]:
    """`policy` is a trainer.policy.TrainerPolicy (its tokenizer, sampler and registry)."""
    policy._check_cancel()
    if not items:
        return []
    prompts = [
        policy.text_prompt_ids(stage_prompt(item, policy.registry.question(item.question)[0]))
        for item in items
    ]
    repeats = policy.config.num_generations
    rows = policy._sample_ids(
        [item.ref for item in items], repeats, policy.config.temperature, policy.sampler, prompts=prompts
    )
    groups = []
    for index, item in enumerate(items):
        completions = []
        for ids in rows[index * repeats : (index + 1) * repeats]:
            text = policy.tokenizer.decode(ids, skip_special_tokens=True)
            completions.append(Completion(text=text, reward=score_item(item, text, policy.registry)))
        groups.append(QuestionGroup(question=item.ref, completions=tuple(completions)))
    return groups
