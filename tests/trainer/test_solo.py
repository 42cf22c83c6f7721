"""trainer/solo.py, the loop of `swarmp2p train`, over a scripted policy (no model): what it
evaluates, saves, selects and writes, in order. The command end to end is in test_train_selection."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import attrs
import torch

from trainer.config import TrainerConfig
from trainer.solo import SoloHooks, SoloRun, prepare, train_alone


class SavableLinear(torch.nn.Linear):
    def save_pretrained(self, folder: Path) -> None:
        folder.mkdir(exist_ok=True)
        (folder / "weights.txt").write_text(str(self.weight.item()))


class ScriptedPolicy:
    """Validation accuracy follows `curve` (one value per evaluation); every train() updates."""

    def __init__(self, config: TrainerConfig, curve: list[float], checkpoint: bool = False) -> None:
        self.config, self.curve, self.checkpoint = config, list(curve), checkpoint
        self.step = 0
        self.saved: list[int] = []
        self.warmed: int = 0
        self.model = SavableLinear(1, 1, bias=False)
        torch.nn.init.zeros_(self.model.weight)  # step 0's weights
        self.tokenizer = self
        self.registry = self

    def sample(self, rng: random.Random, n: int, seed: int) -> list[int]:
        return [rng.randrange(100) for _ in range(n)]

    def generate(self, questions: list[int]) -> list[int]:
        return questions

    def train(self, groups: list[int]) -> dict[str, Any]:
        self.step += 1
        with torch.no_grad():
            self.model.weight.fill_(float(self.step))  # the weights say which step they are
        return {"reward_mean": self.step / 10, "groups_used": len(groups), "loss": 0.0}

    def evaluate(self, split: str | None = None, step: int | None = None) -> dict[str, Any]:
        split = split or self.config.eval_split  # the curve's split, as TrainerPolicy.evaluate
        # validation follows the script; test reads the weights (so it says whose weights they are)
        accuracy = self.curve.pop(0) if split == "validation" else float(self.model.weight.item())
        return {
            "step": self.step if step is None else step, "accuracy": accuracy, "accuracy_interval": None,
            "task_mean_accuracy": accuracy, "reward": accuracy, "per_task": {}, "questions": 2,
            "split": split, "per_question": [accuracy, accuracy], "seconds": 0.0,
            "samples": self.config.eval_samples,
        }

    def save(self) -> None:
        self.saved.append(self.step)

    def load(self) -> bool:
        return self.checkpoint

    def warmup(self, steps: int) -> list[float]:
        self.warmed = steps
        return [1.0, 0.5]

    def save_pretrained(self, folder: Path) -> None:
        folder.mkdir(exist_ok=True)


def config(**changes: Any) -> TrainerConfig:
    return attrs.evolve(TrainerConfig(), eval_every=2, eval_report_samples=16, **changes)


def test_selection_restores_the_best_validation_weights_and_reports_test_on_them(tmp_path: Path) -> None:
    # Evaluations at steps 0, 2, 4, 6: validation best at step 4 (window 1).
    policy = ScriptedPolicy(config(), curve=[0.1, 0.3, 0.9, 0.2])
    run = SoloRun(steps=6, questions=3, save_every=4, select_window=1)
    seen: list[int] = []
    started: list[int] = []
    hooks = SoloHooks(started=lambda: started.append(policy.step), stepped=lambda step, m: seen.append(step))
    result = train_alone(policy, run, tmp_path, hooks=hooks)

    assert started == [0] and seen == [1, 2, 3, 4, 5, 6]
    assert result.rewards == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    assert [e["step"] for e in result.evals] == [0, 2, 4, 6]
    assert result.best is not None and result.best.step == 4
    assert result.test_start is not None and result.test_start["accuracy"] == 0.0  # the start's weights
    assert result.selected is not None and result.selected["accuracy"] == 4.0  # step 4's weights, restored
    assert result.selected["samples"] == 16 and result.evals[0]["samples"] == 4  # report vs curve samples
    assert policy.saved == [4, 6]  # every save_every steps, and the last step
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert list(lines[0]) == ["test_start"] and list(lines[-1]) == ["test_selected"]
    assert lines[-1]["test_selected"]["selected_step"] == 4
    assert sum("eval" in line for line in lines) == 4 and sum("reward_mean" in line for line in lines) == 6
    assert (tmp_path / "best-model" / "weights.txt").read_text() == "4.0"


def test_no_selection_off_the_validation_split(tmp_path: Path) -> None:
    policy = ScriptedPolicy(config(eval_split="test"), curve=[])  # evaluations read the weights
    result = train_alone(policy, SoloRun(steps=2, questions=1), tmp_path)
    assert result.best is None and result.test_start is None and result.selected is None
    assert not (tmp_path / "best-model").exists()


def test_prepare_warms_a_fresh_start_up_and_sets_the_learning_rate_horizon() -> None:
    fresh = ScriptedPolicy(config(), curve=[])
    assert prepare(fresh, SoloRun(steps=50, questions=1, warmup_steps=5)) == [1.0, 0.5]
    assert fresh.warmed == 5 and fresh.config.lr_decay_steps == 50

    resumed = ScriptedPolicy(config(), curve=[], checkpoint=True)
    assert prepare(resumed, SoloRun(steps=50, questions=1, warmup_steps=5, constant_lr=True)) == []
    assert resumed.warmed == 0 and resumed.config.lr_decay_steps == 0
