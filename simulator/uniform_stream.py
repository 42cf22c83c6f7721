"""`random.Random(seed).random()`'s exact sequence of floats, drawn one at a time or many at once.

The simulated world draws one uniform float per gossip delivery for its jitter: a million per
virtual round at 1000 peers, one Python-level loop step each. numpy's legacy MT19937 generator
is the same Mersenne Twister as CPython's `random` and turns two 32-bit outputs into a double
the same way (`genrand_res53`), so once it is given CPython's state it continues the very same
stream. `take(n)` then gives the next n floats as an array, which lets `SimWorld.publish`
compute a message's arrival slots in numpy and still produce the same report bytes as the
scalar loop it replaces (tests/simulator/test_uniform_stream.py checks the streams draw for draw).
"""

from __future__ import annotations

import random

import numpy as np

CHUNK = 4096
"""Floats drawn from the generator at a time for `random()`."""


class UniformStream:
    """The floats `random.Random(seed).random()` returns, in order: `random()` one, `take(n)` n."""

    __slots__ = ("_array", "_generator", "_list", "_next")

    def __init__(self, seed: int) -> None:
        words = random.Random(seed).getstate()[1]  # 624 state words, then the position
        self._generator = np.random.RandomState()
        self._generator.set_state(("MT19937", np.array(words[:624], dtype=np.uint32), words[624]))
        self._array = np.empty(0)
        self._list: list[float] = []
        self._next = 0

    def random(self) -> float:
        """The next float in [0, 1)."""
        index = self._next
        if index >= len(self._list):
            self._refill()
            index = 0
        self._next = index + 1
        return self._list[index]

    def take(self, count: int) -> np.ndarray:
        """The next `count` floats, as a float64 array (read-only use)."""
        start = self._next
        end = start + count
        if end <= len(self._list):
            self._next = end
            return self._array[start:end]
        head = self._array[start:]
        self._array, self._list, self._next = np.empty(0), [], 0
        return np.concatenate((head, self._generator.random_sample(count - len(head))))

    def _refill(self) -> None:
        self._array = self._generator.random_sample(CHUNK)
        self._list = self._array.tolist()
        self._next = 0
