"""Pre-training's near misses: a wrong answer close to the right one, and only integer answers."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from trainer.pretrain import near_miss


@given(st.integers(-10_000, 10_000), st.integers(0, 2**32))
def test_a_near_miss_of_an_integer_is_wrong_by_one_or_two(value: int, seed: int) -> None:
    moved = int(near_miss(str(value), random.Random(seed)))
    assert moved != value and abs(moved - value) <= 2


@given(st.sampled_from(["1/2", "abc", "3.5", "", "True", "['a', 'b']"]))
def test_other_answers_are_left_alone(answer: str) -> None:
    assert near_miss(answer, random.Random(0)) == answer


def test_near_misses_spread_both_ways() -> None:
    rng = random.Random(1)
    offsets = {int(near_miss("10", rng)) - 10 for _ in range(200)}
    assert offsets == {-2, -1, 1, 2}
