"""The one percentile rule every figure of the project uses (reports, experiments, benches).

Linear interpolation between the two nearest ranks of the sorted values (numpy's default,
"type 7"): the q-th percentile of n values sits at position q * (n - 1) of the sorted list, so
the 0th is the minimum, the 100th the maximum and the 50th the usual median. A nearest-rank or
floor rule would jump between samples, and two tables of the same run would disagree.
Pure Python, no imports beyond the standard library: any layer above protocol/ may use it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The `q`-quantile (0 <= q <= 1) of `values` in any order; NaN when there are none (a row
    with no samples shows as missing, not as 0)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    low_value, high_value = ordered[low], ordered[high]
    if low_value == high_value:
        return low_value  # also keeps inf (a never-finished row) instead of inf - inf = nan
    return low_value + (high_value - low_value) * (position - low)
