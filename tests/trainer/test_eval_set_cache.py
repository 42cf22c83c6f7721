"""The evaluation set's disk cache: the same set as a scan, without the scan, and never a wrong one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from protocol.messages import QuestionRef
from protocol.questions import evaluation_questions
from trainer.eval_set_cache import cached_evaluation_questions, set_key

TASKS = ("alpha", "beta")


class CountingTexts:
    """A task space of 300 distinct texts per task (so the scan finds its set), counting lookups."""

    def __init__(self, variant: str = "") -> None:
        self.calls = 0
        self.variant = variant

    def __call__(self, ref: QuestionRef) -> str:
        self.calls += 1
        return f"{ref.task} question {ref.index % 300}{self.variant}"


def cached(
    texts: Callable[[QuestionRef], str], cache_dir: Path, **overrides: object
) -> tuple[QuestionRef, ...]:
    args: dict[str, object] = {"per_task": 10, "split": "validation", "difficulty": 0, **overrides}
    return cached_evaluation_questions(
        TASKS,
        7,
        args["per_task"],  # type: ignore[arg-type]
        texts,
        args["split"],  # type: ignore[arg-type]
        difficulty=args["difficulty"],  # type: ignore[arg-type]
        cache_dir=cache_dir,
    )


def test_a_stored_set_is_the_scanned_set_and_costs_one_lookup_per_question(tmp_path: Path) -> None:
    scanned = evaluation_questions(TASKS, 7, 10, CountingTexts(), "validation")
    first = CountingTexts()
    assert cached(first, tmp_path) == scanned
    assert first.calls > 100  # the scan looked at many items to find 20
    again = CountingTexts()
    assert cached(again, tmp_path) == scanned
    assert again.calls == len(scanned) == 20  # only the stored questions, each regenerated once to check it


@pytest.mark.parametrize("damage", ["not json", '{"refs": [["alpha", 7]]}', "", '{"texts_sha256": 1}'])
def test_a_damaged_file_is_rescanned_and_rewritten(tmp_path: Path, damage: str) -> None:
    scanned = cached(CountingTexts(), tmp_path)
    (path,) = tmp_path.iterdir()
    path.write_text(damage)
    texts = CountingTexts()
    assert cached(texts, tmp_path) == scanned
    assert texts.calls > len(scanned)  # a rescan, not the damaged file
    assert json.loads(path.read_text())["refs"][0] == [
        scanned[0].task,
        scanned[0].dataset_seed,
        scanned[0].index,
    ]


def test_questions_that_regenerate_differently_are_rescanned(tmp_path: Path) -> None:
    """Another reasoning-gym (same version string, other texts) must never get the old set."""
    cached(CountingTexts(), tmp_path)
    other = CountingTexts(variant=" (v2)")
    fresh = evaluation_questions(TASKS, 7, 10, CountingTexts(variant=" (v2)"), "validation")
    assert cached(other, tmp_path) == fresh
    assert other.calls > len(fresh)


def test_a_stored_set_with_a_question_outside_its_split_is_refused(tmp_path: Path) -> None:
    scanned = cached(CountingTexts(), tmp_path)
    (path,) = tmp_path.iterdir()
    stored = json.loads(path.read_text())
    # A training-question index swapped in (its text digest re-stamped to match): still refused.
    training_index = next(i for i in range(10_000_000, 10_000_300) if all(i != ref.index for ref in scanned))
    stored["refs"][0][2] = training_index
    path.write_text(json.dumps(stored))
    texts = CountingTexts()
    assert cached(texts, tmp_path) == scanned
    assert texts.calls > len(scanned)


def test_every_input_of_the_set_is_in_its_key() -> None:
    base = set_key(TASKS, 0, 7, 10, "validation")
    assert (
        len(
            {
                base,
                set_key(TASKS, 1, 7, 10, "validation"),
                set_key(TASKS, 0, 8, 10, "validation"),
                set_key(TASKS, 0, 7, 11, "validation"),
                set_key(TASKS, 0, 7, 10, "test"),
                set_key(("alpha",), 0, 7, 10, "validation"),
            }
        )
        == 6
    )


def test_a_cache_path_that_is_a_file_is_only_a_slower_start(tmp_path: Path) -> None:
    blocker = tmp_path / "eval-sets"
    blocker.write_text("not a directory")  # mkdir fails, for root too (CI runs as root)
    assert cached(CountingTexts(), blocker) == evaluation_questions(
        TASKS, 7, 10, CountingTexts(), "validation"
    )
    assert blocker.read_text() == "not a directory"


def test_the_registry_reads_the_stored_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two registries (two processes' worth): the second regenerates only the set's own items."""
    from trainer.tasks import ReasoningGymRegistry

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = ReasoningGymRegistry(["leg_counting", "number_sequence"], difficulty=0)
    refs = first.eval_questions(12, 5, "validation")
    assert list((tmp_path / "swarmp2p" / "eval-sets").iterdir())
    second = ReasoningGymRegistry(["leg_counting", "number_sequence"], difficulty=0)
    generated: list[QuestionRef] = []
    original = second._dataset_and_entry

    def counting(ref: QuestionRef):  # type: ignore[no-untyped-def]
        generated.append(ref)
        return original(ref)

    monkeypatch.setattr(second, "_dataset_and_entry", counting)
    assert second.eval_questions(12, 5, "validation") == refs
    assert sorted(generated, key=repr) == sorted(refs, key=repr)
