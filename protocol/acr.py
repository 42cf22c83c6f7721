"""The answer -> critique -> resolve game: three stages per round, each built on the last.

The reference RL Swarm's multi-stage game, made verifiable:

  stage 0, answer    each peer answers its own derived questions (exactly the single-stage
                     game: `questions_for(seed, round, 0, peer)`, every completion re-scored).
  stage 1, critique  each peer takes other peers' stage-0 groups it accepted and, for each, picks
                     the best of its G candidate answers. Reward: the registry's score of the
                     picked candidate (a critic is paid for picking a right answer).
  stage 2, resolve   each peer takes stage-1 critique groups it accepted and answers the original
                     question itself, shown the candidates and the critic's majority pick.
                     Reward: the registry's score of that final answer.

How later stages reference their inputs, verify and reject: protocol/staged.py (shared with
every game built on inputs). Prompts: trainer/prompts/acr.py; simulated answers:
simulator/answerers/acr.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import ClassVar

import attrs

from protocol.messages import QuestionGroup, QuestionRef
from protocol.staged import (
    ANSWER,
    UNBLAMED_INPUT_REASONS,
    InputRef,
    InputStore,
    StagedGame,
    Stored,
    digest_prefix,
)
from protocol.tasks import TaskRegistry

__all__ = [
    "ANSWER",
    "CRITIQUE",
    "NAME",
    "RESOLVE",
    "STAGE_COUNT",
    "STAGE_NAMES",
    "TRAIN_STAGES",
    "UNBLAMED_INPUT_REASONS",
    "AnswerCritiqueResolveGame",
    "InputRef",
    "InputStore",
    "StageItem",
    "Stored",
    "digest_prefix",
    "parse_pick",
    "score_item",
]

CRITIQUE, RESOLVE = 1, 2
STAGE_COUNT = 3
STAGE_NAMES: tuple[str, ...] = ("answer", "critique", "resolve")
TRAIN_STAGES = frozenset({ANSWER, RESOLVE})
"""Stages trained on by default: answers to reasoning-gym questions (see the game's docstring)."""
NAME = "answer-critique-resolve"

_PICK = re.compile(r"<answer>\s*(\d{1,3})\s*</answer>\s*$")


@attrs.frozen
class StageItem:
    """What a later-stage group answers, re-derived from the referenced batches: the wire
    question (`ref`), the original reasoning-gym question, the candidate answers (the referenced
    stage-0 group's texts) and, for resolve, the critic's picks (1-based; 0 = no valid pick)."""

    game: ClassVar[str] = NAME
    stage: int
    ref: QuestionRef
    question: QuestionRef
    candidates: tuple[str, ...]
    picks: tuple[int, ...] = ()

    def majority(self) -> int:
        """The most picked candidate (1-based; ties to the lowest; 0 if nobody picked)."""
        valid = [pick for pick in self.picks if 1 <= pick <= len(self.candidates)]
        if not valid:
            return 0
        return min(set(valid), key=lambda pick: (-valid.count(pick), pick))

    def score(self, text: str, registry: TaskRegistry) -> float:
        return score_item(self, text, registry)


def parse_pick(text: str) -> int:
    """The candidate a critique completion picks: the number in a final `<answer>k</answer>`
    (1-based); 0 when there is none."""
    match = _PICK.search(text.strip())
    return int(match.group(1)) if match else 0


def score_item(item: StageItem, text: str, registry: TaskRegistry) -> float:
    """The reward of `text` for `item`: a critique earns the score of the candidate it picks
    (0 for no valid pick), a resolve earns the score of its own final answer."""
    if item.stage == CRITIQUE:
        pick = parse_pick(text)
        if not 1 <= pick <= len(item.candidates):
            return 0.0
        return float(registry.score(item.question, item.candidates[pick - 1]))
    return float(registry.score(item.question, text))


@attrs.frozen
class AnswerCritiqueResolveGame(StagedGame):
    """answer -> critique -> resolve (protocol/staged.py holds what it shares with other games
    built on inputs). `train_stages`: stages 0 and 2 are answers to reasoning-gym questions,
    which the trainer can rebuild prompts for; a critique group is trained on only when listed
    (its prompt needs the item: trainer/prompts/acr.py)."""

    train_stages: frozenset[int] = TRAIN_STAGES
    name: str = NAME
    stage_count: int = STAGE_COUNT

    def item_from(self, stage: int, ref: InputRef, stored: Stored) -> StageItem | None:
        groups = stored.batch.groups
        if not 0 <= ref.group < len(groups):
            return None
        group = groups[ref.group]
        if stage == CRITIQUE:
            texts = tuple(completion.text for completion in group.completions)
            return StageItem(CRITIQUE, ref.question(), group.question, texts)
        if stage == RESOLVE and ref.group < len(stored.items):
            critiqued = stored.items[ref.group]  # what the critic was shown: question and candidates
            if not isinstance(critiqued, StageItem):
                return None
            picks = tuple(parse_pick(completion.text) for completion in group.completions)
            return StageItem(RESOLVE, ref.question(), critiqued.question, critiqued.candidates, picks)
        return None

    def training_groups(
        self, stage: int, items: Sequence[StageItem], groups: Iterable[QuestionGroup]  # type: ignore[override]
    ) -> tuple[QuestionGroup, ...]:
        """The groups as a trainer sees them: a resolve group is an answer to its original
        question (what the trainer rebuilds a prompt from and the audit re-scores)."""
        if stage != RESOLVE or not items:
            return tuple(groups)
        return tuple(
            QuestionGroup(item.question, group.completions) for item, group in zip(items, groups, strict=True)
        )
