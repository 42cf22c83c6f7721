"""Opens the scalar logs a run asked for (`--tensorboard DIR`, `--wandb DIR`) as one ScalarLog.

Apart from swarmp2p/scalar_log.py so that the writers (swarmp2p/tblog.py, swarmp2p/wandblog.py)
import the base class and this module imports the writers: one direction, no circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from swarmp2p.scalar_log import ScalarLog, ScalarLogUnavailable, combined
from swarmp2p.tblog import TensorBoardLog
from swarmp2p.wandblog import WandbLog


def open_scalar_log(
    *, tensorboard: str, wandb: str, name: str, job_type: str, config: Mapping[str, Any]
) -> ScalarLog | None:
    """The logs asked for (`--tensorboard DIR`, `--wandb DIR`; "" = not asked), as one ScalarLog,
    or None when none is. Raises ScalarLogUnavailable."""
    logs: list[ScalarLog] = []
    if tensorboard:
        logs.append(TensorBoardLog(tensorboard))
    if wandb:
        try:
            logs.append(WandbLog(wandb, name=name, job_type=job_type, config=config))
        except ScalarLogUnavailable:
            for log in logs:
                log.close()
            raise
    return combined(logs)
