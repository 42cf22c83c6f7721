"""95% intervals for learning figures: a gain is a mean over questions (and seeds), never a point.

A held-out accuracy is a mean over a fixed set of questions, so two evaluations of one model
differ by which questions happen to be easy, and two runs differ by their seed. Every gain this
project prints carries an interval that covers both:
- `gain_interval(before, after)`: one run, paired by question (the same questions before and
  after): a bootstrap over questions of the mean per-question gain;
- `grid_interval(rows)`: several runs (rows: seeds, columns: the same questions): a two-way
  bootstrap that resamples seeds and questions independently, so neither the seed spread nor the
  question sample is hidden;
- `paired_interval(differences)`: a comparison over paired seeds (setting A minus setting B on the
  same seed): Student's t over the seeds' differences (few seeds, so no bootstrap there).
Percentile bootstrap with a fixed generator seed: the same numbers always print the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import numpy as np

RESAMPLES = 4000
LEVEL = 0.95

# Student's t quantile t_{0.975, df} for df = 1..30; above 30 the normal 1.96 is within 2%.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@attrs.frozen
class Interval:
    mean: float
    low: float
    high: float
    n: int
    """Questions (or seeds) the mean is over."""

    def excludes_zero(self) -> bool:
        return self.low > 0.0 or self.high < 0.0

    def text(self, digits: int = 3) -> str:
        """`+0.123 [+0.081, +0.160]` — how every gain is printed."""
        return f"{self.mean:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def gain_interval(before: Sequence[float], after: Sequence[float], seed: int = 0) -> Interval:
    """Mean of after - before over paired questions, with a 95% bootstrap interval over questions."""
    if len(before) != len(after):
        raise ValueError(f"{len(before)} questions before, {len(after)} after: not paired")
    return grid_interval([np.asarray(after, float) - np.asarray(before, float)], seed=seed)


def mean_interval(values: Sequence[float], seed: int = 0) -> Interval:
    """Mean over questions with a 95% bootstrap interval (an accuracy, not a gain)."""
    return grid_interval([list(values)], seed=seed)


def grid_interval(rows: Sequence[Sequence[float]], seed: int = 0) -> Interval:
    """Mean of a seeds x questions grid, with a 95% two-way bootstrap interval (seeds and
    questions resampled independently; with one row, questions only)."""
    grid = np.asarray([list(row) for row in rows], dtype=float)
    if grid.ndim != 2 or grid.size == 0:
        raise ValueError("need at least one row of at least one value")
    seeds, questions = grid.shape
    mean = float(grid.mean())
    rng = np.random.default_rng(seed)
    pick_q = rng.integers(0, questions, size=(RESAMPLES, questions))
    if seeds == 1:
        stats = grid[0][pick_q].mean(axis=1)
    else:
        pick_s = rng.integers(0, seeds, size=(RESAMPLES, seeds))
        # mean over the resampled seeds' rows, then over the resampled questions' columns
        row_means = grid[pick_s]  # (R, seeds, questions)
        stats = np.take_along_axis(row_means.mean(axis=1), pick_q, axis=1).mean(axis=1)
    tail = (1.0 - LEVEL) / 2.0
    low, high = np.quantile(stats, [tail, 1.0 - tail])
    return Interval(mean=mean, low=float(low), high=float(high), n=questions * seeds)


def paired_interval(differences: Sequence[float]) -> Interval:
    """Mean of per-seed differences (A - B on the same seed) with Student's t 95% interval."""
    values = [float(x) for x in differences]
    n = len(values)
    if n == 0:
        raise ValueError("no differences")
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean=mean, low=-math.inf, high=math.inf, n=1)
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / (n - 1))
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * sd / math.sqrt(n)
    return Interval(mean=mean, low=mean - half, high=mean + half, n=n)
