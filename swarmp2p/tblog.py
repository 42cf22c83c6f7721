"""TensorBoard event files for `swarmp2p train`, `node` and `simulate` (`--tensorboard DIR`).

Scalars, one point per training step (train) or per round (node):

- `train/reward`, `train/loss`, `train/kl`, `train/grad_norm`, `train/clip_fraction`,
  `train/groups_used` (whatever of these the step's metrics hold);
- `eval/accuracy`, `eval/reward` and `eval/accuracy/<task>` for each held-out evaluation.

Written with `torch.utils.tensorboard.SummaryWriter` (torch is a dependency already; it needs the
`tensorboard` package for the event-file format) and read with `tensorboard --logdir DIR`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TRAIN_SCALARS = {
    "reward_mean": "train/reward",
    "loss": "train/loss",
    "kl": "train/kl",
    "grad_norm": "train/grad_norm",
    "clip_fraction": "train/clip_fraction",
    "groups_used": "train/groups_used",
}


class TensorBoardUnavailable(Exception):
    """The tensorboard package is missing or the folder cannot be written. One line."""


def check_tensorboard(log_dir: Path | str) -> None:
    """Raise TensorBoardUnavailable now (one line) rather than after a long run; writes no event
    file (an empty one would show as a run of its own)."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as error:
        raise TensorBoardUnavailable(
            f"--tensorboard needs the tensorboard package ({error}); pip install tensorboard"
        ) from None
    try:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TensorBoardUnavailable(f"cannot write TensorBoard logs to {log_dir}: {error}") from None
    if not os.access(log_dir, os.W_OK):
        raise TensorBoardUnavailable(f"cannot write TensorBoard logs to {log_dir}: not writable")


class TensorBoardLog:
    """One run's event files under `log_dir`."""

    def __init__(self, log_dir: Path | str) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise TensorBoardUnavailable(
                f"--tensorboard needs the tensorboard package ({error}); pip install tensorboard"
            ) from None
        try:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            self._writer = SummaryWriter(log_dir=str(log_dir), flush_secs=10)
        except OSError as error:
            raise TensorBoardUnavailable(f"cannot write TensorBoard logs to {log_dir}: {error}") from None
        self.log_dir = Path(log_dir)

    def _scalar(self, tag: str, value: Any, step: int) -> None:
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            self._writer.add_scalar(tag, float(value), int(step))

    def scalar(self, tag: str, value: Any, step: int) -> None:
        """One point; a missing or non-finite value is skipped."""
        self._scalar(tag, value, step)

    def train(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One training step's metrics (TrainerPolicy.train's dict); loss/kl/grad_norm only exist
        for a step that updated the model."""
        for key, tag in TRAIN_SCALARS.items():
            if key in metrics:
                self._scalar(tag, metrics[key], step)

    def evaluation(self, step: int, result: Mapping[str, Any]) -> None:
        """One held-out evaluation (TrainerPolicy.evaluate's dict)."""
        self._scalar("eval/accuracy", result.get("accuracy"), step)
        self._scalar("eval/reward", result.get("reward"), step)
        per_task = result.get("per_task")
        if isinstance(per_task, Mapping):
            for task, stats in sorted(per_task.items()):
                if isinstance(stats, Mapping):
                    self._scalar(f"eval/accuracy/{task}", stats.get("accuracy"), step)
        self._writer.flush()

    def round(self, record: Mapping[str, Any]) -> None:
        """One finished node round (RoundRecord.to_json()): x is the round number."""
        number = record.get("round")
        if not isinstance(number, int):
            return
        self._scalar("round/reward", record.get("reward"), number)
        self._scalar("round/rollouts_in", record.get("rollouts_in"), number)
        rejected = record.get("rejected")
        if isinstance(rejected, Mapping):
            self._scalar("round/rejected", sum(v for v in rejected.values() if isinstance(v, int)), number)
        metrics = record.get("train_metrics")
        if isinstance(metrics, Mapping):
            self.train(number, metrics)
        evaluation = record.get("eval")
        if isinstance(evaluation, Mapping):
            self.evaluation(number, evaluation)
        self._writer.flush()

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
