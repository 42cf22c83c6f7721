"""Question assignment: deterministic, distinct, within range, fair across tasks."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import limits, questions
from protocol.questions import (
    EVAL_INDEX_BASE,
    EVAL_INDEX_LIMIT,
    HELDOUT_SHARE,
    HELDOUT_SPLITS,
    TRAIN_INDEX_LIMIT,
    dataset_seed_for,
    evaluation_questions,
    heldout_key,
    heldout_split,
    questions_for,
)
from tests.helpers.strategies import peer_ids

task_lists = st.lists(
    st.text(alphabet="abcdefgh_", min_size=1, max_size=12), min_size=1, max_size=6, unique=True
)
seeds = st.integers(0, limits.MAX_UINT63)


@given(
    seed=seeds,
    round_=st.integers(0, 10**6),
    stage=st.integers(0, 3),
    peer=peer_ids,
    tasks=task_lists,
    count=st.integers(0, 16),
)
def test_questions_are_deterministic_distinct_and_in_range(seed, round_, stage, peer, tasks, count):
    questions = questions_for(seed, round_, stage, peer, tasks, count)
    assert questions == questions_for(seed, round_, stage, peer, list(tasks), count)
    assert len(questions) == count == len(set(questions))
    for question in questions:
        assert question.task in tasks
        assert question.dataset_seed == dataset_seed_for(seed, question.task)
        assert 0 <= question.index < TRAIN_INDEX_LIMIT
    # A prefix property: asking for fewer gives the first ones (stable under count changes).
    assert questions_for(seed, round_, stage, peer, tasks, count // 2) == questions[: count // 2]


@given(seed=seeds, round_=st.integers(0, 10**6), peer=peer_ids, other=peer_ids, tasks=task_lists)
def test_different_peers_rounds_and_stages_get_different_questions(seed, round_, peer, other, tasks):
    mine = questions_for(seed, round_, 0, peer, tasks, 8)
    if other != peer:
        assert mine != questions_for(seed, round_, 0, other, tasks, 8)
    assert mine != questions_for(seed, round_ + 1, 0, peer, tasks, 8)
    assert mine != questions_for(seed, round_, 1, peer, tasks, 8)


def test_not_salted_by_the_process():
    code = "from protocol.questions import questions_for; print(questions_for(7, 3, 0, 'p', ['a', 'b'], 4))"
    runs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in "ab"
    }
    assert len(runs) == 1 and repr(questions_for(7, 3, 0, "p", ["a", "b"], 4)) in runs.pop()


def test_tasks_are_uniform_and_weights_are_respected():
    tasks = ["a", "b", "c", "d"]
    uniform = Counter(q.task for r in range(500) for q in questions_for(1, r, 0, "p", tasks, 8))
    for task in tasks:
        assert 900 <= uniform[task] <= 1100  # 4000 draws, expectation 1000, sd ~27
    weighted = Counter(
        q.task for r in range(500) for q in questions_for(1, r, 0, "p", tasks, 8, weights=[3, 1, 0, 0])
    )
    assert set(weighted) == {"a", "b"}
    assert 2850 <= weighted["a"] <= 3150


def test_duplicate_draws_are_redrawn(monkeypatch):
    # With a 3-item index space, collisions are certain; every draw must still be distinct.
    monkeypatch.setattr(questions, "TRAIN_INDEX_LIMIT", 3)
    for round_ in range(50):
        drawn = questions_for(1, round_, 0, "p", ["a"], 3)
        assert sorted(q.index for q in drawn) == [0, 1, 2]
    with pytest.raises(ValueError):
        questions_for(1, 0, 0, "p", ["a"], 4)


def test_evaluation_questions_are_disjoint_from_training_and_held_out_by_text():
    def text_of(ref):  # a question space of 400 texts per task: indices repeat texts
        return f"{ref.task} question {ref.index % 400}"

    evaluation = evaluation_questions(["a", "b"], 5, 20, text_of)
    assert len(evaluation) == len(set(evaluation)) == 40
    assert all(EVAL_INDEX_BASE <= q.index < EVAL_INDEX_BASE + EVAL_INDEX_LIMIT for q in evaluation)
    assert EVAL_INDEX_BASE >= TRAIN_INDEX_LIMIT
    assert all(heldout_key(q.task, text_of(q)) for q in evaluation)
    assert {q.dataset_seed for q in evaluation} == {5}
    assert evaluation == evaluation_questions(["a", "b"], 5, 20, text_of)
    # The first held-out texts, each once, in index order.
    for task in ("a", "b"):
        indices = [q.index for q in evaluation if q.task == task]
        assert indices == sorted(indices)
        expected = [i for i in range(400) if heldout_split(task, f"{task} question {i}") == "validation"][:20]
        assert indices == [EVAL_INDEX_BASE + i for i in expected]


def test_a_small_question_space_gives_what_it_has():
    # 40 distinct texts hold about 5 held-out ones: asking for 20 gives those, once each.
    evaluation = evaluation_questions(["a"], 1, 20, lambda ref: f"t{ref.index % 40}")
    texts = [f"t{q.index % 40}" for q in evaluation]
    in_split = sum(heldout_split("a", f"t{i}") == "validation" for i in range(40))
    assert len(texts) == len(set(texts)) == in_split < 20


def test_validation_and_test_splits_are_disjoint_held_out_and_cover_two_slices():
    def text_of(ref):
        return f"{ref.task} question {ref.index % 3000}"

    validation = evaluation_questions(["a", "b"], 5, 40, text_of)
    test = evaluation_questions(["a", "b"], 5, 40, text_of, "test")
    assert evaluation_questions(["a", "b"], 5, 40, text_of, "validation") == validation
    assert len(validation) == len(test) == 80
    assert not {text_of(q) for q in validation} & {text_of(q) for q in test}
    assert all(heldout_split(q.task, text_of(q)) == "validation" for q in validation)
    assert all(heldout_split(q.task, text_of(q)) == "test" for q in test)
    # Both splits are held out (never trained on); together about 2 texts in HELDOUT_SHARE.
    assert all(heldout_key(q.task, text_of(q)) for q in validation + test)
    share = sum(heldout_key("a", f"a question {i}") for i in range(8000)) / 8000
    assert abs(share - len(HELDOUT_SPLITS) / HELDOUT_SHARE) < 0.02
    with pytest.raises(ValueError, match="split"):
        evaluation_questions(["a"], 5, 4, text_of, "train")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tasks": []},
        {"tasks": ["a", "a"]},
        {"tasks": "ab"},
        {"tasks": [""]},
        {"count": -1},
        {"count": limits.MAX_GROUPS_PER_BATCH + 1},
        {"seed": -1},
        {"round": True},
        {"peer_id": ""},
        {"weights": [1.0]},
        {"weights": [0.0, 0.0]},
        {"weights": [1.0, -1.0]},
        {"weights": [1.0, float("nan")]},
    ],
)
def test_bad_arguments_are_value_errors(kwargs):
    arguments = {"seed": 1, "round": 0, "stage": 0, "peer_id": "p", "tasks": ["a", "b"], "count": 2} | kwargs
    with pytest.raises(ValueError):
        questions_for(**arguments)
