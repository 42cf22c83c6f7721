"""One percentile rule: linear interpolation between ranks, as numpy's default."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainer.percentile import percentile


def test_interpolates_between_the_two_nearest_ranks() -> None:
    assert percentile([0.5, 0.3], 0.5) == pytest.approx(0.4)
    assert percentile([0.3, 0.5], 0.9) == pytest.approx(0.48)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.1) == pytest.approx(1.3)


def test_ends_and_the_median() -> None:
    values = [7.0, 1.0, 4.0]
    assert (percentile(values, 0.0), percentile(values, 0.5), percentile(values, 1.0)) == (1.0, 4.0, 7.0)


def test_no_values_is_nan_and_a_quantile_outside_0_1_is_refused() -> None:
    assert math.isnan(percentile([], 0.5))
    with pytest.raises(ValueError):
        percentile([1.0], 1.5)


def test_an_infinite_sample_stays_infinite() -> None:
    assert math.isinf(percentile([0.2, math.inf, math.inf], 0.99))


@given(
    st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50),
    st.floats(0.0, 1.0),
)
def test_agrees_with_numpys_default_rule(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.quantile(values, q)), rel=1e-9, abs=1e-6)
