"""95% intervals of learning figures (trainer/intervals.py): they contain their mean, shrink with
more questions, pair by question, and use Student's t for few paired seeds."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.intervals import gain_interval, grid_interval, mean_interval, paired_interval

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(st.lists(unit, min_size=1, max_size=60))
def test_an_interval_contains_its_mean_and_is_reproducible(values: list[float]) -> None:
    interval = mean_interval(values)
    assert interval.low - 1e-12 <= interval.mean <= interval.high + 1e-12
    assert interval.mean == pytest.approx(sum(values) / len(values))
    assert mean_interval(values) == interval  # a fixed generator: the same numbers, the same interval


def test_a_gain_is_paired_by_question() -> None:
    """Questions that differ a lot in difficulty but all gain exactly +0.1: paired, the interval
    is the point; unpaired, the spread of difficulty would have made it wide."""
    rng = random.Random(1)
    before = [rng.random() * 0.8 for _ in range(100)]
    after = [b + 0.1 for b in before]
    interval = gain_interval(before, after)
    assert interval.mean == pytest.approx(0.1)
    assert interval.high - interval.low == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="paired"):
        gain_interval(before, after[:-1])


def test_more_questions_give_a_narrower_interval() -> None:
    rng = random.Random(2)
    few = [float(rng.random() < 0.3) for _ in range(25)]
    many = [float(rng.random() < 0.3) for _ in range(400)]
    width = lambda values: (lambda i: i.high - i.low)(mean_interval(values))  # noqa: E731
    assert width(many) < width(few) / 2.5  # about sqrt(16) = 4 times narrower


def test_seeds_that_disagree_widen_a_grid_interval() -> None:
    """The two-way bootstrap resamples seeds too: the same questions with seeds that disagree
    give a wider interval than with seeds that agree."""
    rng = random.Random(3)
    base = [rng.random() * 0.2 for _ in range(100)]
    agree = [[x + 0.1 for x in base] for _ in range(5)]
    disagree = [[x + shift for x in base] for shift in (-0.1, 0.0, 0.1, 0.2, 0.3)]
    narrow, wide = grid_interval(agree), grid_interval(disagree)
    assert narrow.mean == pytest.approx(wide.mean)
    assert wide.high - wide.low > 3 * (narrow.high - narrow.low)
    assert grid_interval([base]) == mean_interval(base)  # one row: questions only


def test_paired_seeds_use_students_t() -> None:
    differences = [0.01, 0.03, 0.02, 0.04, 0.00]
    interval = paired_interval(differences)
    sd = math.sqrt(sum((x - 0.02) ** 2 for x in differences) / 4)
    assert interval.mean == pytest.approx(0.02)
    assert interval.high - interval.mean == pytest.approx(2.776 * sd / math.sqrt(5))
    assert paired_interval([0.5]).low == -math.inf  # one seed says nothing about the spread
