"""--wandb: offline Weights & Biases runs with the same scalars as TensorBoard; optional."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from swarmp2p.scalar_log import FanOut, ScalarLogUnavailable
from swarmp2p.scalar_writers import open_scalar_log
from swarmp2p.wandblog import WandbLog
from tests.helpers.fast_config import TRAINER_TOML
from tests.helpers.wandb_runs import history


def test_a_run_holds_one_row_per_step_with_the_tensorboard_tags(tmp_path: Path) -> None:
    log = WandbLog(tmp_path, name="unit", job_type="test", config={"lr": 3e-4})
    log.evaluation(0, {"accuracy": 0.25, "reward": 0.4, "per_task": {"leg_counting": {"accuracy": 0.5}}})
    log.train(1, {"reward_mean": 0.3, "loss": 0.1, "kl": float("nan"), "groups_used": 8})
    log.round({"round": 2, "reward": 0.6, "rollouts_in": 4, "rejected": {"stale": 2, "forged": 1},
               "train_metrics": {"reward_mean": 0.6}, "eval": {"accuracy": 0.5, "reward": 0.7}})  # fmt: skip
    log.scalar("train/reward", True, 3)  # a bool is not a number: skipped
    log.close()

    rows = {row["_step"]: row for row in history(tmp_path)}
    assert sorted(rows) == [0, 1, 2]
    assert rows[0]["eval/accuracy"] == 0.25 and rows[0]["eval/accuracy/leg_counting"] == 0.5
    assert rows[1]["train/reward"] == 0.3 and rows[1]["train/groups_used"] == 8
    assert "train/kl" not in rows[1]  # non-finite values are skipped, as in TensorBoard
    assert rows[2]["round/reward"] == 0.6 and rows[2]["round/rejected"] == 3
    assert rows[2]["train/reward"] == 0.6 and rows[2]["eval/accuracy"] == 0.5


def test_tensorboard_and_wandb_together_get_every_point(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = open_scalar_log(
        tensorboard=str(tmp_path / "tb"), wandb=str(tmp_path / "wb"), name="both", job_type="test", config={}
    )
    assert isinstance(log, FanOut)
    for step in range(3):
        log.train(step, {"reward_mean": step / 10})
    log.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.value for e in events.Scalars("train/reward")] == pytest.approx([0.0, 0.1, 0.2])
    assert [row["train/reward"] for row in history(tmp_path / "wb")] == [0.0, 0.1, 0.2]
    assert open_scalar_log(tensorboard="", wandb="", name="none", job_type="test", config={}) is None


def test_without_wandb_installed_the_flag_is_a_one_line_error_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "no-wandb" / "wandb"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('No module named wandb')\n")
    code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(blocker.parent)!r})
        from swarmp2p.scalar_log import ScalarLogUnavailable
        from swarmp2p.scalar_writers import open_scalar_log
        try:
            open_scalar_log(tensorboard="", wandb={str(tmp_path)!r}, name="x", job_type="t", config={{}})
        except ScalarLogUnavailable as error:
            print(error)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "--wandb needs the wandb package (No module named wandb); pip install wandb"
    assert issubclass(ScalarLogUnavailable, Exception)


def test_train_writes_an_offline_run(tmp_path: Path) -> None:
    config = tmp_path / "train.toml"
    config.write_text(TRAINER_TOML)
    # WANDB_SERVICE is set by a wandb.init earlier in this process; a child would report to that
    # process's wandb service (and its folder) instead of starting its own.
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    done = subprocess.run(
        [sys.executable, "-m", "swarmp2p.cli", "train", "--config", str(config), "--steps", "2",
         "--questions", "2", "--eval-every", "2", "--wandb", "wb", "--out", "out"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wandb: offline run in wb/wandb" in done.stdout + done.stderr
    rows = history(tmp_path / "wb")
    assert [row["_step"] for row in rows if "train/reward" in row] == [1, 2]
    # Before training; the later one only after 2 model updates (a step with no informative group
    # updates nothing), so only the first is certain.
    assert next(row["_step"] for row in rows if "eval/accuracy" in row) == 0
