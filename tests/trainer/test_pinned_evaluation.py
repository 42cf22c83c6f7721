"""Evaluation and GRPO rules a plausible bug would bend without any other test noticing: which
held-out split is answered, what accuracy counts, which questions count as trainable, and the
scale of a group's advantages. Each test fails on the bug named in its docstring."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import QuestionRef
from trainer.config import TrainerConfig
from trainer.evaluation import SlicedEvaluation, eval_questions, evaluate, gain, summarize, unit_ranges
from trainer.grpo import group_advantages
from trainer.intervals import gain_interval, mean_interval
from trainer.tasks import ReasoningGymRegistry

TASKS = ("leg_counting", "basic_arithmetic")


@pytest.fixture(scope="module")
def registry() -> ReasoningGymRegistry:
    # Half the reward is the answer's format: a right answer in a sloppy format scores < 1.
    return ReasoningGymRegistry(TASKS, difficulty=0, format_weight=0.5)


def config_for(tmp_path: Path, **overrides: object) -> TrainerConfig:
    fields: dict[str, object] = {"eval_questions": 4, "eval_samples": 1, **overrides}
    return TrainerConfig(data_dir=str(tmp_path), tasks=TASKS, difficulty=0, **fields)  # type: ignore[arg-type]


def answer_right(registry: ReasoningGymRegistry) -> object:
    """Answers every question with its reference answer, in a perfect format; records what it was asked."""
    asked: list[QuestionRef] = []

    def answer(refs: Sequence[QuestionRef], k: int) -> list[str]:
        asked.extend(refs)
        return [f"<answer>{registry.question(ref)[1]}</answer>" for ref in refs for _ in range(k)]

    answer.asked = asked  # type: ignore[attr-defined]
    return answer


@pytest.mark.parametrize("how", ["argument", "config"])
def test_a_test_evaluation_answers_the_test_split_not_validation(
    registry: ReasoningGymRegistry, tmp_path: Path, how: str
) -> None:
    """Bug: the split asked for (as an argument, or as `eval_split`) is dropped and the
    validation set answered instead, with the report still saying "test"."""
    config = config_for(tmp_path, eval_split="test" if how == "config" else "validation")
    answer = answer_right(registry)
    result = evaluate(registry, config, answer, step=0, split="test" if how == "argument" else None)  # type: ignore[arg-type]
    test_set = registry.eval_questions(config.eval_questions, config.eval_seed, "test")
    validation = registry.eval_questions(config.eval_questions, config.eval_seed, "validation")
    assert answer.asked == test_set  # type: ignore[attr-defined]
    assert not set(test_set) & set(validation)
    assert result["split"] == "test" and result["questions"] == len(test_set)


def test_the_held_out_set_follows_the_configured_split(
    registry: ReasoningGymRegistry, tmp_path: Path
) -> None:
    """Bug: `eval_questions` (what the node's held-out evaluation asks) ignores `eval_split`."""
    config = config_for(tmp_path, eval_split="test")
    test_set = registry.eval_questions(config.eval_questions, config.eval_seed, "test")
    assert eval_questions(registry, config) == test_set
    assert eval_questions(registry, config, "validation") != test_set


def test_validation_stays_the_default_split(registry: ReasoningGymRegistry, tmp_path: Path) -> None:
    config = config_for(tmp_path)
    answer = answer_right(registry)
    result = evaluate(registry, config, answer, step=0)  # type: ignore[arg-type]
    assert answer.asked == registry.eval_questions(config.eval_questions, config.eval_seed, "validation")  # type: ignore[attr-defined]
    assert result["split"] == "validation"


def test_accuracy_counts_right_answers_not_the_format_weighted_reward(registry: ReasoningGymRegistry) -> None:
    """Bug: accuracy counted from the swarm's reward (format included) instead of correctness.
    A right answer in a sloppy format is right (reward < 1); a wrong one in a perfect format is
    wrong (reward 0.5)."""
    refs = registry.eval_questions(2, 7)[:2]
    right_answer = registry.question(refs[0])[1]
    sloppy_but_right = f"<answer>{right_answer}</answer> and more text after the tag"
    tidy_but_wrong = "<answer>not a number at all</answer>"
    result = summarize(registry, refs, [sloppy_but_right, tidy_but_wrong], generations_to_log=2)
    assert registry.score(refs[0], sloppy_but_right) < 0.999  # the format costs reward here
    assert registry.score(refs[1], tidy_but_wrong) == pytest.approx(0.5)
    assert result["accuracy"] == pytest.approx(0.5)
    assert result["per_question"] == [1.0, 0.0]
    assert [sample["correct"] for sample in result["samples"]] == [True, False]
    assert result["reward"] == pytest.approx(
        (registry.score(refs[0], sloppy_but_right) + registry.score(refs[1], tidy_but_wrong)) / 2
    )


def test_a_question_that_cannot_be_generated_is_never_trainable(registry: ReasoningGymRegistry) -> None:
    """Bug: a question whose generation fails counts as trainable (not held out), so a broken
    item could be assigned for training and scored 0 for everyone."""
    broken = [
        QuestionRef("leg_counting", 3, -1),  # no such index
        QuestionRef("chain_sum", 3, 0),  # a task this registry does not have
    ]
    for ref in broken:
        assert registry.is_heldout(ref)
    # A question that generates is held out or not by its content, and both kinds exist.
    verdicts = {registry.is_heldout(QuestionRef("leg_counting", 3, i)) for i in range(200)}
    assert verdicts == {True, False}


def test_the_advantage_divides_by_the_unbiased_group_std() -> None:
    """Bug: the biased (population) std, which makes every advantage of a small group larger
    (by sqrt(n / (n - 1)): x1.41 for a pair)."""
    low, high = group_advantages([0.0, 1.0])
    assert high == pytest.approx(1 / math.sqrt(2), rel=1e-3)  # std of {0, 1} with n - 1: 0.707
    assert low == pytest.approx(-high)
    # mean 3, centred (-2, -1, 0, 3), unbiased variance 14 / 3
    assert group_advantages([1.0, 2.0, 3.0, 6.0]) == pytest.approx(
        [c / math.sqrt(14 / 3) for c in (-2.0, -1.0, 0.0, 3.0)], rel=1e-3, abs=1e-9
    )


@given(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=2, max_size=16))
def test_advantages_have_unit_unbiased_spread_unless_the_group_is_uniform(rewards: list[float]) -> None:
    """Scale, beside the centring and sign another property checks: the advantages' own
    unbiased std is 1 (up to the epsilon that keeps a uniform group at 0)."""
    advantages = group_advantages(rewards)
    n = len(rewards)
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1))
    spread = math.sqrt(sum(a * a for a in advantages) / (n - 1))
    assert spread == pytest.approx(std / (std + 1e-4), abs=1e-6)


# ---- what an evaluation reports (the survivors of scripts/mutation.sh trainer/evaluation.py) ----


class ScriptedRegistry:
    """Correctness and reward by answer text, so every figure of a summary is known in advance:
    "right" is right (1.0), "edge" scores exactly the CORRECT threshold, anything else is wrong."""

    def correctness(self, ref: QuestionRef, answer: str) -> float:
        return {"right": 1.0, "edge": 0.999}.get(answer, 0.0)

    def score(self, ref: QuestionRef, text: str) -> float:
        return {"<answer>right</answer>": 0.9, "<answer>edge</answer>": 0.7}.get(text, 0.1)

    def question(self, ref: QuestionRef) -> tuple[str, str]:
        return f"question {ref.index}", f"reference {ref.index}"


def test_a_summary_reports_every_figure_per_task_and_per_logged_sample() -> None:
    refs = [QuestionRef("a", 1, 0), QuestionRef("a", 1, 1), QuestionRef("b", 1, 2)]
    right, edge, wrong = "<answer>right</answer>", "<answer>edge</answer>", "<answer>no</answer>"
    texts = [right, right, edge, wrong, wrong, right]  # two samples per question, question-major
    result = summarize(ScriptedRegistry(), refs, texts, generations_to_log=2, samples_per_question=2)  # type: ignore[arg-type]
    assert result["per_question"] == [1.0, 0.5, 0.5]  # "edge" counts: the threshold is inclusive
    assert result["accuracy"] == pytest.approx(4 / 6)
    assert result["reward"] == pytest.approx((0.9 + 0.9 + 0.7 + 0.1 + 0.1 + 0.9) / 6)
    assert result["per_task"] == {
        "a": {"accuracy": pytest.approx(3 / 4), "reward": pytest.approx((0.9 + 0.9 + 0.7 + 0.1) / 4), "n": 2},
        "b": {"accuracy": pytest.approx(1 / 2), "reward": pytest.approx((0.1 + 0.9) / 2), "n": 1},
    }
    assert all(type(task["n"]) is int for task in result["per_task"].values())
    assert result["task_mean_accuracy"] == pytest.approx((3 / 4 + 1 / 2) / 2)
    assert result["questions"] == 3
    assert result["accuracy_interval"] == mean_interval([1.0, 0.5, 0.5]).as_dict()
    # The first sample of each question, up to `generations_to_log` of them.
    assert result["samples"] == [
        {
            "task": "a",
            "index": 0,
            "completion": right,
            "reference": "reference 0",
            "correct": True,
            "reward": 0.9,
        },
        {
            "task": "a",
            "index": 1,
            "completion": edge,
            "reference": "reference 1",
            "correct": True,
            "reward": 0.7,
        },
    ]
    with pytest.raises(ValueError, match="completions"):
        summarize(ScriptedRegistry(), refs, texts[:5], generations_to_log=0, samples_per_question=2)  # type: ignore[arg-type]


def test_an_evaluation_is_labelled_with_its_step_samples_split_and_time(
    registry: ReasoningGymRegistry, tmp_path: Path
) -> None:
    config = config_for(tmp_path, eval_samples=2, eval_generations_to_log=1)
    result = evaluate(registry, config, answer_right(registry), step=7)  # type: ignore[arg-type]
    assert result["step"] == 7 and result["samples_per_question"] == 2 and result["split"] == "validation"
    assert len(result["samples"]) == 1  # eval_generations_to_log, not eval_samples
    assert isinstance(result["seconds"], float) and result["seconds"] >= 0.0
    assert result["accuracy"] == 1.0


def test_a_gain_pairs_two_evaluations_of_the_same_set_only() -> None:
    before = {"split": "test", "questions": 3, "per_question": [0.0, 0.5, 1.0]}
    after = {"split": "test", "questions": 3, "per_question": [1.0, 0.5, 1.0]}
    assert gain(before, after) == gain_interval([0.0, 0.5, 1.0], [1.0, 0.5, 1.0])
    assert gain(before, after).mean == pytest.approx(1 / 3)
    for other in ({**after, "split": "validation"}, {**after, "questions": 4}):
        with pytest.raises(ValueError, match=r"^a gain compares two evaluations of the same held-out set$"):
            gain(before, other)


@pytest.mark.parametrize(
    ("questions", "samples", "chunk", "units"),
    [
        (5, 2, 4, [range(0, 2), range(2, 4), range(4, 5)]),
        (3, 4, 2, [range(0, 1), range(1, 2), range(2, 3)]),  # a unit holds one question at least
        (4, 1, 8, [range(0, 4)]),
    ],
)
def test_generation_units_split_the_set_in_order(
    questions: int, samples: int, chunk: int, units: list[range]
) -> None:
    assert unit_ranges(questions, samples, chunk) == units


def test_a_sliced_evaluation_answers_its_units_in_order_each_from_the_state_the_last_left(
    registry: ReasoningGymRegistry, tmp_path: Path
) -> None:
    config = config_for(tmp_path, eval_split="test", eval_samples=2, eval_generations_to_log=1)
    calls: list[tuple[list[QuestionRef], int, object]] = []
    step = [4]

    def answer_unit(refs: Sequence[QuestionRef], k: int, state: object) -> tuple[list[str], object]:
        calls.append((list(refs), k, state))
        texts = [f"<answer>{registry.question(ref)[1]}</answer>" for ref in refs for _ in range(k)]
        return texts, len(calls)  # the sampler state after this unit: which call left it

    sliced = SlicedEvaluation(registry, config, answer_unit, lambda: step[0], chunk=4)  # 2 questions a unit
    assert sliced.split == "test"
    assert sliced.refs == registry.eval_questions(config.eval_questions, config.eval_seed, "test")
    assert sliced.units == unit_ranges(len(sliced.refs), 2, 4) and len(sliced.units) >= 3
    with pytest.raises(RuntimeError, match=rf"^0 of {len(sliced.units)} units answered$"):
        sliced.result()
    started = time.perf_counter()
    assert sliced.answer_next() == 2
    assert sliced.answer_next() == 2
    sliced.drop_last()  # ran past its deadline: answered again, from the same state
    step[0] = 5
    while not sliced.complete:
        sliced.answer_next()
    elapsed = time.perf_counter() - started
    assert [state for _, _, state in calls] == [None, 1, 1, *range(3, len(calls))]
    assert [refs for refs, _, _ in calls[2:]] == [sliced.refs[u.start : u.stop] for u in sliced.units[1:]]
    assert all(k == 2 for _, k, _ in calls)
    with pytest.raises(RuntimeError, match=r"^every unit of this evaluation is answered$"):
        sliced.answer_next()
    result = sliced.result()
    assert result["step"] == 5 and result["split"] == "test" and result["samples_per_question"] == 2
    assert result["slices"] == [{"step": 4, "questions": 2}, {"step": 5, "questions": len(sliced.refs) - 2}]
    assert result["accuracy"] == 1.0 and len(result["samples"]) == 1
    assert 0.0 <= result["seconds"] <= elapsed
    assert result["seconds"] == pytest.approx(sum(sliced.unit_seconds))

    def short(refs: Sequence[QuestionRef], k: int, state: object) -> tuple[list[str], object]:
        return ["<answer>1</answer>"], state

    with pytest.raises(ValueError, match=r"^1 completions for 2 questions$"):
        SlicedEvaluation(registry, config, short, lambda: 0, chunk=4).answer_next()


def test_an_evaluations_time_is_its_own(registry: ReasoningGymRegistry, tmp_path: Path) -> None:
    started = time.perf_counter()
    result = evaluate(registry, config_for(tmp_path), answer_right(registry), step=0)  # type: ignore[arg-type]
    assert 0.0 <= result["seconds"] <= time.perf_counter() - started


def test_a_sliced_evaluation_takes_its_own_split_and_drops_a_short_last_unit_whole(
    registry: ReasoningGymRegistry, tmp_path: Path
) -> None:
    config = config_for(tmp_path, eval_split="test", eval_samples=1)
    answered: list[int] = []

    def answer_unit(refs: Sequence[QuestionRef], k: int, state: object) -> tuple[list[str], object]:
        answered.append(len(refs))
        return [f"<answer>{registry.question(ref)[1]}</answer>" for ref in refs], state

    sliced = SlicedEvaluation(registry, config, answer_unit, lambda: 0, chunk=3, split="validation")
    assert sliced.refs == registry.eval_questions(config.eval_questions, config.eval_seed, "validation")
    assert len(sliced.refs) % 3 != 0, "the last unit must be shorter for this test"
    while not sliced.complete:
        sliced.answer_next()
    sliced.drop_last()
    assert sliced.done == len(sliced.units) - 1
    sliced.answer_next()  # the short last unit again
    assert answered[-1] == answered[-2] == len(sliced.refs) % 3
    result = sliced.result()
    assert result["split"] == "validation" and result["questions"] == len(sliced.refs)
    assert result["accuracy"] == 1.0
