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

DEFAULT_WINDOW = 3


@attrs.define
class BestByValidation:
    """The weights of the best windowed validation accuracy seen so far (ties keep the earlier
    step: fewer updates away from the base for the same measured accuracy). `accuracy` is the
    chosen evaluation's own validation accuracy, `score` the windowed mean it was chosen by."""

    window: int = attrs.field(default=DEFAULT_WINDOW, validator=attrs.validators.ge(1))
    step: int | None = None
    accuracy: float = float("-inf")
    score: float = float("-inf")
    _recent: list[float] = attrs.Factory(list)
    _weights: dict[str, Any] | None = None

    def offer(self, step: int, accuracy: float, model: Any) -> bool:
        """Keep `model`'s weights if the mean of the last `window` accuracies, `accuracy` the
        newest, beats the best so far; True when they were kept."""
        self._recent = [*self._recent, accuracy][-self.window :]
        score = sum(self._recent) / len(self._recent)
        if score <= self.score:
            return False
        self.step, self.accuracy, self.score = step, accuracy, score
        # On the CPU: a GPU run should not hold a second copy of the model in device memory.
        state = model.state_dict()
        self._weights = {name: value.detach().to("cpu", copy=True) for name, value in state.items()}
        return True

    def restore(self, model: Any) -> None:
        """Load the kept weights into `model` (raises when nothing was offered)."""
        if self._weights is None:
            raise RuntimeError("no weights were selected: no validation evaluation ran")
        model.load_state_dict(self._weights)
