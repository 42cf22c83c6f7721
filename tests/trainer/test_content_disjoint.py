"""Held-out questions are new in content, not only in text, for every default task.

A near-duplicate is a question with the same content key (trainer/content_keys.py: the same
sequence ending and answer, the same operands, the same animals and counts). The keys here are
computed from the reasoning-gym items themselves, independently of how the split is cut, so the
tests fail on a split by text (the split before content keys: 47 of 100 number_sequence test
questions shared their ending and answer with a pre-training item) and pass on the content split.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.game import SingleStageGame
from protocol.messages import QuestionRef
from protocol.questions import questions_for
from trainer.config import TrainerConfig
from trainer.content_keys import content_key
from trainer.pretrain import PRETRAIN_DATASET_SEED, examples
from trainer.tasks import ReasoningGymRegistry
from trainer.tiny import corpus_questions

DEFAULTS = TrainerConfig()
PRETRAIN_ITEMS = 6000
"""About a quarter of the default pre-training stream (800 steps x 32): enough to meet every key
of a few-thousand-key task many times over."""


@pytest.fixture(scope="module")
def registry() -> ReasoningGymRegistry:
    return ReasoningGymRegistry(DEFAULTS.tasks, DEFAULTS.weights, DEFAULTS.difficulty)


@pytest.fixture(scope="module")
def heldout_keys(registry: ReasoningGymRegistry) -> dict[str, set[str]]:
    """task -> content keys of the default validation and test sets."""
    keys: dict[str, set[str]] = {task: set() for task in registry.task_names()}
    for split in ("validation", "test"):
        for ref in registry.eval_questions(DEFAULTS.eval_questions, DEFAULTS.eval_seed, split):
            keys[ref.task].add(key_of(registry, ref))
    return keys


def key_of(registry: ReasoningGymRegistry, ref: QuestionRef) -> str:
    return content_key(ref.task, registry.entry(ref))


@pytest.fixture(scope="module")
def pretraining_keys(registry: ReasoningGymRegistry) -> dict[str, set[str]]:
    keys: dict[str, set[str]] = {}
    stream = examples(registry, random.Random(DEFAULTS.tiny_seed))
    for ref, _prompt, _answer in itertools.islice(stream, PRETRAIN_ITEMS):
        assert ref.dataset_seed == PRETRAIN_DATASET_SEED
        keys.setdefault(ref.task, set()).add(key_of(registry, ref))
    return keys


@pytest.mark.parametrize("task", DEFAULTS.tasks)
def test_no_pretraining_item_is_a_near_duplicate_of_a_heldout_question(
    task: str, heldout_keys: dict[str, set[str]], pretraining_keys: dict[str, set[str]]
) -> None:
    assert len(heldout_keys[task]) >= 50, "a held-out set too small to measure anything"
    shared = heldout_keys[task] & pretraining_keys[task]
    assert not shared, f"{len(shared)} held-out {task} questions share their content with pre-training"


@pytest.mark.parametrize("task", DEFAULTS.tasks)
def test_no_training_draw_is_a_near_duplicate_of_a_heldout_question(
    task: str, registry: ReasoningGymRegistry, heldout_keys: dict[str, set[str]]
) -> None:
    """Neither the swarm's assignment nor `swarmp2p train`'s sampler ever draws a held-out
    question: they are not drawn and then dropped, they are never drawn."""
    game = SingleStageGame(seed=7, tasks=DEFAULTS.tasks, questions_per_round=4, registry=registry)
    drawn = [ref for r in range(150) for peer in ("peer-a", "peer-b") for ref in game.questions(r, 0, peer)]
    drawn += registry.sample(random.Random(3), 600, dataset_seed=11)
    keys = {key_of(registry, ref) for ref in drawn if ref.task == task}
    assert len(keys) > 30
    shared = keys & heldout_keys[task]
    assert not shared, f"{len(shared)} training draws of {task} are near-duplicates of held-out questions"


def test_the_tokenizer_corpus_holds_no_near_duplicate_of_a_heldout_question(
    registry: ReasoningGymRegistry, heldout_keys: dict[str, set[str]]
) -> None:
    for task in registry.task_names():
        corpus = {key_of(registry, ref) for ref in corpus_questions(registry) if ref.task == task}
        assert corpus, f"the corpus reads no {task} text"
        shared = corpus & heldout_keys[task]
        assert not shared, f"the tokenizer reads {len(shared)} {task} texts whose content is held out"


@pytest.mark.parametrize(
    ("task", "a", "b"),
    [
        # the same ending and answer in two different sequences
        ("number_sequence", {"sequence": [1, 3, 5, 7]}, {"sequence": [10, 8, 6, 5, 7]}),
        ("chain_sum", {"expression": "58 + 26"}, {"expression": "26 - 58"}),
        ("products", {"expression": "6 * 2"}, {"expression": "2 * 6"}),
        ("leg_counting", {"animals": {"cow": 2, "spider": 3}}, {"animals": {"spider": 3, "cow": 2}}),
    ],
)
def test_near_duplicates_share_a_key(task: str, a: dict, b: dict) -> None:
    assert content_key(task, {"question": "x", "metadata": a}) == content_key(
        task, {"question": "y", "metadata": b}
    )


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**63 - 1),
    round_=st.integers(0, 10_000),
    count=st.integers(1, 8),
    excluded=st.frozensets(st.integers(0, 40), max_size=20),
)
def test_excluded_questions_are_skipped_in_the_same_stream(
    seed: int, round_: int, count: int, excluded: frozenset[int]
) -> None:
    """`questions_for(..., exclude=rule)` is the unexcluded stream with excluded draws left out:
    the first `count` drawable questions in draw order, none of them excluded."""

    def exclude(ref: QuestionRef) -> bool:
        return ref.index % 41 in excluded

    kept = questions_for(seed, round_, 0, "p", ["a", "b"], count, exclude=exclude)
    stream = questions_for(seed, round_, 0, "p", ["a", "b"], 64)
    assert kept == tuple(ref for ref in stream if not exclude(ref))[:count]
