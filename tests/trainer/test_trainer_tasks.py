"""ReasoningGymRegistry: offline generation, determinism, safe scoring, deny-list."""

from __future__ import annotations

import decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import QuestionRef
from protocol.questions import EVAL_INDEX_BASE
from trainer.config import DEFAULT_TASKS, TrainerConfig
from trainer.rewards import extract_answer, format_score, safe_score
from trainer.tasks import ReasoningGymRegistry, TaskError


@pytest.fixture(scope="module")
def registry() -> ReasoningGymRegistry:
    return ReasoningGymRegistry(DEFAULT_TASKS)


@pytest.mark.parametrize("task", DEFAULT_TASKS)
def test_every_default_task_generates_offline_and_its_reference_scores_one(
    registry: ReasoningGymRegistry, task: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for index in (0, 17, EVAL_INDEX_BASE + 3):
        prompt, answer = registry.question(QuestionRef(task, 5, index))
        assert "<answer>" in prompt and len(prompt) > 40
        if answer is not None:
            assert registry.score(QuestionRef(task, 5, index), f"<answer>{answer}</answer>") == 1.0
        assert registry.score(QuestionRef(task, 5, index), "no answer tag at all") == 0.0
    assert capsys.readouterr().out == ""  # bf prints while generating; it must be silenced


def test_regeneration_is_deterministic_across_registries_and_dataset_sizes() -> None:
    import reasoning_gym

    first = ReasoningGymRegistry(DEFAULT_TASKS)
    second = ReasoningGymRegistry(tuple(reversed(DEFAULT_TASKS)))
    for task in DEFAULT_TASKS:
        for index in (3, 999_999, EVAL_INDEX_BASE + 12_345):
            ref = QuestionRef(task, 11, index)
            assert first.question(ref) == second.question(ref)
        # item i of a small dataset equals item i of a dataset big enough to contain it
        # (a plain decimal context, as the registry uses: vyper, imported by the chain tests,
        # installs a process-wide one that decimal_arithmetic cannot work under)
        with decimal.localcontext(decimal.Context()):
            big = reasoning_gym.create_dataset(task, seed=11, size=40)
            expected = big[39]["question"]
        assert first.entry(QuestionRef(task, 11, 39))["question"] == expected
    task = DEFAULT_TASKS[-1]  # a task with many distinct questions: two seeds differ at one index
    assert first.question(QuestionRef(task, 1, 5)) != first.question(QuestionRef(task, 2, 5))


@pytest.mark.parametrize("task", ["game_of_life_halting", "codeio"])
def test_denied_tasks_are_refused(task: str) -> None:
    with pytest.raises(TaskError, match="denied"):
        ReasoningGymRegistry((task,))
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    assert registry.score(QuestionRef(task, 0, 0), "<answer>anything</answer>") == 0.0
    with pytest.raises(TaskError):
        registry.question(QuestionRef(task, 0, 0))


def test_unknown_task_and_bad_config_are_clear_errors() -> None:
    with pytest.raises(TaskError, match="unknown"):
        ReasoningGymRegistry(("no_such_task",))
    with pytest.raises(ValueError, match="weights"):
        TrainerConfig(tasks=("basic_arithmetic", "bf"), weights=(1.0,))
    with pytest.raises(ValueError):
        TrainerConfig(format_reward=2.0)
    assert TrainerConfig(tasks="bf, basic_arithmetic").tasks == ("bf", "basic_arithmetic")


def test_scorer_exception_scores_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",))
    ref = QuestionRef("basic_arithmetic", 0, 1)
    _prompt, answer = registry.question(ref)
    dataset, _entry = registry._dataset_and_entry(ref)

    def explode(answer: str | None, entry: dict) -> float:
        raise RuntimeError("scorer bug")

    monkeypatch.setattr(dataset, "score_answer", explode)
    assert registry.score(ref, f"<answer>{answer}</answer>") == 0.0
    assert safe_score(lambda a, e: float("nan"), "x", {}) == 0.0
    assert safe_score(lambda a, e: 7.0, "x", {}) == 1.0


def test_format_reward_is_mixed_in_by_weight() -> None:
    registry = ReasoningGymRegistry(("basic_arithmetic",), format_weight=0.5)
    ref = QuestionRef("basic_arithmetic", 0, 2)
    _prompt, answer = registry.question(ref)
    assert registry.score(ref, f"<answer>{answer}</answer>") == 1.0
    assert registry.score(ref, "<answer>definitely wrong</answer>") == 0.5
    assert registry.score(ref, "nothing") == 0.0


@given(st.text(max_size=200))
def test_score_never_raises_and_stays_in_unit_interval(text: str) -> None:
    registry = _shared_registry()
    for task in ("basic_arithmetic", "fraction_simplification", "propositional_logic"):
        value = registry.score(QuestionRef(task, 0, 4), text)
        assert 0.0 <= value <= 1.0
        assert value == registry.score(QuestionRef(task, 0, 4), text)  # deterministic


@given(st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=30))
def test_extract_answer_and_format_score_on_wellformed_blocks(inner: str) -> None:
    completion = f"thinking... <answer>{inner}</answer>"
    assert extract_answer(completion) == inner.strip()
    assert format_score(completion) == pytest.approx(1.0)
    assert format_score(completion + " trailing") < 1.0
    assert format_score(inner) == 0.0
    assert extract_answer("<answer>a</answer> then <answer>b</answer>") == "b"


_REGISTRY: list[ReasoningGymRegistry] = []


def _shared_registry() -> ReasoningGymRegistry:
    if not _REGISTRY:
        _REGISTRY.append(
            ReasoningGymRegistry(
                ("basic_arithmetic", "fraction_simplification", "propositional_logic"), format_weight=0.3
            )
        )
    return _REGISTRY[0]


def test_scoring_is_unaffected_by_vypers_process_wide_decimal_context() -> None:
    # Importing vyper (the chain adapter does) installs a decimal context that refuses any
    # precision below 78; decimal_arithmetic lowers it, so without isolation it raises.
    import vyper.utils  # noqa: F401

    registry = ReasoningGymRegistry(("decimal_arithmetic",))
    ref = QuestionRef("decimal_arithmetic", 3, 7)
    _prompt, answer = registry.question(ref)
    assert registry.score(ref, f"<answer>{answer}</answer>") == 1.0
    assert registry.score(ref, "<answer>not a number</answer>") < 1.0
