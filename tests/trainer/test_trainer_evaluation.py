"""Held-out evaluation: disjoint from pre-training and training by content, deterministic, seeded."""

from __future__ import annotations

import random
from pathlib import Path

import attrs
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages import Completion, QuestionGroup
from protocol.questions import questions_for
from trainer.config import TrainerConfig
from trainer.evaluation import eval_due, summarize
from trainer.generation import _nucleus
from trainer.policy import TrainerPolicy
from trainer.pretrain import examples
from trainer.tasks import ReasoningGymRegistry

TASKS = ("leg_counting", "basic_arithmetic", "chain_sum")  # small question spaces: collisions are likely


def raw_tiny(data_dir: Path, tasks: tuple[str, ...], **overrides: object) -> TrainerConfig:
    """A small, not pre-trained tiny model: what it answers does not matter here, only which questions."""
    return TrainerConfig(
        data_dir=str(data_dir),
        tasks=tasks,
        difficulty=0,
        tiny_hidden_size=32,
        tiny_layers=1,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=8,
        **overrides,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def registry() -> ReasoningGymRegistry:
    return ReasoningGymRegistry(TASKS, difficulty=0)


def test_eval_set_is_held_out_distinct_and_fixed(registry: ReasoningGymRegistry) -> None:
    refs = registry.eval_questions(16, 99)
    texts = [registry.question(ref)[0] for ref in refs]
    assert len(set(texts)) == len(texts), "each held-out text once"
    assert all(registry.is_heldout(ref) for ref in refs)
    assert {ref.task for ref in refs} == set(TASKS)
    assert ReasoningGymRegistry(TASKS, difficulty=0).eval_questions(16, 99) == refs


def test_test_split_is_held_out_and_disjoint_from_validation(registry: ReasoningGymRegistry) -> None:
    validation = registry.eval_questions(64, 20261123)
    test = registry.eval_questions(64, 20261123, "test")
    assert test and all(registry.is_heldout(ref) for ref in test)
    assert {ref.task for ref in test} == set(TASKS)
    assert not {registry.question(r)[0] for r in validation} & {registry.question(r)[0] for r in test}


@pytest.mark.parametrize("split", ["validation", "test"])
def test_pretraining_never_sees_an_evaluation_question(registry: ReasoningGymRegistry, split: str) -> None:
    eval_texts = {registry.question(ref)[0] for ref in registry.eval_questions(64, 20261123, split)}
    stream = examples(registry, random.Random(5))
    pretraining_texts = {next(stream)[1] for _ in range(3000)}
    # The question spaces are small enough that pre-training covers most of the non-held-out part...
    assert len(pretraining_texts) > 300
    # ...and none of the held-out part, although some of these texts come from other seeds too.
    assert not pretraining_texts & eval_texts


def test_training_questions_that_are_held_out_are_never_trained_on(tmp_path: Path) -> None:
    config = raw_tiny(tmp_path, TASKS)
    policy = TrainerPolicy(config)
    registry = policy.registry
    assigned = [
        ref for round_ in range(60) for ref in questions_for(7, round_, 0, "peer-a", registry.task_names(), 8)
    ]
    held = [ref for ref in assigned if registry.is_heldout(ref)]
    kept = [ref for ref in assigned if not registry.is_heldout(ref)]
    assert held and kept, "the swarm asks held-out questions too; they must be filtered"
    eval_texts = {
        registry.question(ref)[0]
        for split in ("validation", "test")
        for ref in registry.eval_questions(64, config.eval_seed, split)
    }
    assert not {registry.question(ref)[0] for ref in kept} & eval_texts

    def group(ref: object) -> QuestionGroup:
        return QuestionGroup(ref, (Completion("<answer>1</answer>", 1.0), Completion("x", 0.0)))

    before = [p.detach().clone() for p in policy.model.parameters()]
    metrics = policy.train([group(ref) for ref in held[:4]])
    assert metrics["groups_heldout"] == len(held[:4]) and metrics["groups_used"] == 0
    assert metrics["updated"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(before, policy.model.parameters(), strict=True))
    metrics = policy.train([group(ref) for ref in kept[:4]])
    assert metrics["groups_heldout"] == 0 and metrics["updated"] == 1.0


def test_evaluation_is_deterministic_and_leaves_the_training_sampler_alone(tmp_path: Path) -> None:
    config = raw_tiny(tmp_path, ("count_bits",), eval_questions=12)  # hundreds of content keys
    policy = TrainerPolicy(config)
    sampler_state = policy.sampler.get_state()
    first = policy.evaluate()
    assert torch.equal(policy.sampler.get_state(), sampler_state)
    second = policy.evaluate()
    assert first["per_task"] == second["per_task"]
    assert [s["completion"] for s in first["samples"]] == [s["completion"] for s in second["samples"]]
    assert first["questions"] == 12 and len(first["samples"]) == config.eval_generations_to_log
    other = TrainerPolicy(attrs.evolve(config, eval_seed=config.eval_seed + 1)).evaluate()
    assert other["questions"] == 12  # another seed: another fixed set, same size


@given(
    every=st.integers(0, 5),
    before=st.booleans(),
    updates=st.integers(0, 30),
    last=st.none() | st.integers(0, 30),
)
def test_eval_due_follows_the_schedule(every: int, before: bool, updates: int, last: int | None) -> None:
    config = TrainerConfig(eval_every=every, eval_before_train=before)
    due = eval_due(config, updates, last)
    if every == 0:
        assert not due
    elif last is None:
        assert due == (before or updates >= every)
    else:
        assert due == (updates - last >= every)


@given(st.lists(st.floats(0.01, 10.0), min_size=2, max_size=12), st.floats(0.05, 0.99))
def test_nucleus_keeps_the_smallest_set_reaching_top_p(weights: list[float], top_p: float) -> None:
    probs = torch.tensor([weights]) / sum(weights)
    kept = _nucleus(probs, top_p)[0]
    assert abs(float(kept.sum()) - 1.0) < 1e-5
    order = probs[0].argsort(descending=True)
    inside = kept[order] > 0
    count = int(inside.sum())
    assert bool(inside[:count].all()), "a kept token is never less likely than a dropped one"
    mass = float(probs[0][order][:count].sum())
    assert mass >= top_p - 1e-6 or count == len(weights)
    assert float(probs[0][order][: count - 1].sum()) < top_p + 1e-6, "no smaller set would do"


def test_accuracy_is_the_mean_over_the_samples_of_each_question(registry: ReasoningGymRegistry) -> None:
    refs = [ref for ref in registry.eval_questions(4, 99) if ref.task == "chain_sum"][:2]
    right = [f"<answer>{registry.question(ref)[1]}</answer>" for ref in refs]
    # question 0: 3 of 4 samples right; question 1: 1 of 4
    texts = [right[0], right[0], "<answer>x</answer>", right[0], "no", right[1], "no", "no"]
    result = summarize(registry, refs, texts, generations_to_log=5, samples_per_question=4)
    assert result["per_task"]["chain_sum"]["accuracy"] == pytest.approx(0.5)
    assert result["per_task"]["chain_sum"]["n"] == 2
    logged = [s["index"] for s in result["samples"]]
    assert logged == [ref.index for ref in refs], "one logged sample per question"
    with pytest.raises(ValueError, match="completions for 2 questions"):
        summarize(registry, refs, texts[:7], generations_to_log=0, samples_per_question=4)


@given(st.integers(0, 10_000), st.integers(0, 500))
def test_learning_rate_decays_from_lr_to_a_tenth_and_stays(step: int, decay: int) -> None:
    from trainer.policy import learning_rate

    config = TrainerConfig(lr=3e-4, lr_decay_steps=decay)
    rate = learning_rate(config, step)
    if decay == 0:
        assert rate == 3e-4
        return
    assert 3e-5 - 1e-12 <= rate <= 3e-4 + 1e-12
    assert learning_rate(config, 0) == pytest.approx(3e-4)
    if step >= decay:
        assert rate == pytest.approx(3e-5)
    else:
        assert learning_rate(config, step + 1) <= rate + 1e-15, "never rises"


def test_overall_accuracy_weighs_every_question_alike(registry: ReasoningGymRegistry) -> None:
    """A task with few held-out questions (leg_counting has 8 at difficulty 0) must not carry the
    same weight as one with a hundred: the overall is correct answers over all questions, and
    the mean over tasks is kept beside it as `task_mean_accuracy`."""
    chain = [ref for ref in registry.eval_questions(4, 99) if ref.task == "chain_sum"][:3]
    legs = [ref for ref in registry.eval_questions(4, 99) if ref.task == "leg_counting"][:1]
    refs = chain + legs
    right = [f"<answer>{registry.question(ref)[1]}</answer>" for ref in refs]
    texts = [*right[:3], "<answer>-1</answer>"]  # chain_sum 3 of 3, leg_counting 0 of 1
    result = summarize(registry, refs, texts, generations_to_log=0)
    assert result["accuracy"] == pytest.approx(3 / 4)
    assert result["task_mean_accuracy"] == pytest.approx(0.5)
    assert result["per_task"]["leg_counting"]["n"] == 1
