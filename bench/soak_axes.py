"""The soak benches' RSS panel: an axis fitted to the values after the warm-up."""

from __future__ import annotations

from typing import Any


def fit_to_settled(axis: Any, settled: list[float], label: str) -> None:
    """Fitted to the values after the warm-up: tens of MiB of growth on a 500 MiB process is
    flat on an axis from 0 (the start-up's lower samples fall below it)."""
    low, high = min(settled), max(settled)
    margin = max(5.0, 0.1 * (high - low))
    axis.set_ylim(low - margin, high + margin)
    axis.set_ylabel(f"{label}\nafter the warm-up", fontsize=8)
