"""protocol/seeds.py: the one derivation every random choice of the protocol starts from. Two
peers (and the JS and Python sides) must get the same numbers from the same parts, so the
exact recipe (sha256 of the parts joined by U+001F, first 8 bytes big-endian, top 63 bits) is
pinned, not just "some deterministic number"."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from protocol.seeds import derive_seed, unit_interval

parts = st.lists(st.one_of(st.text(max_size=12), st.integers(-(2**70), 2**70)), max_size=5)


def _recipe(*items: object) -> int:
    digest = hashlib.sha256("\x1f".join(str(item) for item in items).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def test_the_seed_recipe_is_pinned_by_a_known_vector() -> None:
    # sha256(b"swarm\x1f7\x1fpeer")[:8], big-endian, shifted right by one: a peer written
    # against the docstring alone must reproduce this number.
    expected = int.from_bytes(hashlib.sha256(b"swarm\x1f7\x1fpeer").digest()[:8], "big") >> 1
    assert derive_seed("swarm", 7, "peer") == expected
    assert unit_interval("swarm", 7, "peer") == expected / 2**63


@given(parts)
def test_a_seed_is_the_documented_63_bit_prefix_of_sha256(items: list[object]) -> None:
    seed = derive_seed(*items)
    assert seed == _recipe(*items)
    assert 0 <= seed < 2**63


@given(parts)
def test_a_unit_draw_lies_in_the_unit_interval_and_follows_the_seed(items: list[object]) -> None:
    value = unit_interval(*items)
    assert 0.0 <= value < 1.0
    assert value == derive_seed(*items) / 2**63


def test_the_separator_keeps_parts_apart() -> None:
    # ("ab", "c") and ("a", "bc") must not collide, or two different choices share a draw.
    assert derive_seed("ab", "c") != derive_seed("a", "bc")
    assert derive_seed("ab", "c") != derive_seed("abc")
