"""protocol/answer_verify.py: the verify stage's items and answer text, pinned at their edges.
Which group a reference names decides what every verifier re-scores a verdict against, so an
out-of-range or wrong-stage reference must name nothing, and group 0 is as real as the last."""

from __future__ import annotations

import hashlib

from protocol.answer_verify import VERIFY, AnswerVerifyGame, VerifyItem, format_verdicts, parse_verdicts
from protocol.game import SingleStageGame
from protocol.messages import Completion, QuestionGroup, QuestionRef, RolloutBatch
from protocol.staged import ANSWER, InputRef, Stored
from tests.helpers.inbox import EchoRegistry

GAME = AnswerVerifyGame(
    answer=SingleStageGame(seed=5, tasks=("echo",), questions_per_round=2, registry=EchoRegistry())
)
DIGEST = hashlib.sha256(b"answers").digest()
QUESTIONS = (QuestionRef("echo", 5, 0), QuestionRef("echo", 5, 1))
STORED = Stored(
    DIGEST,
    RolloutBatch(
        "s",
        3,
        ANSWER,
        "author",
        tuple(
            QuestionGroup(q, (Completion(f"right {q.index}", 1.0), Completion("wrong", 0.0)))
            for q in QUESTIONS
        ),
    ),
)


def ref(group: int) -> InputRef:
    return InputRef("author", 7, group)


def test_every_group_of_the_answer_batch_is_an_item_of_the_verify_stage() -> None:
    for group in (0, 1):
        item = GAME.item_from(VERIFY, ref(group), STORED)
        assert item == VerifyItem(
            VERIFY, ref(group).question(), QUESTIONS[group], (f"right {group}", "wrong")
        )
        assert item is not None and item.stage == VERIFY


def test_a_reference_outside_the_batch_or_to_another_stage_names_nothing() -> None:
    assert GAME.item_from(VERIFY, ref(2), STORED) is None  # one past the last group
    assert GAME.item_from(VERIFY, ref(-1), STORED) is None  # not the last group, counted from the end
    assert GAME.item_from(ANSWER, ref(0), STORED) is None  # the answer stage answers questions, not items
    assert GAME.item_from(2, ref(0), STORED) is None


def test_the_verdict_text_is_the_one_the_prompt_asks_for() -> None:
    # trainer/prompts/answer_verify.py asks for "<answer>yes no ...</answer>"; the simulated
    # answers (simulator/answerers/answer_verify.py) write exactly that.
    assert format_verdicts((True, False, True)) == "<answer>yes no yes</answer>"
    assert format_verdicts(()) == "<answer></answer>"
    assert parse_verdicts(format_verdicts((False, True))) == (False, True)
