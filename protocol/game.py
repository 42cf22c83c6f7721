"""What a round asks of a peer: the game. A pluggable rule set behind one small interface.

A `Game` says how many stages a round has, which questions a peer must answer in each
(round, stage), how a peer's batch for a stage is verified, and which stages train. The
round machine (protocol/rounds.py) only orders (round, stage) pairs and the admission inbox
(protocol/admission.py) only asks the game for a verdict, so a second game (for example
answer -> critique -> resolve, whose later stages build their questions from the previous
stage's accepted batches, referenced by digest) plugs in here without touching either.

`SingleStageGame` is the reasoning-gym game the swarm plays today: one stage, questions
derived from (swarm seed, round, stage, peer id), every completion re-scored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from protocol.messages import QuestionGroup, QuestionRef, RolloutBatch
from protocol.questions import questions_for
from protocol.tasks import TaskRegistry
from protocol.verification import Verdict, VerificationLimits, verify_batch


class Game(Protocol):
    name: str
    stage_count: int

    def questions(self, round_number: int, stage: int, peer_id: str) -> tuple[QuestionRef, ...]:
        """The questions `peer_id` must answer in (round, stage): what a peer generates for
        itself, and what every other peer re-derives to verify its batch."""
        ...

    def verify(self, batch: RolloutBatch) -> Verdict:
        """Whether `batch` (signed by `batch.peer_id`) is an honest answer to its stage."""
        ...

    def trains(self, stage: int) -> bool:
        """Whether the groups of `stage` are trained on."""
        ...


@attrs.frozen
class SingleStageGame:
    """The reasoning-gym game: one stage; verification re-derives the sender's questions and
    re-scores every completion through the local task registry."""

    seed: int
    tasks: tuple[str, ...]
    questions_per_round: int
    registry: TaskRegistry
    weights: tuple[float, ...] = ()
    limits: VerificationLimits = attrs.field(factory=VerificationLimits)
    tolerance: float = 1e-6
    rescore: bool = True
    name: str = "single"
    stage_count: int = 1

    def questions(self, round_number: int, stage: int, peer_id: str) -> tuple[QuestionRef, ...]:
        return questions_for(
            self.seed,
            round_number,
            stage,
            peer_id,
            self.tasks,
            self.questions_per_round,
            self.weights or None,
        )

    def verify(self, batch: RolloutBatch) -> Verdict:
        return verify_batch(
            batch,
            self.registry,
            expected_questions=self.questions(batch.round, batch.stage, batch.peer_id),
            limits=self.limits,
            tolerance=self.tolerance,
            rescore=self.rescore,
        )

    def trains(self, stage: int) -> bool:
        return True


def mean_reward(groups: Sequence[QuestionGroup]) -> float | None:
    """The mean reward over every completion of `groups` (None when there is none)."""
    rewards = [completion.reward for group in groups for completion in group.completions]
    if not rewards:
        return None
    return math.fsum(rewards) / len(rewards)


def rank_winners(rewards: Mapping[str, float], count: int) -> list[str]:
    """The `count` best peers by reward, ties broken by peer id (so every peer agrees)."""
    ranked = [peer for peer, _ in sorted(rewards.items(), key=lambda item: (-item[1], item[0]))]
    return ranked[:count]
