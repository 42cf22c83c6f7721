"""protocol/stage_inputs.py: the digest prefix a later-stage reference carries on the wire. Every
verifier recomputes it from the batch it holds and compares it with the reference's, so all
peers must derive the same 63 bits: the first 8 bytes of the digest, big-endian, shifted right
by one (to fit a QuestionRef's uint63)."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from protocol.stage_inputs import InputRef, digest_prefix


def test_the_prefix_of_a_digest_is_pinned() -> None:
    digest = hashlib.sha256(b"batch").digest()
    assert digest[:8].hex() == "4bb24efc9641afc5"
    assert digest_prefix(digest) == 0x25D9277E4B20D7E2
    assert digest_prefix(b"\xff" * 32) == 2**63 - 1  # the largest uint63


@given(st.binary(min_size=32, max_size=32))
def test_the_prefix_is_the_top_63_bits_of_the_first_8_bytes(digest: bytes) -> None:
    prefix = digest_prefix(digest)
    assert 0 <= prefix < 2**63
    assert prefix == int.from_bytes(digest[:8], "big") // 2
    ref = InputRef("author", prefix, 3)
    assert InputRef.of(ref.question()) == ref  # survives the trip through a wire question
