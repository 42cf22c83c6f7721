"""Games whose later stages build on the previous stage's batches: the part every such game
shares (answer -> critique -> resolve in protocol/acr.py, answer -> verify in
protocol/answer_verify.py). A game of this kind writes only what its later stages ask: which
item a referenced group makes (`item_from`) and how an answer to an item is scored (the item's
own `score`).

  stage 0            each peer answers its own derived questions: exactly the single-stage game
                     (`answer`), every completion re-scored.
  later stages       each peer takes groups of other peers' previous-stage batches it accepted
                     (or its own store holds) and answers the item each makes.

How a later stage names its inputs without a new wire field: the group's `QuestionRef` is an
`InputRef`: `task` = the author of the referenced batch of the previous stage, `dataset_seed` =
the first 63 bits of that batch's sha256 digest (the digest of its signed envelope), `index` =
the group within it. The digest pins the content: nobody but the author can sign another batch
with the same prefix, and finding one needs ~2**63 work. Peer ids longer than a task name
(64 bytes; an Ed25519 id is 52) cannot be referenced.

Verification (`resolve`, then `verify`) re-derives every item from the referenced batches the
verifier holds (`InputStore`: what it accepted, and its own) and re-scores every completion.
`resolve` is per verifier (what it holds), so its rejections are never cached; `verify` given
resolved items is a function of the batch alone (its inputs are pinned), so it may be.

Rejection reasons of later stages:
  missing_input    we hold no batch of that author for the previous stage: not blamed (we may
                   simply not have fetched it)
  input_mismatch   we hold the author's batch and its digest differs: blamed (a strike, not a
                   ban: an author that equivocated could make an honest critic look wrong)
  bad_input        the reference is malformed or names a group the pinned batch lacks: blamed
  self_reference   a peer answering an item built on its own batch: blamed
  duplicate_question, too_few_groups, too_many_groups, bad_group_size, text_too_long,
  logprobs_too_long, bad_logprobs,
  forged_reward    as in protocol/verification.py (forged_reward is proof of lying: a ban)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import attrs

from protocol import limits as wire_limits
from protocol.game import SingleStageGame
from protocol.messages import QuestionGroup, QuestionRef, RolloutBatch
from protocol.seeds import unit_interval
from protocol.stage_inputs import InputRef, InputStore, StageItem, Stored, digest_prefix
from protocol.verification import Verdict, group_shape_error

__all__ = [
    "ANSWER",
    "UNBLAMED_INPUT_REASONS",
    "InputRef",
    "InputStore",
    "StageItem",
    "StagedGame",
    "Stored",
    "digest_prefix",
    "reject",
]

ANSWER = 0
UNBLAMED_INPUT_REASONS = frozenset({"missing_input"})
"""Rejections that depend on what the verifier holds, not on what the sender did."""


def reject(reason: str) -> Verdict:
    return Verdict(ok=False, reason=reason, groups_checked=0)


@attrs.frozen
class StagedGame:
    """The shared rules of a game built on inputs. `answer` holds the swarm's rules (seed,
    tasks, questions per round, registry, limits, tolerance); stage 0 is exactly that game.
    Later stages take up to `answer.questions_per_round` items each. A subclass sets `name`,
    `stage_count`, `train_stages` and writes `item_from`."""

    answer: SingleStageGame
    train_stages: frozenset[int] = frozenset({ANSWER})
    name: str = ""
    stage_count: int = 2

    def item_from(self, stage: int, ref: InputRef, stored: Stored) -> StageItem | None:
        """The item of `stage` that `ref` names in the previous stage's batch `stored` (None:
        the reference names nothing there)."""
        raise NotImplementedError

    # ---- what a peer answers ----------------------------------------------------------

    def questions(self, round_number: int, stage: int, peer_id: str) -> tuple[QuestionRef, ...]:
        return self.answer.questions(round_number, stage, peer_id) if stage == ANSWER else ()

    def builds_on_inputs(self, stage: int) -> bool:
        return stage != ANSWER

    def items(self, round_number: int, stage: int, peer_id: str, store: InputStore) -> tuple[StageItem, ...]:
        """The items `peer_id` answers in a later stage: from the previous stage's batches it
        holds (never its own), in an order drawn per (seed, round, stage, peer) so that peers
        spread their attention, at most `questions_per_round`."""
        if stage == ANSWER:
            return ()
        candidates: list[tuple[float, StageItem]] = []
        for stored in store.of_stage(round_number, stage - 1):
            author = stored.batch.peer_id
            if author == peer_id or len(author.encode()) > wire_limits.MAX_TASK_NAME_BYTES:
                continue
            for index in range(len(stored.batch.groups)):
                item = self.item_from(stage, InputRef(author, digest_prefix(stored.digest), index), stored)
                if item is not None:
                    draw = unit_interval(self.answer.seed, round_number, stage, peer_id, author, index)
                    candidates.append((draw, item))
        candidates.sort(key=lambda pair: (pair[0], pair[1].ref.task, pair[1].ref.index))
        return tuple(item for _, item in candidates[: self.answer.questions_per_round])

    def trains(self, stage: int) -> bool:
        return stage in self.train_stages

    def training_groups(
        self, stage: int, items: Sequence[StageItem], groups: Iterable[QuestionGroup]
    ) -> tuple[QuestionGroup, ...]:
        """The groups as a trainer sees them (named by the question they answer)."""
        return tuple(groups)

    def remember(
        self, store: InputStore, digest: bytes, batch: RolloutBatch, items: Sequence[StageItem]
    ) -> None:
        """Our own batch is an input of the next stage too (others build on it)."""
        store.add(digest, batch, items)

    # ---- verification -------------------------------------------------------------------

    def resolve(self, batch: RolloutBatch, store: InputStore) -> tuple[StageItem, ...] | Verdict:
        """Re-derive the item of every group of a later-stage batch from the batches we hold,
        or a rejecting Verdict (see the module docstring for which reasons are blamed)."""
        if batch.stage == ANSWER:
            return ()
        if batch.stage >= self.stage_count:
            return reject("bad_input")
        items: list[StageItem] = []
        seen: set[QuestionRef] = set()
        for group in batch.groups:
            ref = InputRef.of(group.question)
            if ref.author == batch.peer_id:
                return reject("self_reference")
            if group.question in seen:
                return reject("duplicate_question")
            seen.add(group.question)
            stored = store.get(batch.round, batch.stage - 1, ref.author)
            if stored is None:
                return reject("missing_input")
            if digest_prefix(stored.digest) != ref.prefix:
                return reject("input_mismatch")
            item = self.item_from(batch.stage, ref, stored)
            if item is None:
                return reject("bad_input")
            items.append(item)
        return tuple(items)

    def inputs_needed(self, batch: RolloutBatch, store: InputStore) -> tuple[tuple[int, int, str], ...]:
        """The (round, stage, author) of every batch `batch` references that `store` lacks:
        what a verifier fetches (from the author, else the DHT) before it resolves again."""
        if batch.stage == ANSWER or batch.stage >= self.stage_count:
            return ()
        authors = {group.question.task for group in batch.groups} - {batch.peer_id}
        return tuple(
            (batch.round, batch.stage - 1, author)
            for author in sorted(authors)
            if store.get(batch.round, batch.stage - 1, author) is None
        )

    def verify(self, batch: RolloutBatch, items: Sequence[StageItem] = ()) -> Verdict:
        """Stage 0: the answer game's verdict. Later stages: shape, then every completion
        re-scored against its re-derived item (`items`, from `resolve`)."""
        if batch.stage == ANSWER:
            return self.answer.verify(batch)
        limits = self.answer.limits
        groups = batch.groups
        if len(groups) < limits.min_groups:
            return reject("too_few_groups")
        if len(groups) > min(limits.max_groups, self.answer.questions_per_round):
            return reject("too_many_groups")
        if len(items) != len(groups):
            return reject("missing_input")  # unresolved: never accept what we could not check
        for group in groups:
            shape_error = group_shape_error(group, limits)
            if shape_error is not None:
                return reject(shape_error)
        if not self.answer.rescore:
            return Verdict(ok=True, reason=None, groups_checked=0)
        registry = self.answer.registry
        tolerance = self.answer.tolerance
        for checked, (item, group) in enumerate(zip(items, groups, strict=True)):
            for completion in group.completions:
                try:
                    actual = item.score(completion.text, registry)
                except Exception:  # the registry promises not to raise; if it does, it is our bug
                    return Verdict(ok=False, reason="scoring_error", groups_checked=checked)
                if not abs(completion.reward - actual) <= tolerance or not math.isfinite(actual):
                    return Verdict(ok=False, reason="forged_reward", groups_checked=checked)
        return Verdict(ok=True, reason=None, groups_checked=len(groups))
