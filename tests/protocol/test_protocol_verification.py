"""Batch verification: honest batches pass; forged rewards and foreign questions are caught."""

from __future__ import annotations

import functools
import math

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import Completion, QuestionGroup, QuestionRef, RolloutBatch
from protocol.questions import questions_for
from protocol.verification import VerificationLimits, verify_batch

TASKS = ("mod7", "mod7b")
SEED = 42
SENDER = "12D3KooWSender"
LIMITS = VerificationLimits(
    min_groups=1, max_groups=8, min_completions=2, max_completions=6, max_text_bytes=64
)


class Mod7Registry:
    """Test registry: the answer to question i is str(i % 7); partial credit for the right length."""

    def __init__(self) -> None:
        self.calls = 0

    def task_names(self) -> tuple[str, ...]:
        return TASKS

    def is_heldout(self, question: QuestionRef) -> bool:
        return False

    def score(self, question: QuestionRef, completion_text: str) -> float:
        self.calls += 1
        answer = str(question.index % 7)
        if completion_text.strip() == answer:
            return 1.0
        return 0.25 if len(completion_text) == len(answer) else 0.0


class BrokenRegistry(Mod7Registry):
    def score(self, question: QuestionRef, completion_text: str) -> float:
        raise RuntimeError("registry bug")


REGISTRY = Mod7Registry()


@st.composite
def honest_batches(draw):
    questions = expected()[: draw(st.integers(1, 8))]
    groups = []
    for question in questions:
        texts = draw(
            st.lists(
                st.sampled_from(["0", "1", "2", "3", "4", "5", "6", "x", "", " 3 ", "42"]),
                min_size=2,
                max_size=6,
            )
        )
        groups.append(
            QuestionGroup(question, tuple(Completion(t, REGISTRY.score(question, t)) for t in texts))
        )
    return RolloutBatch("swarm", 3, 0, SENDER, tuple(groups))


@functools.cache
def expected() -> tuple[QuestionRef, ...]:
    return questions_for(SEED, 3, 0, SENDER, TASKS, 8)


def verify(batch: RolloutBatch, registry=REGISTRY, **kwargs):
    kwargs.setdefault("expected_questions", expected())
    return verify_batch(batch, registry, limits=LIMITS, **kwargs)


@given(batch=honest_batches())
def test_honest_batches_pass(batch):
    verdict = verify(batch)
    assert verdict.ok and verdict.reason is None
    assert verdict.groups_checked == len(batch.groups)


@given(batch=honest_batches(), data=st.data())
def test_any_forged_reward_is_caught(batch, data):
    g = data.draw(st.integers(0, len(batch.groups) - 1))
    group = batch.groups[g]
    c = data.draw(st.integers(0, len(group.completions) - 1))
    honest = group.completions[c].reward
    forged = data.draw(st.floats(0, 1).filter(lambda r: abs(r - honest) > 1e-6) | st.just(math.nan))
    completions = list(group.completions)
    completions[c] = attrs.evolve(completions[c], reward=forged)
    groups = list(batch.groups)
    groups[g] = attrs.evolve(group, completions=tuple(completions))
    verdict = verify(attrs.evolve(batch, groups=tuple(groups)))
    assert (verdict.ok, verdict.reason) == (False, "forged_reward")
    assert verdict.groups_checked == g


@given(batch=honest_batches(), other=st.text(min_size=1, max_size=20).filter(lambda p: p != SENDER))
def test_questions_assigned_to_someone_else_are_rejected(batch, other):
    # The same batch is not acceptable from a peer that was assigned other questions.
    verdict = verify(
        attrs.evolve(batch, peer_id=other), expected_questions=questions_for(SEED, 3, 0, other, TASKS, 8)
    )
    assert (verdict.ok, verdict.reason) == (False, "unassigned_question")
    assert verify(batch, expected_questions=None).ok  # without an expectation, only re-scoring applies


def test_tolerance_allows_float_noise_only():
    batch = RolloutBatch(
        "s", 3, 0, SENDER, (QuestionGroup(expected()[0], (Completion("??", 0.0), Completion("??", 1e-7))),)
    )
    assert verify(batch).ok
    assert verify(batch, tolerance=1e-8).reason == "forged_reward"


def shape_case(**changes) -> RolloutBatch:
    question = expected()[0]
    good = QuestionGroup(question, (Completion("x", 0.0), Completion("y", 0.0)))
    return RolloutBatch("s", 3, 0, SENDER, changes.get("groups", (good,)))


@pytest.mark.parametrize(
    ("groups", "reason"),
    [
        ((), "too_few_groups"),
        (
            tuple(
                QuestionGroup(q, (Completion("x", 0.0), Completion("y", 0.0)))
                for q in questions_for(SEED, 3, 0, SENDER, TASKS, 9)
            ),
            "too_many_groups",
        ),
        ((QuestionGroup(expected()[0], (Completion("x", 0.0),)),), "bad_group_size"),
        ((QuestionGroup(expected()[0], (Completion("x", 0.0),) * 7),), "bad_group_size"),
        ((QuestionGroup(expected()[0], (Completion("x" * 65, 0.0), Completion("y", 0.0))),), "text_too_long"),
        ((QuestionGroup(QuestionRef("other_task", 1, 1), (Completion("x", 0.0),) * 2),), "unknown_task"),
        (
            (
                QuestionGroup(
                    attrs.evolve(expected()[0], index=expected()[0].index + 1), (Completion("x", 0.0),) * 2
                ),
            ),
            "unassigned_question",
        ),
        ((QuestionGroup(expected()[0], (Completion("x", 0.0),) * 2),) * 2, "duplicate_question"),
    ],
)
def test_shape_checks_reject_before_rescoring(groups, reason):
    registry = Mod7Registry()
    verdict = verify(shape_case(groups=groups), registry=registry)
    assert (verdict.ok, verdict.reason, verdict.groups_checked) == (False, reason, 0)
    assert registry.calls == 0  # cheap checks first: no regeneration for a malformed batch


def test_registry_failure_is_reported_as_ours_not_the_senders():
    verdict = verify(shape_case(), registry=BrokenRegistry())
    assert (verdict.ok, verdict.reason) == (False, "scoring_error")


def test_without_rescoring_forged_rewards_pass_but_shape_checks_still_apply():
    # rescore=False exists only to measure what verification is worth (the sharing experiment).
    question = expected()[0]
    forged = RolloutBatch(
        "s", 3, 0, SENDER, (QuestionGroup(question, (Completion("??", 1.0), Completion("?", 0.0))),)
    )
    assert verify(forged).reason == "forged_reward"
    unchecked = verify(forged, rescore=False)
    assert unchecked.ok and unchecked.groups_checked == 0
    foreign = attrs.evolve(forged, peer_id="someone-else")
    assert (
        verify(
            foreign, rescore=False, expected_questions=questions_for(SEED, 3, 0, "someone-else", TASKS, 8)
        ).reason
        == "unassigned_question"
    )
