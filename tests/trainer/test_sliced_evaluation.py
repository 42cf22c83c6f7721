"""A held-out evaluation answered in slices (trainer.evaluation.SlicedEvaluation, what a node
spreads over several rounds) is the whole evaluation: the same questions, each once, in the same
order, with the same sampler stream, so with unchanged weights the same texts, per-question
results and interval; a unit stopped part-way leaves no trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import TrainerConfig
from trainer.evaluation import unit_ranges
from trainer.policy import TrainerPolicy


def raw_tiny(data_dir: Path) -> TrainerConfig:
    """A small raw tiny model, 2 completions per question: 32 questions per unit of 64."""
    return TrainerConfig(
        data_dir=str(data_dir),
        tasks=("count_bits", "basic_arithmetic"),
        difficulty=0,
        tiny_hidden_size=32,
        tiny_layers=1,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=8,
        eval_questions=40,
        eval_samples=2,
    )


def test_units_cover_every_question_once_in_order() -> None:
    for questions, samples, chunk in [(80, 2, 64), (1, 4, 64), (100, 4, 64), (7, 100, 64), (0, 4, 64)]:
        units = unit_ranges(questions, samples, chunk)
        covered = [index for unit in units for index in unit]
        assert covered == list(range(questions))
        assert all(0 < len(unit) <= max(1, chunk // samples) for unit in units)


def test_slices_compose_into_exactly_the_whole_evaluation(tmp_path: Path) -> None:
    policy = TrainerPolicy(raw_tiny(tmp_path))
    whole = policy.evaluate()
    sliced = policy.sliced_evaluation()
    assert len(sliced.units) >= 2  # units of 32 questions: the test spans unit boundaries
    asked: list[object] = []
    while not sliced.complete:
        unit = sliced.units[sliced.done]
        asked.extend(sliced.refs[unit.start : unit.stop])
        sliced.answer_next()
    assert len(asked) == len(set(asked)) == whole["questions"] > 32  # each question once
    assert asked == sliced.refs
    result = sliced.result()
    keys = ("accuracy", "accuracy_interval", "per_question", "reward", "per_task", "samples", "questions")
    for key in keys:
        assert result[key] == whole[key], key
    assert result["slices"] == [{"step": policy.step, "questions": whole["questions"]}]
    with pytest.raises(RuntimeError):
        sliced.answer_next()


def test_a_stopped_unit_leaves_no_trace_and_is_answered_again_alike(tmp_path: Path) -> None:
    policy = TrainerPolicy(raw_tiny(tmp_path))
    whole = policy.evaluate()
    sliced = policy.sliced_evaluation()
    sliced.answer_next()
    policy.cancel()  # a deadline: the next unit stops at its first decoding step
    with pytest.raises(Exception):  # noqa: B017 - whatever the trainer raises when cancelled
        sliced.answer_next()
    policy.reset_cancel()
    assert sliced.done == 1
    with pytest.raises(RuntimeError):
        sliced.result()  # not complete: no partial result
    while not sliced.complete:
        sliced.answer_next()
    assert sliced.result()["per_question"] == whole["per_question"]


def test_a_sliced_result_on_unchanged_weights_is_remembered_for_the_next_node(tmp_path: Path) -> None:
    store = tmp_path / "store"
    policy = TrainerPolicy(raw_tiny(tmp_path / "a"))
    sliced = policy.sliced_evaluation()
    while not sliced.complete:
        sliced.answer_next()
    result = sliced.result()
    result["slices"] = [{"round": None, **piece} for piece in result["slices"]]
    policy.keep_sliced_result(result, store)
    other = TrainerPolicy(raw_tiny(tmp_path / "b"))  # another data dir on the same base
    found = other.remembered_evaluation(store)
    assert found is not None and found["remembered"] is True
    assert found["per_question"] == result["per_question"] and "slices" not in found

    # A train step between its units: no single set of weights answered it, nothing remembered.
    moved = TrainerPolicy(raw_tiny(tmp_path / "c"))
    sliced = moved.sliced_evaluation()
    sliced.answer_next()
    moved.step += 1  # what a train step does to the label (and, really, to the weights)
    while not sliced.complete:
        sliced.answer_next()
    result = sliced.result()
    assert [piece["step"] for piece in result["slices"]] == [0, 1]
    moved.keep_sliced_result(result, tmp_path / "store2")
    assert not (tmp_path / "store2").exists() or not list((tmp_path / "store2").glob("*.json"))
