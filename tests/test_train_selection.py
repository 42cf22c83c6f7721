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
from test_data_dir import ENV, TRAINER_TOML  # a fast trainer: no pre-training, short completions

from trainer.selection import BestByValidation


def _weights_set_to(model: torch.nn.Module, value: float) -> torch.nn.Module:
    with torch.no_grad():
        model.weight.fill_(value)
    return model


def test_the_best_validation_accuracy_is_kept_and_ties_keep_the_earlier_step() -> None:
    model = torch.nn.Linear(2, 2, bias=False)
    best = BestByValidation()
    assert best.offer(0, 0.30, _weights_set_to(model, 0.0))
    assert best.offer(20, 0.45, _weights_set_to(model, 2.0))
    assert not best.offer(40, 0.45, _weights_set_to(model, 4.0))  # a tie: the earlier step stays
    assert not best.offer(60, 0.10, _weights_set_to(model, 6.0))
    assert (best.step, best.accuracy) == (20, 0.45)
    best.restore(model)  # the model now holds step 60's weights; restore brings back step 20's
    assert torch.equal(model.weight, torch.full((2, 2), 2.0))


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
    # The selection is the first evaluation with the highest validation accuracy.
    top = max(e["accuracy"] for e in evals)
    first_best = next(e for e in evals if e["accuracy"] == top)
    assert selected["selected_step"] == first_best["step"]
    assert selected["step"] == first_best["step"]  # labelled with the weights' step, not the last
    assert re.search(rf"eval step {first_best['step']}: .* test split", done.stderr), done.stderr
    assert selected["validation_accuracy"] == top
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
