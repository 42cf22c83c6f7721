"""What a round asks of a peer: the game. A pluggable rule set behind one small interface.

A `Game` says which questions a peer must answer in each (round, stage), which items a stage
that builds on the previous stage's batches answers, how a peer's batch for a stage is
verified, and how its groups are trained on. The round machine (protocol/rounds.py) only
orders (round, stage) pairs, taking the stages that train and vote from the game's registry
row (protocol/games.py `GameSpec`), and the admission inbox (protocol/admission.py) only asks
the game for a verdict, so a game plugs in as one registry row without touching either.

`SingleStageGame` is the reasoning-gym game: one stage, questions derived from (swarm seed,
round, stage, peer id), every completion re-scored. Games built on inputs share
protocol/staged.py: answer -> critique -> resolve (protocol/acr.py) and answer -> verify
(protocol/answer_verify.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

import attrs

from protocol.messages import QuestionGroup, QuestionRef, RolloutBatch
from protocol.questions import questions_for, specialty
from protocol.tasks import TaskRegistry
from protocol.verification import Verdict, VerificationLimits, verify_batch

if TYPE_CHECKING:
    from protocol.stage_inputs import InputStore, StageItem


class Game(Protocol):
    name: str
    stage_count: int

    def questions(self, round_number: int, stage: int, peer_id: str) -> tuple[QuestionRef, ...]:
        """The questions `peer_id` must answer in (round, stage): what a peer generates for
        itself, and what every other peer re-derives to verify its batch."""
        ...

    def builds_on_inputs(self, stage: int) -> bool:
        """Whether `stage` answers items built from the previous stage's batches (`items`)
        instead of derived questions (`questions`)."""
        ...

    def items(self, round_number: int, stage: int, peer_id: str, store: InputStore) -> tuple[StageItem, ...]:
        """The items `peer_id` answers in a stage that builds on inputs, from the batches of
        the previous stage in `store`; () for other stages."""
        ...

    def resolve(self, batch: RolloutBatch, store: InputStore) -> tuple[StageItem, ...] | Verdict:
        """Re-derive the items a later-stage batch answers from the batches in `store`, or a
        rejecting Verdict. Per verifier (what it holds): never cached. () for other stages."""
        ...

    def inputs_needed(self, batch: RolloutBatch, store: InputStore) -> tuple[tuple[int, int, str], ...]:
        """(round, stage, author) of the referenced batches `store` lacks; () for other stages."""
        ...

    def remember(
        self, store: InputStore, digest: bytes, batch: RolloutBatch, items: Sequence[StageItem]
    ) -> None:
        """Keep our own batch where the next stage builds on it (nothing, in a one-stage game)."""
        ...

    def verify(self, batch: RolloutBatch, items: Sequence[StageItem] = ()) -> Verdict:
        """Whether `batch` (signed by `batch.peer_id`) is an honest answer to its stage, given
        the items `resolve` re-derived (a function of the batch alone: cacheable by digest)."""
        ...

    def trains(self, stage: int) -> bool:
        """Whether the groups of `stage` are trained on."""
        ...

    def training_groups(
        self, stage: int, items: Sequence[StageItem], groups: Iterable[QuestionGroup]
    ) -> tuple[QuestionGroup, ...]:
        """The groups of a stage as the trainer takes them (named by the question they answer)."""
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
    specialised: bool = False
    """Each peer answers questions of one task only, `specialty(tasks, peer_id)` (the swarm of
    peers that each know one kind of problem); held-out sets still span every task."""
    name: str = "single"
    stage_count: int = 1

    def questions(self, round_number: int, stage: int, peer_id: str) -> tuple[QuestionRef, ...]:
        tasks, weights = self.tasks, self.weights or None
        if self.specialised:
            tasks, weights = (specialty(self.tasks, peer_id),), None
        return questions_for(
            self.seed,
            round_number,
            stage,
            peer_id,
            tasks,
            self.questions_per_round,
            weights,
            exclude=self.registry.is_heldout,
        )

    def builds_on_inputs(self, stage: int) -> bool:
        return False

    def items(self, round_number: int, stage: int, peer_id: str, store: InputStore) -> tuple[StageItem, ...]:
        return ()

    def resolve(self, batch: RolloutBatch, store: InputStore) -> tuple[StageItem, ...] | Verdict:
        return ()

    def inputs_needed(self, batch: RolloutBatch, store: InputStore) -> tuple[tuple[int, int, str], ...]:
        return ()

    def remember(
        self, store: InputStore, digest: bytes, batch: RolloutBatch, items: Sequence[StageItem]
    ) -> None:
        return None

    def training_groups(
        self, stage: int, items: Sequence[StageItem], groups: Iterable[QuestionGroup]
    ) -> tuple[QuestionGroup, ...]:
        return tuple(groups)

    def verify(self, batch: RolloutBatch, items: Sequence[StageItem] = ()) -> Verdict:
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
