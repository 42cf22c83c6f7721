"""Model selection on the validation split, the result reported once on the test split.

GRPO on the tiny model gains most of its held-out accuracy in the first tens of steps and then
wanders (docs/trainer.md), so the last step is an arbitrary pick. `swarmp2p train` keeps the
weights of its best validation evaluation (the base included: a run that never beats it selects
it) and evaluates the test split twice, on the starting weights and on the selected ones. The
choice sees only validation, so the test figure is an honest estimate of what the run gained.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.define
class BestByValidation:
    """The weights of the best validation accuracy seen so far (ties keep the earlier step: fewer
    updates away from the base for the same measured accuracy)."""

    step: int | None = None
    accuracy: float = float("-inf")
    _weights: dict[str, Any] | None = None

    def offer(self, step: int, accuracy: float, model: Any) -> bool:
        """Keep `model`'s weights if `accuracy` beats the best so far; True when they were kept."""
        if accuracy <= self.accuracy:
            return False
        self.step, self.accuracy = step, accuracy
        # On the CPU: a GPU run should not hold a second copy of the model in device memory.
        state = model.state_dict()
        self._weights = {name: value.detach().to("cpu", copy=True) for name, value in state.items()}
        return True

    def restore(self, model: Any) -> None:
        """Load the kept weights into `model` (raises when nothing was offered)."""
        if self._weights is None:
            raise RuntimeError("no weights were selected: no validation evaluation ran")
        model.load_state_dict(self._weights)
