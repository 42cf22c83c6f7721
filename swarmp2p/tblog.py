"""TensorBoard event files for `swarmp2p train`, `node` and `simulate` (`--tensorboard DIR`).

The scalars are swarmp2p/scalar_log.py's (`train/*`, `eval/*`, `round/*`), one point per training
step (train) or per round (node). Written with `torch.utils.tensorboard.SummaryWriter` (torch is a
dependency already; it needs the `tensorboard` package for the event-file format) and read with
`tensorboard --logdir DIR`.
"""

from __future__ import annotations

from pathlib import Path

from swarmp2p.scalar_log import ScalarLog, ScalarLogUnavailable, ensure_writable_folder


class TensorBoardUnavailable(ScalarLogUnavailable):
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
    ensure_writable_folder(log_dir, "TensorBoard logs", TensorBoardUnavailable)


class TensorBoardLog(ScalarLog):
    """One run's event files under `log_dir`."""

    def __init__(self, log_dir: Path | str) -> None:
        check_tensorboard(log_dir)  # the package and the folder, each a one-line error
        from torch.utils.tensorboard import SummaryWriter

        try:
            self._writer = SummaryWriter(log_dir=str(log_dir), flush_secs=10)
        except OSError as error:
            raise TensorBoardUnavailable(f"cannot write TensorBoard logs to {log_dir}: {error}") from None
        self.log_dir = Path(log_dir)

    def _write(self, tag: str, value: float, step: int) -> None:
        self._writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
