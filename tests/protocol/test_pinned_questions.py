"""protocol/questions.py: every peer re-derives every other peer's questions, so the derivation
is pinned by known vectors (a change to any of them is a wire-format change: peers on either
side would reject each other's batches), and the bounds of the held-out scan and of a refusing
`exclude` are pinned by what a caller observes."""

from __future__ import annotations

import pytest

from protocol import questions
from protocol.limits import MAX_GROUPS_PER_BATCH, MAX_TASK_NAME_BYTES
from protocol.messages import QuestionRef
from protocol.questions import (
    EVAL_INDEX_BASE,
    EVAL_SCAN_LIMIT,
    EVAL_SCAN_PATIENCE,
    dataset_seed_for,
    evaluation_questions,
    heldout_key,
    heldout_split,
    questions_for,
    specialty,
)

# A real libp2p id's length (52): msgpack frames strings of 32-255 bytes differently by option,
# so a short id alone would not pin the serialization.
PEER = "12D3KooWRq4tRHs3N9ETaCAKfqC9Wq7vH8tZWZ9uTmvpFYrq5bAx"
TASKS = ("arith", "chain_sum", "leg")
ARITH, LEG = 2473219292214122294, 7487711628319036709


def test_dataset_seeds_are_pinned() -> None:
    assert dataset_seed_for(5, "arith") == ARITH
    assert dataset_seed_for(5, "leg") == LEG


def test_a_peers_questions_are_pinned() -> None:
    assert questions_for(5, 3, 1, PEER, TASKS, 4) == (
        QuestionRef("leg", LEG, 215338),
        QuestionRef("leg", LEG, 427787),
        QuestionRef("arith", ARITH, 140739),
        QuestionRef("leg", LEG, 353371),
    )


def test_weighted_questions_are_pinned() -> None:
    # Same draws as above: only the task of each comes from the weights (chain_sum weighs 0).
    picked = questions_for(5, 3, 1, PEER, TASKS, 4, weights=(1.0, 0.0, 3.0))
    assert [(ref.task, ref.index) for ref in picked] == [
        ("leg", 215338),
        ("leg", 427787),
        ("leg", 140739),
        ("leg", 353371),
    ]


def test_a_peers_specialty_is_pinned() -> None:
    assert specialty(TASKS, PEER) == "arith"


def test_held_out_splits_are_pinned() -> None:
    splits = [heldout_split("arith", str(key)) for key in range(12)]
    assert splits == [None] * 9 + ["validation", "test", "validation"]


def test_evaluation_sets_are_pinned() -> None:
    def key_of(ref: QuestionRef) -> str:
        return str(ref.index % 40)

    assert [
        (ref.task, ref.index - EVAL_INDEX_BASE)
        for ref in evaluation_questions(("arith", "leg"), 9, 3, key_of)
    ] == [
        ("arith", 9),
        ("arith", 11),
        ("arith", 20),
        ("leg", 21),
        ("leg", 22),
        ("leg", 29),
    ]
    test_split = evaluation_questions(("arith",), 9, 2, key_of, split="test")
    assert [ref.index - EVAL_INDEX_BASE for ref in test_split] == [10, 33]


def test_an_exclude_that_refuses_everything_gives_up_after_its_patience() -> None:
    # 64 draws a question plus 64: one question's worth of refusals ends at draw 129.
    with pytest.raises(ValueError) as raised:
        questions_for(5, 3, 1, PEER, TASKS, 1, exclude=lambda ref: True)
    assert str(raised.value) == "fewer than 1 trainable questions in 129 draws"
    with pytest.raises(ValueError) as raised:
        questions_for(5, 3, 1, PEER, TASKS, 2, exclude=lambda ref: True)
    assert str(raised.value) == "fewer than 2 trainable questions in 193 draws"


def test_an_exclude_that_refuses_most_still_fills_the_round() -> None:
    refused = 0

    def exclude(ref: QuestionRef) -> bool:
        nonlocal refused
        refused += 1
        return refused <= 100  # 100 refusals, within one question's patience of 128

    assert len(questions_for(5, 3, 1, PEER, TASKS, 1, exclude=exclude)) == 1


def test_the_held_out_scan_stops_after_its_patience_without_a_new_key() -> None:
    calls: list[int] = []

    def same_key(ref: QuestionRef) -> str:
        calls.append(ref.index)
        return "9"  # held out for validation ("arith", "9"): one question, then nothing new

    assert len(evaluation_questions(("arith",), 9, 5, same_key)) == 1
    assert len(calls) == EVAL_SCAN_PATIENCE


def test_the_held_out_scan_reads_at_most_its_limit_of_items() -> None:
    calls: list[int] = []

    def fresh_key(ref: QuestionRef) -> str:
        calls.append(ref.index)
        return str(ref.index)  # every item new: the scan runs to its limit

    found = evaluation_questions(("arith",), 9, EVAL_SCAN_LIMIT, fresh_key)
    assert len(calls) == EVAL_SCAN_LIMIT and 0 < len(found) < EVAL_SCAN_LIMIT
    assert calls[-1] == EVAL_INDEX_BASE + EVAL_SCAN_LIMIT - 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tasks": "arith"}, "tasks must be a sequence of task names, not one string"),
        ({"tasks": ()}, "tasks must not be empty"),
        ({"tasks": ("a", "a")}, "tasks must not contain duplicates (it would skew the task mix)"),
        ({"peer_id": ""}, "peer_id must be a non-empty string"),
        ({"weights": (0.0, 0.0, 0.0)}, "weights must not all be zero"),
    ],
)
def test_bad_arguments_say_what_is_wrong(kwargs: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"peer_id": PEER, "tasks": TASKS, "count": 2, **kwargs}
    with pytest.raises(ValueError) as raised:
        questions_for(5, 3, 1, **arguments)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_an_empty_evaluation_set_asks_no_question() -> None:
    # per_task 0 is a valid size (the argument check admits it): a set of no questions, not the
    # task's whole held-out scan.
    calls: list[int] = []

    def key_of(ref: QuestionRef) -> str:
        calls.append(ref.index)
        return str(ref.index)

    assert evaluation_questions(("arith", "leg"), 9, 0, key_of) == ()
    assert calls == []


def refusal(**kwargs: object) -> str:
    arguments: dict[str, object] = {"peer_id": PEER, "tasks": TASKS, "count": 2, **kwargs}
    seed, round_, stage = arguments.pop("seed", 5), arguments.pop("round", 3), arguments.pop("stage", 1)
    with pytest.raises(ValueError) as raised:
        questions_for(seed, round_, stage, **arguments)  # type: ignore[arg-type]
    return str(raised.value)


def test_every_uint_argument_spans_exactly_zero_to_two_to_the_63_minus_one() -> None:
    # A peer re-derives another's questions from the round's numbers: both ends must derive.
    top = 2**63 - 1
    assert len(questions_for(0, 0, 0, PEER, TASKS, 1)) == 1
    assert len(questions_for(top, top, top, PEER, TASKS, 1)) == 1
    assert dataset_seed_for(top, "arith") != dataset_seed_for(0, "arith")
    for name in ("seed", "round", "stage"):
        for bad in (-1, 2**63, True, 1.0):
            assert refusal(**{name: bad}) == f"{name} must be an int in [0, 2**63-1], got {bad!r}"
    with pytest.raises(ValueError) as raised:
        dataset_seed_for(-1, "arith")
    assert str(raised.value) == "seed must be an int in [0, 2**63-1], got -1"


def test_a_round_asks_zero_to_the_batch_cap_of_questions() -> None:
    assert questions_for(5, 3, 1, PEER, TASKS, 0) == ()
    assert len(set(questions_for(5, 3, 1, PEER, TASKS, MAX_GROUPS_PER_BATCH))) == MAX_GROUPS_PER_BATCH
    for bad in (-1, MAX_GROUPS_PER_BATCH + 1, True):
        assert refusal(count=bad) == f"count must be an int in [0, {MAX_GROUPS_PER_BATCH}], got {bad!r}"


def test_a_task_name_is_one_to_the_cap_of_utf8_bytes() -> None:
    longest = "é" * (MAX_TASK_NAME_BYTES // 2)  # two bytes a character
    assert questions_for(5, 3, 1, PEER, (longest,), 1)[0].task == longest
    for bad in ("", longest + "x", 7):
        assert refusal(tasks=("arith", bad)) == f"invalid task name {bad!r}"
    assert refusal(peer_id=7) == "peer_id must be a non-empty string"


def test_weights_are_finite_non_negative_numbers_one_per_task() -> None:
    # Integer weights are numbers too: 1 and 3 pick as 1.0 and 3.0 do.
    assert questions_for(5, 3, 1, PEER, TASKS, 4, weights=(1, 0, 3)) == questions_for(
        5, 3, 1, PEER, TASKS, 4, weights=(1.0, 0.0, 3.0)
    )
    assert refusal(weights=(1.0, 1.0)) == "weights has 2 entries for 3 tasks"
    for bad in (True, float("nan"), float("inf"), "1"):
        assert refusal(weights=(1.0, bad, 1.0)) == f"weights must be finite numbers, got {bad!r}"
    assert refusal(weights=(1.0, -0.5, 1.0)) == "weights must be non-negative, got -0.5"


def test_an_evaluation_set_checks_its_size_and_split() -> None:
    def key_of(ref: QuestionRef) -> str:
        return str(ref.index)

    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError) as raised:
            evaluation_questions(("arith",), 9, bad, key_of)  # type: ignore[arg-type]
        assert str(raised.value) == f"per_task must be a non-negative int, got {bad!r}"
    with pytest.raises(ValueError) as raised:
        evaluation_questions(("arith",), 9, 1, key_of, split="train")
    assert str(raised.value) == "split must be one of ['test', 'validation'], got 'train'"


def test_held_out_is_any_held_out_split() -> None:
    assert [heldout_key("arith", str(key)) for key in (0, 9, 10)] == [False, True, True]


def test_specialties_of_several_peers_are_pinned() -> None:
    assert [specialty(TASKS, f"peer-{i}") for i in range(8)] == [
        "leg",
        "arith",
        "arith",
        "chain_sum",
        "chain_sum",
        "chain_sum",
        "arith",
        "arith",
    ]


def test_a_scan_that_finds_no_held_out_key_stops_after_its_patience() -> None:
    calls: list[int] = []

    def training_key(ref: QuestionRef) -> str:
        calls.append(ref.index)
        return "0"  # a training key ("arith", "0"): nothing held out at all

    assert evaluation_questions(("arith",), 9, 5, training_key) == ()
    assert len(calls) == EVAL_SCAN_PATIENCE


def test_weights_are_proportions_whatever_their_sum() -> None:
    # Weights below 1 in total pick as the same proportions scaled up do.
    assert questions_for(5, 3, 1, PEER, TASKS, 4, weights=(0.25, 0.0, 0.75)) == questions_for(
        5, 3, 1, PEER, TASKS, 4, weights=(1.0, 0.0, 3.0)
    )


def test_only_tasks_of_positive_weight_count_toward_the_questions_there_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A 3-question index space per task (the real one holds a million): a task of weight 0 adds
    # none, so 7 questions cannot be drawn from one drawable task, whatever the list's length.
    monkeypatch.setattr(questions, "TRAIN_INDEX_LIMIT", 3)
    with pytest.raises(ValueError) as raised:
        questions_for(5, 3, 1, PEER, ("a", "b"), 7, weights=(1.0, 0.0))
    assert str(raised.value) == "cannot draw 7 distinct questions from 1 task(s)"


def test_exclude_judges_each_drawn_question() -> None:
    # The draws of the pinned round above without its "leg" questions: the arith one, then later draws.
    picked = questions_for(5, 3, 1, PEER, TASKS, 2, exclude=lambda ref: ref.task == "leg")
    assert picked[0] == QuestionRef("arith", ARITH, 140739)
    assert all(ref.task != "leg" for ref in picked) and len(set(picked)) == 2
