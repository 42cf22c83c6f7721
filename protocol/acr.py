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
  self_reference   a peer critiquing (or resolving) its own batch: blamed
  duplicate_question, too_few_groups, too_many_groups, bad_group_size, text_too_long,
  logprobs_too_long, bad_logprobs,
  forged_reward    as in protocol/verification.py (forged_reward is proof of lying: a ban)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

import attrs

from protocol import limits as wire_limits
from protocol.game import SingleStageGame
from protocol.messages import QuestionGroup, QuestionRef, RolloutBatch
from protocol.seeds import unit_interval
from protocol.tasks import TaskRegistry
from protocol.verification import Verdict, group_shape_error

ANSWER, CRITIQUE, RESOLVE = 0, 1, 2
STAGE_COUNT = 3
STAGE_NAMES: tuple[str, ...] = ("answer", "critique", "resolve")
TRAIN_STAGES = frozenset({ANSWER, RESOLVE})
"""Stages trained on by default: answers to reasoning-gym questions (see the game's docstring)."""
NAME = "answer-critique-resolve"
UNBLAMED_INPUT_REASONS = frozenset({"missing_input"})
"""Rejections that depend on what the verifier holds, not on what the sender did."""

_PICK = re.compile(r"<answer>\s*(\d{1,3})\s*</answer>\s*$")


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
class StageItem:
    """What a later-stage group answers, re-derived from the referenced batches: the wire
    question (`ref`), the original reasoning-gym question, the candidate answers (the referenced
    stage-0 group's texts) and, for resolve, the critic's picks (1-based; 0 = no valid pick)."""

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


def _reject(reason: str) -> Verdict:
    return Verdict(ok=False, reason=reason, groups_checked=0)


@attrs.frozen
class AnswerCritiqueResolveGame:
    """answer -> critique -> resolve. `answer` holds the swarm's rules (seed, tasks, questions
    per round, registry, limits, tolerance); stage 0 is exactly that game. Later stages take up
    to `answer.questions_per_round` items each. `train_stages`: stages 0 and 2 are answers to
    reasoning-gym questions, which the trainer can rebuild prompts for; a critique group is
    trained on only when listed (its prompt needs the item: see `critique_prompt`)."""

    answer: SingleStageGame
    train_stages: frozenset[int] = TRAIN_STAGES
    name: str = NAME
    stage_count: int = STAGE_COUNT

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
                ref = InputRef(author, digest_prefix(stored.digest), index)
                item = _item_from(stage, ref, stored, store)
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
        """The groups as a trainer sees them: a resolve group is an answer to its original
        question (what the trainer rebuilds a prompt from and the audit re-scores)."""
        if stage != RESOLVE or not items:
            return tuple(groups)
        return tuple(
            QuestionGroup(item.question, group.completions) for item, group in zip(items, groups, strict=True)
        )

    # ---- verification -------------------------------------------------------------------

    def resolve(self, batch: RolloutBatch, store: InputStore) -> tuple[StageItem, ...] | Verdict:
        """Re-derive the item of every group of a later-stage batch from the batches we hold,
        or a rejecting Verdict (see the module docstring for which reasons are blamed)."""
        if batch.stage == ANSWER:
            return ()
        if batch.stage >= self.stage_count:
            return _reject("bad_input")
        items: list[StageItem] = []
        seen: set[QuestionRef] = set()
        for group in batch.groups:
            ref = InputRef.of(group.question)
            if ref.author == batch.peer_id:
                return _reject("self_reference")
            if group.question in seen:
                return _reject("duplicate_question")
            seen.add(group.question)
            stored = store.get(batch.round, batch.stage - 1, ref.author)
            if stored is None:
                return _reject("missing_input")
            if digest_prefix(stored.digest) != ref.prefix:
                return _reject("input_mismatch")
            item = _item_from(batch.stage, ref, stored, store)
            if item is None:
                return _reject("bad_input")
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
            return _reject("too_few_groups")
        if len(groups) > min(limits.max_groups, self.answer.questions_per_round):
            return _reject("too_many_groups")
        if len(items) != len(groups):
            return _reject("missing_input")  # unresolved: never accept what we could not check
        for group in groups:
            shape_error = group_shape_error(group, limits)
            if shape_error is not None:
                return _reject(shape_error)
        if not self.answer.rescore:
            return Verdict(ok=True, reason=None, groups_checked=0)
        registry = self.answer.registry
        tolerance = self.answer.tolerance
        for checked, (item, group) in enumerate(zip(items, groups, strict=True)):
            for completion in group.completions:
                try:
                    actual = score_item(item, completion.text, registry)
                except Exception:  # the registry promises not to raise; if it does, it is our bug
                    return Verdict(ok=False, reason="scoring_error", groups_checked=checked)
                if not abs(completion.reward - actual) <= tolerance or not math.isfinite(actual):
                    return Verdict(ok=False, reason="forged_reward", groups_checked=checked)
        return Verdict(ok=True, reason=None, groups_checked=len(groups))


def _item_from(stage: int, ref: InputRef, stored: Stored, store: InputStore) -> StageItem | None:
    """The item of `stage` that `ref` names in the previous stage's batch `stored` (None: the
    reference names nothing there)."""
    groups = stored.batch.groups
    if not 0 <= ref.group < len(groups):
        return None
    group = groups[ref.group]
    if stage == CRITIQUE:
        texts = tuple(completion.text for completion in group.completions)
        return StageItem(CRITIQUE, ref.question(), group.question, texts)
    if stage == RESOLVE and ref.group < len(stored.items):
        critiqued = stored.items[ref.group]  # what the critic was shown: question and candidates
        picks = tuple(parse_pick(completion.text) for completion in group.completions)
        return StageItem(RESOLVE, ref.question(), critiqued.question, critiqued.candidates, picks)
    return None


def stage_prompt(item: StageItem, question_text: str) -> str:
    """The prompt of a later-stage item (critique or resolve), around the question's text."""
    return (
        critique_prompt(item, question_text)
        if item.stage == CRITIQUE
        else resolve_prompt(item, question_text)
    )


def critique_prompt(item: StageItem, question_text: str) -> str:
    """The prompt a policy answers for a critique item (the trainer supplies the question text)."""
    answers = "\n".join(f"Answer {i}: {text}" for i, text in enumerate(item.candidates, start=1))
    return (
        f"{question_text}\n\nCandidate answers:\n{answers}\n\n"
        "Which answer is correct? Reply with its number as <answer>N</answer>."
    )


def resolve_prompt(item: StageItem, question_text: str) -> str:
    """The prompt a policy answers for a resolve item: the question, the candidates and the
    critics' majority pick; the final answer is scored like a stage-0 answer."""
    answers = "\n".join(f"Answer {i}: {text}" for i, text in enumerate(item.candidates, start=1))
    majority = item.majority()
    verdict = f"Most critics picked answer {majority}." if majority else "The critics picked none."
    return f"{question_text}\n\nCandidate answers:\n{answers}\n{verdict}\n\nGive the final answer."
