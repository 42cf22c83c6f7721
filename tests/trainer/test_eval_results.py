"""Remembered held-out evaluations (trainer/eval_results.py): the same weights, questions and
settings give the stored result, exactly what evaluating again gives; anything else evaluates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from swarmp2p.heldout import EvalSettings
from trainer import eval_results
from trainer.config import TrainerConfig
from trainer.policy import TrainerPolicy


def config(data_dir: Path, cache: Path, **overrides: Any) -> TrainerConfig:
    """A small raw tiny model: cheap to build and to evaluate; its answers do not matter here."""
    return TrainerConfig(
        data_dir=str(data_dir),
        model_cache=str(cache),
        tasks=("leg_counting", "basic_arithmetic"),
        tiny_hidden_size=32,
        tiny_layers=1,
        tiny_pretrain_steps=0,
        threads=1,
        max_new_tokens=8,
        eval_questions=6,
        **overrides,
    )


class Counting(TrainerPolicy):
    evaluations = 0

    def evaluate(self, split: str | None = None, step: int | None = None) -> dict[str, Any]:
        Counting.evaluations += 1
        return super().evaluate(split, step)


def scores(result: dict[str, Any]) -> tuple[Any, ...]:
    return (result["accuracy"], result["reward"], result["questions"], result["per_task"], result["samples"])


def test_a_new_data_dir_on_the_same_base_gets_the_remembered_result_which_is_what_evaluating_gives(
    tmp_path: Path,
) -> None:
    store = tmp_path / "results"
    Counting.evaluations = 0
    first = Counting(config(tmp_path / "a", tmp_path / "models"))
    measured = first.evaluate_remembered(store)
    assert Counting.evaluations == 1 and "remembered" not in measured
    assert len(list(store.glob("*.json"))) == 1

    second = Counting(config(tmp_path / "b", tmp_path / "models", seed=7))  # another node, same base
    remembered = second.evaluate_remembered(store)
    assert Counting.evaluations == 1, "answered from the store"
    assert remembered["remembered"] is True and remembered["seconds"] == measured["seconds"]
    assert scores(remembered) == scores(measured)
    assert scores(second.evaluate()) == scores(remembered), "what evaluating again gives"
    logged = [json.loads(line) for line in (tmp_path / "b" / "eval.jsonl").read_text().splitlines()]
    assert logged[0]["remembered"] is True and second.last_eval is not None


def test_other_weights_or_other_questions_evaluate_again(tmp_path: Path) -> None:
    store = tmp_path / "results"
    Counting.evaluations = 0
    base = Counting(config(tmp_path / "a", tmp_path / "models"))
    base.evaluate_remembered(store)
    other_questions = Counting(config(tmp_path / "b", tmp_path / "models", eval_seed=5))
    other_questions.evaluate_remembered(store)
    assert Counting.evaluations == 2
    import torch

    changed = Counting(config(tmp_path / "c", tmp_path / "models"))
    with torch.no_grad():
        next(changed.model.parameters()).view(-1)[0] += 1.0  # one weight: trained, say
    assert "remembered" not in changed.evaluate_remembered(store)
    assert Counting.evaluations == 3
    assert len(list(store.glob("*.json"))) == 3


def test_the_key_ignores_only_where_and_when(tmp_path: Path) -> None:
    policy = TrainerPolicy(config(tmp_path / "a", tmp_path / "models"))
    base = policy.config

    def key(**changes: Any) -> str:
        return eval_results.result_key(policy.model, attrs.evolve(base, **changes), "validation", "cpu")

    same = key()
    assert key(data_dir=str(tmp_path / "z"), seed=99, eval_every=3, model_cache="elsewhere") == same
    for changes in ({"eval_seed": 1}, {"eval_samples": 2}, {"eval_temperature": 0.9}, {"max_new_tokens": 9}):
        assert key(**changes) != same, changes
    assert eval_results.result_key(policy.model, base, "test", "cpu") != same


def test_an_unreadable_store_evaluates_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "results"
    policy = Counting(config(tmp_path / "a", tmp_path / "models"))
    Counting.evaluations = 0
    policy.evaluate_remembered(store)
    [path] = store.glob("*.json")
    path.write_text("{not json")
    again = policy.evaluate_remembered(store)
    assert Counting.evaluations == 2 and "remembered" not in again
    assert "unreadable" in caplog.text
    assert json.loads(path.read_text())["result"]["accuracy"] == again["accuracy"], "rewritten"


def test_the_node_asks_a_trainer_that_remembers() -> None:
    from swarmp2p.node_policy import start_point

    calls: list[str] = []

    class Remembering:
        def evaluate(self) -> dict[str, Any]:
            calls.append("evaluate")
            return {"accuracy": 0.1}

        def remembered_evaluation(self) -> dict[str, Any] | None:
            calls.append("remembered")
            return {"accuracy": 0.2, "remembered": True}

    async def before() -> Any:
        return await start_point(Remembering(), EvalSettings(every=5), lambda _: None)

    result = trio.run(before)
    assert calls == ["remembered"] and result is not None and result[0]["remembered"] is True


def test_remembered_evaluation_looks_up_without_evaluating(tmp_path: Path) -> None:
    store = tmp_path / "store"
    Counting.evaluations = 0
    policy = Counting(config(tmp_path / "a", tmp_path / "models"))
    assert policy.remembered_evaluation(store) is None and Counting.evaluations == 0
    stored = policy.evaluate_remembered(store)
    found = Counting(config(tmp_path / "b", tmp_path / "models")).remembered_evaluation(store)
    assert found is not None and found["remembered"] is True and Counting.evaluations == 1
    assert found["per_question"] == stored["per_question"]
