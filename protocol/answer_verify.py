"""The answer -> verify game: two stages per round, the second judging the first.

  stage 0, answer    each peer answers its own derived questions (exactly the single-stage
                     game, every completion re-scored).
  stage 1, verify    each peer takes other peers' stage-0 groups it accepted and, for each, says
                     of every candidate answer whether it is right: `<answer>yes no yes</answer>`,
                     one word per candidate in order. Reward: the share of candidates judged as
                     the registry judges them (right = a score of 1); a verdict of the wrong
                     length earns 0. The round's vote and held-out evaluation follow this stage.

Only answers are trained on: a verify prompt needs its item, which the trainer cannot rebuild
from a wire question. References, verification and rejections: protocol/staged.py. Prompt:
trainer/prompts/answer_verify.py; simulated answers: simulator/answerers/answer_verify.py.
"""

from __future__ import annotations

import re
from typing import ClassVar

import attrs

from protocol.messages import QuestionRef
from protocol.staged import ANSWER, InputRef, StagedGame, Stored
from protocol.tasks import TaskRegistry

NAME = "answer-verify"
VERIFY = 1
STAGE_NAMES: tuple[str, ...] = ("answer", "verify")
TRAIN_STAGES = frozenset({ANSWER})

_VERDICT = re.compile(r"<answer>([^<]*)</answer>\s*$", re.IGNORECASE)
_WORDS = {"yes": True, "no": False}


@attrs.frozen
class VerifyItem:
    """One peer's stage-0 group to judge: its wire reference (`ref`), the original question and
    the candidate answers (the group's texts, in order)."""

    game: ClassVar[str] = NAME
    stage: int
    ref: QuestionRef
    question: QuestionRef
    candidates: tuple[str, ...]

    def truth(self, registry: TaskRegistry) -> tuple[bool, ...]:
        """Which candidates are right, by the registry (a score of 1)."""
        return tuple(registry.score(self.question, text) >= 1.0 for text in self.candidates)

    def score(self, text: str, registry: TaskRegistry) -> float:
        verdicts = parse_verdicts(text)
        if verdicts is None or len(verdicts) != len(self.candidates) or not self.candidates:
            return 0.0
        agree = sum(said == true for said, true in zip(verdicts, self.truth(registry), strict=True))
        return agree / len(self.candidates)


def parse_verdicts(text: str) -> tuple[bool, ...] | None:
    """The yes/no words of a final `<answer>...</answer>` (None: no answer, or a word that is
    neither yes nor no)."""
    match = _VERDICT.search(text.strip())
    if match is None:
        return None
    words = match.group(1).replace(",", " ").lower().split()
    if not words or any(word not in _WORDS for word in words):
        return None
    return tuple(_WORDS[word] for word in words)


def format_verdicts(verdicts: tuple[bool, ...]) -> str:
    """The answer text that says `verdicts` (what `parse_verdicts` reads back)."""
    return "<answer>" + " ".join("yes" if verdict else "no" for verdict in verdicts) + "</answer>"


@attrs.frozen
class AnswerVerifyGame(StagedGame):
    """answer -> verify (protocol/staged.py holds what it shares with other games on inputs)."""

    train_stages: frozenset[int] = TRAIN_STAGES
    name: str = NAME
    stage_count: int = 2

    def item_from(self, stage: int, ref: InputRef, stored: Stored) -> VerifyItem | None:
        groups = stored.batch.groups
        if stage != VERIFY or not 0 <= ref.group < len(groups):
            return None
        group = groups[ref.group]
        return VerifyItem(VERIFY, ref.question(), group.question, tuple(c.text for c in group.completions))
