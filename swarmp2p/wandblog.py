"""Weights & Biases runs for `swarmp2p train` and `node` (`--wandb DIR`): optional, offline.

The same scalars as TensorBoard (swarmp2p/scalar_log.py), written by `wandb` in offline mode into
`DIR/wandb/offline-run-*`: nothing leaves the machine while the node runs (these hosts often have no
route to the W&B service, and a training node must not stall on one); `wandb sync DIR/wandb/offline-run-*`
uploads a run later. wandb is not a dependency of swarmp2p: without it, `--wandb` is a one-line error
at start-up, never a failure later.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swarmp2p.scalar_log import ScalarLog, ScalarLogUnavailable, ensure_writable_folder


class WandbUnavailable(ScalarLogUnavailable):
    """The wandb package is missing, or the run cannot be created. One line."""


class WandbLog(ScalarLog):
    """One offline W&B run under `log_dir`; points with one step are merged into one history row."""

    def __init__(self, log_dir: Path | str, *, name: str, job_type: str, config: Mapping[str, Any]) -> None:
        try:
            import wandb
        except ImportError as error:
            raise WandbUnavailable(f"--wandb needs the wandb package ({error}); pip install wandb") from None
        ensure_writable_folder(log_dir, "W&B runs", WandbUnavailable)
        try:
            self._run = wandb.init(
                mode="offline",
                dir=str(log_dir),
                project="swarmp2p",
                name=name,
                job_type=job_type,
                config=dict(config),
                # console="off": the node's own lines stay on its stdout, not captured and re-printed.
                settings=wandb.Settings(silent=True, console="off"),
            )
        except Exception as error:  # wandb raises its own kinds (UsageError, CommError, ...)
            raise WandbUnavailable(f"cannot start a W&B run in {log_dir}: {error}") from None
        self.log_dir = Path(log_dir)
        self._pending: dict[str, float] = {}
        self._step: int | None = None

    def _write(self, tag: str, value: float, step: int) -> None:
        # wandb keeps one history row per step and ignores a step lower than the last one, so the
        # points of a step are gathered and written together when the next step starts.
        if self._step is not None and step != self._step:
            self.flush()
        self._step = step
        self._pending[tag] = value

    def flush(self) -> None:
        if self._pending and self._step is not None:
            self._run.log(self._pending, step=self._step)
            self._pending = {}

    def close(self) -> None:
        self.flush()
        self._run.finish()
