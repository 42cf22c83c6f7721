"""The real trainer plays the later stages of answer -> critique -> resolve: it samples from
each item's critique or resolve prompt and claims exactly what a verifier re-scores, so an
honest trainer's critique and resolve batches verify (protocol/acr.py)."""

from __future__ import annotations

import attrs
import pytest

from protocol.acr import CRITIQUE, RESOLVE, AnswerCritiqueResolveGame, InputStore
from protocol.answer_verify import VERIFY, AnswerVerifyGame
from protocol.game import SingleStageGame
from protocol.messages import QuestionRef, RolloutBatch
from trainer.config import TrainerConfig
from trainer.policy import TrainerPolicy
from trainer.prompts.acr import prompt
from trainer.prompts.answer_verify import prompt as verify_prompt

TASKS = ("basic_arithmetic", "calendar_arithmetic")


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> TrainerPolicy:
    config = TrainerConfig(
        data_dir=str(tmp_path_factory.mktemp("stage-items")),
        tasks=TASKS,
        tiny_hidden_size=64,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=12,
        num_generations=3,
        format_reward=0.5,
        seed=5,
    )
    return TrainerPolicy(config)


def test_the_trainer_answers_critique_and_resolve_items_that_verify(policy: TrainerPolicy) -> None:
    rules = SingleStageGame(seed=1, tasks=TASKS, questions_per_round=2, registry=policy.registry)
    game = AnswerCritiqueResolveGame(answer=rules)
    store = InputStore()
    for author in ("alice", "bob"):
        questions = [QuestionRef(TASKS[0], 1, 7 if author == "alice" else 8)]
        batch = RolloutBatch("s", 0, 0, author, tuple(policy.generate(questions)))
        store.add(author.encode() * 8, batch)
    items = game.items(0, CRITIQUE, "carol", store)
    assert items and "Candidate answers" in prompt(items[0], "Q?")
    critique = RolloutBatch("s", 0, CRITIQUE, "carol", tuple(policy.generate_items(items)))
    assert [g.question for g in critique.groups] == [item.ref for item in items]
    assert game.resolve(critique, store) == items and game.verify(critique, items).ok
    store.add(b"c" * 32, critique, items)
    resolve_items = game.items(0, RESOLVE, "dave", store)
    resolution = RolloutBatch("s", 0, RESOLVE, "dave", tuple(policy.generate_items(resolve_items)))
    assert game.verify(resolution, game.resolve(resolution, store)).ok  # type: ignore[arg-type]
    metrics = policy.train(game.training_groups(RESOLVE, resolve_items, resolution.groups))
    assert metrics["groups_in"] == len(resolve_items)


def test_the_trainer_answers_verify_items_that_verify(policy: TrainerPolicy) -> None:
    rules = SingleStageGame(seed=1, tasks=TASKS, questions_per_round=2, registry=policy.registry)
    game = AnswerVerifyGame(answer=rules)
    store = InputStore()
    for author in ("alice", "bob"):
        questions = [QuestionRef(TASKS[0], 1, 7 if author == "alice" else 8)]
        batch = RolloutBatch("s", 0, 0, author, tuple(policy.generate(questions)))
        store.add(author.encode() * 8, batch)
    items = game.items(0, VERIFY, "carol", store)
    assert len(items) == 2 and "yes or no" in verify_prompt(items[0], "Q?")
    verdicts = RolloutBatch("s", 0, VERIFY, "carol", tuple(policy.generate_items(items)))
    assert [g.question for g in verdicts.groups] == [item.ref for item in items]
    assert game.resolve(verdicts, store) == items and game.verify(verdicts, items).ok
    # an inflated claim is caught: the reward is the item's own score of the text
    group = verdicts.groups[0]
    lying = attrs.evolve(
        verdicts,
        groups=(
            attrs.evolve(
                group, completions=tuple(attrs.evolve(c, reward=c.reward + 0.5) for c in group.completions)
            ),
        ),
    )
    assert game.verify(lying, items[:1]).reason == "forged_reward"
