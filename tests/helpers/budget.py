"""Example counts relative to the active hypothesis profile (see conftest.py)."""

from __future__ import annotations

from hypothesis import settings


def examples(share: float) -> int:
    """`share` of the active profile's max_examples (at least 1): for properties whose every
    example is expensive, so they run about as long as a cheap property does, and `deep`
    multiplies them like everything else."""
    return max(1, round(settings.default.max_examples * share))
