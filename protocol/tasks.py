"""The task registry port: how protocol rules reach question generation and scoring.

`protocol` never imports reasoning-gym. The caller (trainer's real registry, or the
simulator's cheap one) provides an object with this shape; verification re-scores a
peer's completions through it.
"""

from __future__ import annotations

from typing import Protocol

from protocol.messages import QuestionRef


class TaskRegistry(Protocol):
    def task_names(self) -> tuple[str, ...]:
        """Names of the tasks this registry can regenerate, in a stable order."""
        ...

    def score(self, question: QuestionRef, completion_text: str) -> float:
        """Reward in [0, 1] for `completion_text` as an answer to `question`. Never raises."""
        ...

    def is_heldout(self, question: QuestionRef) -> bool:
        """Whether `question` is held out for evaluation (its content key is in a held-out split,
        protocol.questions.heldout_split): never assigned for training, so every peer of a swarm
        must answer this alike. A registry whose questions have no content says False."""
        ...
