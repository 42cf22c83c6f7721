"""Model selection on validation, reported on test (trainer/selection.py, `swarmp2p train`).

The reported figure of a training run must come from questions no choice looked at: `train`
keeps the weights of its best *validation* evaluation and evaluates the *test* split on the
start and on those weights. These tests check that the choice follows validation (first best,
the base included), that the restored weights are the kept ones, and that selection never runs
on the test split itself.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.fast_config import ENV, TRAINER_TOML  # a fast trainer: no pre-training, short completions
from trainer.selection import BestByValidation


def _weights_set_to(model: torch.nn.Module, value: float) -> torch.nn.Module:
    with torch.no_grad():
        model.weight.fill_(value)
    return model


def test_the_best_validation_accuracy_is_kept_and_ties_keep_the_earlier_step() -> None:
    model = torch.nn.Linear(2, 2, bias=False)
    best = BestByValidation(window=1)
    assert best.offer(0, 0.30, _weights_set_to(model, 0.0))
    assert best.offer(20, 0.45, _weights_set_to(model, 2.0))
    assert not best.offer(40, 0.45, _weights_set_to(model, 4.0))  # a tie: the earlier step stays
    assert not best.offer(60, 0.10, _weights_set_to(model, 6.0))
    assert (best.step, best.accuracy) == (20, 0.45)
    best.restore(model)  # the model now holds step 60's weights; restore brings back step 20's
    assert torch.equal(model.weight, torch.full((2, 2), 2.0))


def test_a_one_evaluation_spike_is_not_chosen_over_a_plateau_that_stays_high() -> None:
    """Seed 2's validation curve (docs/trainer.md): 0.314, a spike of 0.419 at step 25, then
    0.38-0.39. The plain best takes the spike; the default window takes the plateau."""
    curve = [(0, 0.314), (25, 0.419), (50, 0.380), (75, 0.384), (100, 0.377), (125, 0.394), (150, 0.390)]
    chosen = {}
    for window in (1, 2, 3):
        model = torch.nn.Linear(2, 2, bias=False)
        best = BestByValidation(window=window)
        for step, accuracy in curve:
            best.offer(step, accuracy, _weights_set_to(model, float(step)))
        best.restore(model)
        assert torch.equal(model.weight, torch.full((2, 2), float(best.step)))
        chosen[window] = (best.step, best.accuracy)
    assert chosen[1] == (25, 0.419)
    assert chosen[2] == (50, 0.380)  # (0.419 + 0.380) / 2
    # (0.419 + 0.380 + 0.384) / 3: the spike still counts, but the weights chosen are on the plateau
    assert chosen[3] == (75, 0.384)
    assert BestByValidation().window == 3


def test_the_window_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        BestByValidation(window=0)


def test_a_base_that_nothing_beats_is_the_selection() -> None:
    model = torch.nn.Linear(2, 2, bias=False)
    best = BestByValidation()
    best.offer(0, 0.5, _weights_set_to(model, 1.0))
    for step in (10, 20):
        best.offer(step, 0.4, _weights_set_to(model, float(step)))
    best.restore(model)
    assert best.step == 0 and torch.equal(model.weight, torch.full((2, 2), 1.0))


def test_restore_without_any_evaluation_raises() -> None:
    with pytest.raises(RuntimeError, match="no validation evaluation"):
        BestByValidation().restore(torch.nn.Linear(2, 2))


def _train(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    config = tmp_path / "train.toml"
    config.write_text(TRAINER_TOML)
    done = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "train", "--config", str(config), "--steps", "3",
         "--questions", "2", "--eval-every", "1", "--out", "out", "--fresh", *flags],
        capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    return done, [json.loads(line) for line in lines]


def test_train_selects_on_validation_and_reports_test_on_the_start_and_the_selection(tmp_path: Path) -> None:
    done, records = _train(tmp_path)
    evals = [r["eval"] for r in records if "eval" in r]
    assert evals and all(e["split"] == "validation" for e in evals)
    (start,) = [r["test_start"] for r in records if "test_start" in r]
    (selected,) = [r["test_selected"] for r in records if "test_selected" in r]
    assert start["split"] == selected["split"] == "test"
    assert start["step"] == evals[0]["step"]
    # The selection is the first evaluation with the highest mean of the last 3 (the default).
    accuracies = [e["accuracy"] for e in evals]
    scores = [
        sum(accuracies[max(0, i - 2) : i + 1]) / len(accuracies[max(0, i - 2) : i + 1])
        for i in range(len(evals))
    ]
    first_best = evals[scores.index(max(scores))]
    assert selected["selected_step"] == first_best["step"]
    assert selected["step"] == first_best["step"]  # labelled with the weights' step, not the last
    assert re.search(rf"eval step {first_best['step']}: .* test split", done.stderr), done.stderr
    assert selected["validation_accuracy"] == first_best["accuracy"]
    assert selected["validation_score"] == pytest.approx(max(scores)) and selected["select_window"] == 3
    assert "test accuracy (the reported figure)" in done.stderr
    best_model = tmp_path / "out" / "best-model"
    assert (best_model / "config.json").exists() and (best_model / "tokenizer.json").exists()


def test_no_selection_on_the_test_split_or_when_switched_off(tmp_path: Path) -> None:
    for flags, folder in ((("--eval-split", "test"), "on-test"), (("--no-select",), "off")):
        run_dir = tmp_path / folder
        run_dir.mkdir()
        done, records = _train(run_dir, *flags)
        assert not any("test_start" in r or "test_selected" in r for r in records), flags
        assert not (run_dir / "out" / "best-model").exists()
        assert "the reported figure" not in done.stderr
