"""Which scalars a training run logs, independent of where they are written.

`ScalarLog` turns a training step's metrics, a held-out evaluation and a node's round record into
(tag, value, step) points; a writer subclass (TensorBoard in swarmp2p/tblog.py, Weights & Biases in
swarmp2p/wandblog.py) only says how one point is written. So both tools show the same tags:

- `train/reward`, `train/loss`, `train/kl`, `train/grad_norm`, `train/clip_fraction`,
  `train/groups_used`, and the off-policy correction's `train/behaviour_weight_mean`,
  `train/behaviour_weight_max`, `train/behaviour_truncated`, `train/behaviour_groups`,
  `train/behaviour_missing` (whatever of these the step's metrics hold);
- `eval/accuracy`, `eval/reward` and `eval/accuracy/<task>` for each held-out evaluation;
- `round/reward`, `round/rollouts_in`, `round/rejected` per node round (x = the round number).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

TRAIN_SCALARS = {
    "reward_mean": "train/reward",
    "loss": "train/loss",
    "kl": "train/kl",
    "grad_norm": "train/grad_norm",
    "clip_fraction": "train/clip_fraction",
    "groups_used": "train/groups_used",
    "behaviour_weight_mean": "train/behaviour_weight_mean",
    "behaviour_weight_max": "train/behaviour_weight_max",
    "behaviour_truncated": "train/behaviour_truncated",
    "behaviour_groups": "train/behaviour_groups",
    "behaviour_missing": "train/behaviour_missing",
}


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite int or float (not a bool), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


class ScalarLog:
    """The tags above, written through `_write(tag, value, step)`; subclasses add `flush`/`close`."""

    def _write(self, tag: str, value: float, step: int) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        """Make what was written readable now (default: nothing to do)."""

    def close(self) -> None:
        self.flush()

    def scalar(self, tag: str, value: Any, step: int) -> None:
        """One point; a missing or non-finite value is skipped."""
        number = finite_number(value)
        if number is not None:
            self._write(tag, number, int(step))

    def train(self, step: int, metrics: Mapping[str, Any]) -> None:
        """One training step's metrics (TrainerPolicy.train's dict); loss/kl/grad_norm only exist
        for a step that updated the model."""
        for key, tag in TRAIN_SCALARS.items():
            if key in metrics:
                self.scalar(tag, metrics[key], step)

    def evaluation(self, step: int, result: Mapping[str, Any]) -> None:
        """One held-out evaluation (TrainerPolicy.evaluate's dict)."""
        self.scalar("eval/accuracy", result.get("accuracy"), step)
        self.scalar("eval/reward", result.get("reward"), step)
        per_task = result.get("per_task")
        if isinstance(per_task, Mapping):
            for task, stats in sorted(per_task.items()):
                if isinstance(stats, Mapping):
                    self.scalar(f"eval/accuracy/{task}", stats.get("accuracy"), step)
        self.flush()

    def round(self, record: Mapping[str, Any]) -> None:
        """One finished node round (RoundRecord.to_json()): x is the round number."""
        number = record.get("round")
        if not isinstance(number, int) or isinstance(number, bool):
            return
        self.scalar("round/reward", record.get("reward"), number)
        self.scalar("round/rollouts_in", record.get("rollouts_in"), number)
        rejected = record.get("rejected")
        if isinstance(rejected, Mapping):
            self.scalar("round/rejected", sum(v for v in rejected.values() if isinstance(v, int)), number)
        metrics = record.get("train_metrics")
        if isinstance(metrics, Mapping):
            self.train(number, metrics)
        evaluation = record.get("eval")
        if isinstance(evaluation, Mapping):
            self.evaluation(number, evaluation)
        self.flush()


class FanOut(ScalarLog):
    """Every point to each of several logs (`--tensorboard` and `--wandb` together)."""

    def __init__(self, logs: Sequence[ScalarLog]) -> None:
        self.logs = list(logs)

    def _write(self, tag: str, value: float, step: int) -> None:
        for log in self.logs:
            log._write(tag, value, step)

    def flush(self) -> None:
        for log in self.logs:
            log.flush()

    def close(self) -> None:
        for log in self.logs:
            log.close()


def combined(logs: Sequence[ScalarLog | None]) -> ScalarLog | None:
    """None, the one log, or a FanOut of the logs that are not None."""
    present = [log for log in logs if log is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else FanOut(present)


class ScalarLogUnavailable(Exception):
    """A requested log cannot be written (its package is missing, its folder is not writable).
    One line, said at start-up rather than after a long run."""


def ensure_writable_folder(log_dir: Path | str, what: str, error: type[ScalarLogUnavailable]) -> None:
    """Create `log_dir` and check it can be written, or raise `error` naming `what` is written."""
    try:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    except OSError as reason:
        raise error(f"cannot write {what} to {log_dir}: {reason}") from None
    if not os.access(log_dir, os.W_OK):
        raise error(f"cannot write {what} to {log_dir}: not writable")
