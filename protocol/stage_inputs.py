"""What a later stage of a multi-stage game builds on: references to the previous stage's
batches (`InputRef`, pinned by digest), the batches a peer holds (`InputStore`) and the item a
referenced group makes (`StageItem`). protocol/staged.py holds the rules that use them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Protocol

import attrs

from protocol.messages import QuestionRef, RolloutBatch
from protocol.tasks import TaskRegistry


class StageItem(Protocol):
    """What a later-stage group answers, re-derived from the referenced batches. Each game's
    item class names its game (`game`, the registry row that builds its prompt and its
    simulated answer) and scores an answer exactly as every verifier re-scores it."""

    game: ClassVar[str]
    stage: int
    ref: QuestionRef
    """The wire question of the group that answers this item (an `InputRef`)."""
    question: QuestionRef
    """The original reasoning-gym question the item is about."""

    def score(self, text: str, registry: TaskRegistry) -> float: ...


def digest_prefix(digest: bytes) -> int:
    """The 63-bit prefix of a batch digest an `InputRef` carries (fits a QuestionRef's uint63)."""
    return int.from_bytes(digest[:8], "big") >> 1


@attrs.frozen
class InputRef:
    """Group `group` of the batch `author` published in the previous stage, pinned by digest."""

    author: str
    prefix: int
    group: int

    def question(self) -> QuestionRef:
        return QuestionRef(task=self.author, dataset_seed=self.prefix, index=self.group)

    @classmethod
    def of(cls, question: QuestionRef) -> InputRef:
        return cls(author=question.task, prefix=question.dataset_seed, group=question.index)


@attrs.frozen
class Stored:
    digest: bytes
    batch: RolloutBatch
    items: tuple[StageItem, ...] = ()
    """For a later-stage batch: the item of each of its groups (what it answered)."""


@attrs.define
class InputStore:
    """The batches a peer can build on and verify against: the ones it accepted, and its own,
    per (round, stage, author). Only the current round is needed; `forget_before` drops older."""

    entries: dict[tuple[int, int, str], Stored] = attrs.Factory(dict)

    def add(self, digest: bytes, batch: RolloutBatch, items: Sequence[StageItem] = ()) -> None:
        self.entries[(batch.round, batch.stage, batch.peer_id)] = Stored(digest, batch, tuple(items))

    def get(self, round_number: int, stage: int, author: str) -> Stored | None:
        return self.entries.get((round_number, stage, author))

    def of_stage(self, round_number: int, stage: int) -> list[Stored]:
        """The stored batches of (round, stage), by author."""
        keys = sorted(key for key in self.entries if key[:2] == (round_number, stage))
        return [self.entries[key] for key in keys]

    def forget_before(self, round_number: int) -> None:
        for key in [key for key in self.entries if key[0] < round_number]:
            del self.entries[key]
