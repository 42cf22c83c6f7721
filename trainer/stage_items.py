"""The real trainer's answers to a later stage of a multi-stage game (protocol/staged.py): the
item's prompt, worded by the module its game's registry row names (trainer/prompts/), around
the original question's text from the local registry; each completion scored by the item
itself (exactly what every verifier recomputes). The group is named by the item's wire
question (`ref`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from protocol.games import spec_of
from protocol.messages import Completion, QuestionGroup, QuestionRef
from protocol.staged import StageItem


class Sampler(Protocol):
    """What answering items needs of trainer.policy.TrainerPolicy."""

    registry: Any

    def sample_texts(self, refs: Sequence[QuestionRef], prompts: Sequence[str]) -> list[list[str]]: ...


def prompt_builder(game: str) -> Callable[[Any, str], str]:
    """`prompt(item, question_text)` of the game called `game` (ValueError: it has no later stages)."""
    module = spec_of(game).prompts
    if module is None:
        raise ValueError(f"game {game} has no items to prompt for")
    return importlib.import_module(module).prompt


def generate_items(policy: Sampler, items: Sequence[StageItem]) -> list[QuestionGroup]:
    prompts = [prompt_builder(item.game)(item, policy.registry.question(item.question)[0]) for item in items]
    rows = policy.sample_texts([item.ref for item in items], prompts)
    return [
        QuestionGroup(
            question=item.ref,
            completions=tuple(
                Completion(text=text, reward=item.score(text, policy.registry)) for text in texts
            ),
        )
        for item, texts in zip(items, rows, strict=True)
    ]
