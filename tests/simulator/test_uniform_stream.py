"""UniformStream (simulator/uniform_stream.py) is random.Random(seed).random()'s stream, also in bulk.

The simulated world's publish takes a message's jitter draws in one `take(n)`; the report bytes
for a seed stay those of the one-draw-at-a-time loop only if the floats are the same, in order.
"""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from simulator.uniform_stream import CHUNK, UniformStream


@given(
    seed=st.integers(0, 2**64),
    calls=st.lists(st.one_of(st.just(0), st.integers(1, 3 * CHUNK)), min_size=1, max_size=12),
)
def test_single_and_bulk_draws_continue_random_randoms_stream(seed: int, calls: list[int]) -> None:
    reference = random.Random(seed)
    stream = UniformStream(seed)
    for count in calls:
        if count == 0:
            assert stream.random() == reference.random()
        else:  # across the buffer's edge too: counts up to three chunks
            assert stream.take(count).tolist() == [reference.random() for _ in range(count)]
